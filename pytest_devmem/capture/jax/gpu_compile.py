"""Each JAX executable's buffer sizes as XLA:GPU would compile it, on a machine without a GPU.

XLA:GPU assigns buffers differently from XLA:CPU (an attention step: no temporary on CPU, 1 GiB on
an H100), so the CPU compile's `temp_size_in_bytes` misstates what a GPU run allocates. JAX 0.10
compiles for a GPU that is not present ("deviceless" ahead-of-time compilation) once the CUDA
plugin is installed beside the CPU jaxlib (cuda_plugin.py: which plugin, and what the environment
needs before JAX starts). Each executable's jaxpr is lowered again for that many GPUs
(`lowering`: a sharded executable keeps its mesh and specs, on GPUs) and compiled on the
compile-only client; its sizes are XLA's memory analysis of that compile, per device.

Results are cached per program, for the session and on disk (size_cache.py). An executable that
cannot be compiled this way gets an `Unavailable` with the reason (no plugin, host callbacks, a
custom call with no CUDA handler...), and keeps its CPU sizes. JAX is imported lazily.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
import weakref
from collections.abc import Iterable
from typing import Any

from ...model.buffers import ProgramBuffers
from ...model.device import PRESETS
from ...model.gpu_targets import GpuSpec
from ...units import format_size
from . import compilers, lowering
from .buffers import dump_options, read_dump
from .cuda_plugin import cuda_topology, explain
from .size_cache import SizeCache
from .sizes import ExecutableSizes, SizerError, Unavailable

__all__ = ["GpuSizer", "compile_with_buffers"]


class GpuSizer(SizeCache):
    """Sizes JAX executables for one GPU target; cached per executable and, with `cache_dir`, on disk.
    The TPU sizer (tpu_compile.py) is the same machinery with another compiler behind
    `_target_devices`, `_target_text`, `VERSION_MODULES` and `_failed`."""

    @property
    def VERSION_MODULES(self) -> tuple[str, ...]:  # noqa: N802 - the TPU sizer's is a class constant
        """Modules whose versions key the disk cache: a new compiler gives new sizes."""
        major = compilers.installed_cuda_major() or compilers.CUDA_MAJORS[-1]
        return ("jaxlib", *(module + ".version" for _, module in compilers.plugin_modules(major)))

    def __init__(
        self,
        spec: GpuSpec,
        cache_dir: str | os.PathLike[str] | None = None,
        *,
        user_cache_dir: str | os.PathLike[str] | None = None,
        store_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.spec = spec
        self.target = (
            spec.preset
            if spec.memory_bytes == _preset_memory(spec.preset)
            else f"{spec.preset} with {format_size(spec.memory_bytes)}"
        )
        self._start(cache_dir, user_cache_dir, store_dir)

    def _start(
        self,
        cache_dir: str | os.PathLike[str] | None,
        user_cache_dir: str | os.PathLike[str] | None = None,
        store_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """The sizer's state before its first executable; the cache's (size_cache.py) with it."""
        self._start_cache(self.spec.memory_per_device, cache_dir, user_cache_dir, store_dir)
        self.installed = False
        self.note = ""
        self.compiles = 0
        self.compile_seconds = 0.0
        self.lowering_seconds = 0.0  # of compile_seconds: JAX lowering the program again for the target
        self._results: weakref.WeakKeyDictionary[Any, ExecutableSizes | Unavailable] = weakref.WeakKeyDictionary()
        self._topologies: dict[int, list[Any]] = {}
        self._problem: str | None = None

    def install(self) -> bool:
        """Hook JAX's lowering (JAX imported already); False, with `note` saying why, where it cannot be."""
        if self.installed:
            return True
        problem = self._compiler_problem()
        if problem is not None:
            self.note = problem
            return False
        if not lowering.hooks.install():
            self.note = lowering.hooks.note
            return False
        self.installed = True
        return True

    def _compiler_problem(self) -> str | None:
        """Why the target's compiler cannot be used here, or None once it is loaded."""
        return compilers.load("gpu")

    def uninstall(self) -> None:
        if self.installed:
            lowering.hooks.uninstall()
            self.installed = False

    def sizes_for(self, executable: Any) -> ExecutableSizes | Unavailable:
        """`executable` (a `pxla.ExecuteReplicated`, as the capture sees each run) compiled for the target."""
        if not self.installed:
            return Unavailable(self.note or "the GPU sizer is not installed")
        with self._lock:
            try:
                return self._results[executable]
            except KeyError:
                pass
            except TypeError:
                return Unavailable(f"{type(executable).__name__} objects cannot be tracked")
            result = self._size(executable)
            self._results[executable] = result
            return result

    # -- compiling -------------------------------------------------------------------------

    def _size(self, executable: Any) -> ExecutableSizes | Unavailable:
        recipe = lowering.hooks.by_executable.get(executable)
        if recipe is None:
            return Unavailable(
                "JAX built this executable outside jit's lowering (pmap, an internal helper) or before the GPU sizer was installed"
            )
        return self._size_recipe(recipe)

    def _size_recipe(self, recipe: Any) -> ExecutableSizes | Unavailable:
        """The program JAX lowered in `recipe`, compiled for the target (or found in a cache)."""
        if not recipe.devices:
            return Unavailable("the executable's device assignment is not known")
        try:
            gpus = self._target_devices(len(recipe.devices))
        except SizerError as exc:
            return Unavailable(str(exc))
        known = self._source_key(recipe, len(gpus))  # a program sized before answers without lowering it again
        cached = self._read_cache(known, len(gpus))
        if cached is not None:
            return cached
        try:
            started = time.perf_counter()
            with lowering.retargeting():
                computation = lowering.lower_for(recipe, gpus)
                self.lowering_seconds += time.perf_counter() - started
                # the same program as the target's lowering has it (another jit object, or shardings
                # that lower alike): compiled once
                lowered = self._cache_key(computation, len(gpus))
                cached = self._read_cache(lowered, len(gpus))
                if cached is not None:
                    if known is not None:  # on disk under its own name too: the next run need not lower it
                        self._write_cache(known, cached)
                        return dataclasses.replace(cached, key=known)
                    return cached
                key = known or lowered
                compiled, buffers, buffers_note = compile_with_buffers(computation)
                stats = compiled.xla_executable.get_compiled_memory_stats()
            seconds = time.perf_counter() - started
        except lowering.NotMappable as exc:
            return Unavailable(str(exc))
        except Exception as exc:
            return self._failed(exc)
        self.compiles += 1
        self.compile_seconds += seconds
        sizes = ExecutableSizes(
            target=self.target,
            devices=len(gpus),
            temp_bytes=int(stats.temp_size_in_bytes),
            output_bytes=int(stats.output_size_in_bytes),
            argument_bytes=int(stats.argument_size_in_bytes),
            alias_bytes=int(stats.alias_size_in_bytes),
            code_bytes=int(stats.generated_code_size_in_bytes),
            compile_seconds=seconds,
            source="compiled",
            buffers=buffers,
            buffers_note=buffers_note,
            key=key or "",
        )
        self._write_cache(key, sizes)
        if lowered is not None and lowered != key:
            self._by_module[lowered] = dataclasses.replace(sizes, compile_seconds=0.0, source="cache")
        return sizes

    def _failed(self, exc: Exception) -> Any:
        """What a compile that raised gives: an `Unavailable` with a reason a user can act on."""
        return Unavailable(explain(exc))

    def _target_text(self) -> str:
        """The target as the disk cache's key names it."""
        return self.spec.target_config()

    def _target_devices(self, count: int) -> list[Any]:
        """`count` compile-only GPUs of the target on one host."""
        if count in self._topologies:
            return self._topologies[count]
        topologies = self._topologies_module()
        try:
            topology = cuda_topology(topologies, self.spec.target_config(), count)
        except SizerError as exc:
            self._problem = str(exc)
            raise
        devices = list(topology.devices)
        self._topologies[count] = devices
        return devices

    def _topologies_module(self) -> Any:
        """`jax.experimental.topologies`; a `SizerError`, kept for every later ask, where this JAX has
        none or the target failed before."""
        if self._problem is not None:
            raise SizerError(self._problem)
        try:
            from jax.experimental import topologies  # JAX: imported only where it runs
        except ImportError as exc:
            self._problem = f"jax.experimental.topologies could not be imported ({exc})"
            raise SizerError(self._problem) from None
        return topologies

    def padded_sizes(self, asked: Iterable[tuple[tuple[int, ...], str]]) -> dict[int, set[int]]:
        """A GPU lays arrays out dense: no tiled size stands for another (the TPU sizer's has them)."""
        return {}

    def counts(self) -> dict[str, float | int]:
        """How many programs this process compiled for the target and in how long, and how many
        sizes came from the entries beside the baselines and from the caches on disk: the summary's."""
        return {
            "compiled": self.compiles,
            "seconds": round(self.compile_seconds, 3),
            "from_store": self.store_hits,
            "from_cache": self.disk_hits - self.store_hits,
        }


def compile_with_buffers(computation: Any) -> tuple[Any, ProgramBuffers | None, str]:
    """`computation` (JAX's Lowered) compiled, with XLA's dump of its buffer assignment read into the
    buffers at its peak (capture/jax/buffers.py) from a folder removed after: (compiled, buffers or
    None, why not). The dump changes nothing of the compile but the files it writes."""
    with tempfile.TemporaryDirectory(prefix="devmem-xla-dump-") as directory:
        compiled = computation.compile(compiler_options=dump_options(directory))
        try:
            return compiled, read_dump(directory), ""
        except Exception as exc:  # noqa: BLE001 - the sizes stand without the buffers
            return (
                compiled,
                None,
                f"XLA's dump of the program could not be read ({type(exc).__name__}: {str(exc)[:200]})",
            )


def _preset_memory(preset: str) -> int | None:
    entry = PRESETS.get(preset)
    return entry[0] if entry else None
