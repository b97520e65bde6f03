"""JAX as a source. On a GPU: the backend's `memory_stats()`. On CPU, which keeps no such statistics:
the peak bytes of live arrays (polled) and the memory analysis of functions compiled during the test.

JAX is never imported here: the source looks only if the test (or its suite) already imported it.
"""

from __future__ import annotations

import sys
from typing import Any

from .base import Reading, unavailable
from .sampler import Sampler


def _live_array_bytes(jax: Any) -> int:
    return sum(array.nbytes for array in jax.live_arrays())


def _compiled_footprint(executable: Any) -> int | None:
    """Arguments + outputs + temporaries - aliased bytes of one compiled executable, if XLA says."""
    try:
        stats = executable.get_compiled_memory_stats()
    except Exception:
        return None
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes)


class JaxSource:
    """Peak device memory JAX used during a test, the best way the backend allows."""

    name = "jax"

    def __init__(self, sampler: Sampler) -> None:
        self._sampler = sampler
        self._jax: Any = None
        self._compiled: list[Any] = []
        self._hooked = False
        self._hook_note = ""
        self._probing = False
        self._start = self._peak = 0
        self._stats_peak_at_start = 0

    def _attach(self) -> bool:
        """Find an imported JAX and hook compilation once; False if JAX is not loaded."""
        if self._jax is None:
            jax = sys.modules.get("jax")
            if jax is None or not hasattr(jax, "live_arrays"):
                return False
            self._jax = jax
            self._hook_compiler()
        return True

    def _hook_compiler(self) -> None:
        """Wrap JAX's internal compile entry point to see each executable compiled during a test."""
        try:
            from jax._src import compiler  # type: ignore[import-not-found]

            original = compiler.backend_compile_and_load
        except (ImportError, AttributeError):
            self._hook_note = "this JAX version offers no compile hook; compiled memory analysis is not reported"
            return
        compiled = self._compiled

        def backend_compile_and_load(*args: Any, **kwargs: Any) -> Any:
            executable = original(*args, **kwargs)
            compiled.append(executable)
            return executable

        backend_compile_and_load.__wrapped__ = original  # type: ignore[attr-defined]
        compiler.backend_compile_and_load = backend_compile_and_load
        self._hooked = True

    def _device_stats(self) -> dict[str, Any] | None:
        try:
            return self._jax.devices()[0].memory_stats()
        except Exception:
            return None

    def _probe(self) -> None:
        in_use = _live_array_bytes(self._jax)
        if in_use > self._peak:
            self._peak = in_use

    def start(self) -> None:
        self._compiled.clear()
        self._probing = False
        if not self._attach():
            return
        stats = self._device_stats()
        if stats:
            self._start = self._peak = int(stats.get("bytes_in_use", 0))
            self._stats_peak_at_start = int(stats.get("peak_bytes_in_use", 0))
        else:
            self._start = self._peak = _live_array_bytes(self._jax)
        self._sampler.add(self._probe)
        self._probing = True

    def stop(self) -> Reading:
        if self._probing:
            self._sampler.remove(self._probe)
            self._probing = False
        if not self._attach():
            return unavailable(self.name, "JAX was not imported by this test", unused=True)
        started = self._start
        stats = self._device_stats()
        if stats:
            return self._gpu_reading(stats, started)
        self._probe()
        live_peak = self._peak - started if self._peak >= started else 0
        footprints = [f for f in (_compiled_footprint(e) for e in self._compiled) if f is not None]
        compiled_peak = max(footprints, default=0)
        figures: dict[str, int | float | str] = {
            "backend": self._jax.default_backend(),
            "live_arrays_start_bytes": started,
            "live_arrays_peak_bytes": self._peak,
            "live_arrays_end_bytes": _live_array_bytes(self._jax),
        }
        if self._hooked:
            figures["compiled_functions"] = len(self._compiled)
            figures["compiled_peak_bytes"] = compiled_peak
        self._compiled.clear()
        peak = max(live_peak, compiled_peak)
        return Reading(self.name, True, self._hook_note, peak_bytes_in_use=peak, peak_bytes_reserved=peak, figures=figures)

    def _gpu_reading(self, stats: dict[str, Any], started: int) -> Reading:
        in_use_peak = self._peak
        if int(stats.get("peak_bytes_in_use", 0)) > self._stats_peak_at_start:
            in_use_peak = max(in_use_peak, int(stats["peak_bytes_in_use"]))  # the process peak was set in this test
        pool = stats.get("pool_bytes") or stats.get("bytes_reserved")
        largest_free = stats.get("largest_free_block_bytes")
        fragmentation = None
        if pool and largest_free is not None:
            free = int(pool) - int(stats.get("bytes_in_use", 0))
            fragmentation = (free - int(largest_free)) / free if free > 0 else 0.0
        figures: dict[str, int | float | str] = {key: value for key, value in stats.items() if isinstance(value, (int, float))}
        figures["backend"] = self._jax.default_backend()
        return Reading(
            self.name,
            True,
            peak_bytes_in_use=max(0, in_use_peak - started),
            peak_bytes_reserved=int(stats.get("peak_pool_bytes") or pool or 0) or None,
            fragmentation=fragmentation,
            figures=figures,
        )

    def close(self) -> None:
        if self._probing:
            self._sampler.remove(self._probe)
        if self._hooked:
            from jax._src import compiler  # type: ignore[import-not-found]

            original = getattr(compiler.backend_compile_and_load, "__wrapped__", None)
            if original is not None:
                compiler.backend_compile_and_load = original
            self._hooked = False
