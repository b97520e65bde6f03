"""TensorFlow as a source: `reset_memory_stats` before the test, `get_memory_info` after. Both work on
CPU too (TensorFlow 2.21). TensorFlow is never imported here, only looked up if the test loaded it."""

from __future__ import annotations

import sys
from typing import Any

from .base import Reading, unavailable


class TensorFlowSource:
    """Current and peak bytes of TensorFlow's allocator on its first GPU, else on the CPU."""

    name = "tensorflow"

    def __init__(self) -> None:
        self._device: str | None = None
        self._start = 0
        self._reset = False

    def _tf(self) -> Any:
        tf = sys.modules.get("tensorflow")
        return tf if tf is not None and hasattr(tf, "config") else None

    def _pick_device(self, tf: Any) -> str:
        if self._device is None:
            self._device = "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"
        return self._device

    def start(self) -> None:
        self._reset = False
        tf = self._tf()
        if tf is None:
            return
        device = self._pick_device(tf)
        try:
            tf.config.experimental.reset_memory_stats(device)
            self._start = int(tf.config.experimental.get_memory_info(device)["current"])
            self._reset = True
        except (ValueError, RuntimeError):
            self._start = 0

    def stop(self) -> Reading:
        tf = self._tf()
        if tf is None:
            return unavailable(self.name, "TensorFlow was not imported by this test", unused=True)
        device = self._pick_device(tf)
        try:
            info = tf.config.experimental.get_memory_info(device)
        except (ValueError, RuntimeError) as exc:
            return unavailable(self.name, f"TensorFlow keeps no memory statistics for {device}: {exc}")
        notes = []
        if device.startswith("CPU"):
            notes.append("on CPU these are TensorFlow's host-allocator bytes")
        if not self._reset:
            notes.append("TensorFlow was first imported during this test; its peak counts from process start")
        note = "; ".join(notes)
        peak = max(0, int(info["peak"]) - self._start)
        return Reading(
            self.name,
            True,
            note,
            peak_bytes_in_use=peak,  # get_memory_info has `current` and `peak` only: nothing reserved is stated
            figures={
                "device": device,
                "current_bytes": int(info["current"]),
                "peak_bytes": int(info["peak"]),
                "start_bytes": self._start,
            },
        )

    def close(self) -> None:
        pass
