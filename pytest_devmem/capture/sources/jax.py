"""JAX's own counters as a raw source: the backend's `memory_stats()`, where the backend keeps them
(GPUs and TPUs). They validate the replayed trace; the record's figures come from the trace.

JAX is never imported here: the source looks only if the test (or its suite) already imported it.

Two limits of those counters, measured on an H200 (docs/gpu-validation.md): `peak_bytes_in_use` is the
process's peak, which JAX cannot reset, so a test that stays below an earlier test's peak has no peak
of its own to read (it is reported as unknown, with the bytes it is known to have held); and on a GPU
the peak counts the scratch buffers XLA:GPU's autotuner allocates while a program compiles (113 MiB
for a 256x512 by 512x1024 matmul), which no trace holds: the trace is the program's run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..jax import jax_backend_started
from .base import Reading, unavailable

StatsReader = Callable[[], "tuple[str, dict[str, Any] | None] | None"]
"""Reads (platform, memory_stats()) of JAX's first device; None where JAX is not imported."""


def read_jax_stats() -> tuple[str, dict[str, Any] | None] | None:
    """JAX's first device's platform and memory_stats(); ("none", {}) before JAX started a backend."""
    jax = sys.modules.get("jax")
    if jax is None or not hasattr(jax, "devices"):
        return None
    if not jax_backend_started():  # nothing allocated yet; and starting JAX's backends is the test's
        return "none", {}  # to do (their start-up messages are then the test's captured output)
    try:
        device = jax.devices()[0]
        return str(device.platform), device.memory_stats()
    except Exception:
        return None


def ran_nothing() -> Reading:
    """The reading of a test that ran no JAX: the same whether JAX ran before it or not."""
    return unavailable("jax", "JAX ran nothing in this test", unused=True)


class JaxSource:
    """Bytes in use and peak from JAX's allocator on its first device, over one test."""

    name = "jax"

    def __init__(self, read_stats: StatsReader = read_jax_stats) -> None:
        self._read_stats = read_stats  # a GPU's or TPU's counters are faked through this in unit tests
        self._start: dict[str, Any] | None = None

    def start(self) -> None:
        found = self._read_stats()
        self._start = found[1] if found is not None else None

    def stop(self) -> Reading:
        found = self._read_stats()
        if found is None:
            return unavailable(self.name, "JAX was not imported by this test", unused=True)
        platform, stats = found
        if platform == "none":
            return unavailable(self.name, "JAX started no backend in this test", unused=True)
        if not stats:
            return unavailable(
                self.name, f"JAX keeps no memory statistics on {platform}; its allocations are in the trace"
            )
        start = self._start or {}
        in_use_start = int(start.get("bytes_in_use", 0))
        in_use_end = int(stats.get("bytes_in_use", 0))
        figures: dict[str, int | float | str] = {
            key: value for key, value in stats.items() if isinstance(value, (int, float))
        }
        figures["platform"] = platform
        figures["bytes_in_use_start"] = in_use_start
        reserved = int(stats["peak_pool_bytes"]) if "peak_pool_bytes" in stats else None
        peak, peak_start = int(stats.get("peak_bytes_in_use", 0)), int(start.get("peak_bytes_in_use", 0))
        if 0 < peak_start >= peak:
            # the process's peak was set before this test and cannot be reset: this test's own peak is
            # not in the counters, only that it held at least what it held at its end
            figures["held_at_least_bytes"] = max(0, in_use_end - in_use_start)
            return Reading(
                self.name,
                True,
                "JAX's memory_stats(): this test's peak is unknown: the process's peak, which JAX cannot "
                "reset, was set before the test began (figures: held_at_least_bytes)",
                peak_bytes_reserved=reserved,
                figures=figures,
            )
        note = "JAX's memory_stats(): its allocator's peak above what it held when the test began"
        if platform in ("gpu", "cuda", "rocm"):
            note += (
                "; it counts XLA:GPU's autotuning scratch of any program compiled in the test, which the trace does not"
            )
        return Reading(
            self.name,
            True,
            note,
            peak_bytes_in_use=max(0, peak - in_use_start),
            peak_bytes_reserved=reserved,
            figures=figures,
        )

    def close(self) -> None:
        pass
