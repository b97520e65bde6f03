"""JAX's own counters as a raw source: the backend's `memory_stats()`, where the backend keeps them
(GPUs and TPUs). They validate the replayed trace; the record's figures come from the trace.

JAX is never imported here: the source looks only if the test (or its suite) already imported it.
"""

from __future__ import annotations

import sys
from typing import Any

from ..jax.backend import jax_backend_started
from .base import Reading, unavailable


class JaxSource:
    """Bytes in use and peak from JAX's allocator on its first device, over one test."""

    name = "jax"

    def __init__(self) -> None:
        self._start: dict[str, Any] | None = None

    def _stats(self) -> tuple[str, dict[str, Any] | None] | None:
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

    def start(self) -> None:
        found = self._stats()
        self._start = found[1] if found is not None else None

    def stop(self) -> Reading:
        found = self._stats()
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
        peak = int(stats.get("peak_bytes_in_use", 0))
        if peak <= int(start.get("peak_bytes_in_use", 0)):  # the process peak was set before this test
            peak = max(in_use_start, int(stats.get("bytes_in_use", 0)))
        figures: dict[str, int | float | str] = {
            key: value for key, value in stats.items() if isinstance(value, (int, float))
        }
        figures["platform"] = platform
        figures["bytes_in_use_start"] = in_use_start
        return Reading(
            self.name,
            True,
            "JAX's memory_stats(): its allocator's peak above what it held when the test began",
            peak_bytes_in_use=max(0, peak - in_use_start),
            peak_bytes_reserved=int(stats["peak_pool_bytes"]) if "peak_pool_bytes" in stats else None,
            figures=figures,
        )

    def close(self) -> None:
        pass
