"""Each JAX executable and array as the TPU compiler sizes it, on a machine without a TPU.

XLA:TPU assigns buffers as XLA:CPU does not (an attention step: no temporary on the CPU, 128 MiB on
a v5e), and lays every array out in tiles (an f32[8,3] takes 2,048 bytes, not 96). With libtpu
importable beside the CPU jaxlib (`devmem compilers install` puts it in a folder of its own, which
a sizing process loads: compilers.py), `jax.experimental.topologies.
get_topology_desc(topology_name="v5e:2x2", platform="tpu")` gives compile-only TPU devices, as
MaxText's train_compile.py uses them to find OOMs ahead of time. The same machinery as the GPU sizer
(gpu_compile.py) lowers each executable's jaxpr again for that generation's topology of as many
devices (a sharded executable keeps its mesh and specs) and takes XLA:TPU's memory analysis of the
compile. An array's size is that compiler's too: the argument size of a program that holds it on one
chip, per (shard shape, dtype), cached; never a padding rule written by hand.

A refusal for HBM is a `Refused`, a device count libtpu forms no topology of a `NoTopology`
(sizes.py); libtpu starts quietly and off a real TPU's lock (tpu_plugin.py). JAX is imported
lazily.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import math
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ...compile_store import ARRAY_FIELD
from ...errors import InvalidSettingError
from ...model.tpu_targets import TpuSpec
from . import compilers, internals, lowering
from .gpu_compile import GpuSizer
from .sizes import UNUSABLE, NoTopology, NoTopologyError, Refused, SizerError, Unavailable, first_line, parse_refusal
from .tpu_plugin import quiet_libtpu

__all__ = ["SizingCosts", "TpuSizer", "dense_bytes"]

ARRAY_CACHE_FORMAT = 1


@dataclass
class SizingCosts:
    """Where a session's TPU sizing spent its time, measured: what a cold run pays beyond the CPU's
    own compiles (benchmarks/bench_tpu.py prints it)."""

    client_start_seconds: float = 0.0  # loading libtpu and starting its compile-only client (first topology)
    topologies: int = 0  # topologies made after the first (2x2, 2x4...)
    topology_seconds: float = 0.0
    executables_compiled: int = 0  # lowered again and compiled by XLA:TPU
    executable_seconds: float = 0.0  # lowering and compiling
    executable_lowering_seconds: float = 0.0  # of which JAX's lowering for the TPU (Python)
    executables_from_disk: int = 0
    executables_from_session: int = 0  # the same program (module text and jaxpr) compiled earlier in the session
    arrays_compiled: int = 0  # (shard shape, dtype) sized by the compile of a program that holds one
    array_seconds: float = 0.0
    arrays_from_disk: int = 0
    entries_from_store: int = 0  # of those from disk (executables and arrays): stored beside the baselines
    compiled: list[tuple[str, int, float]] = field(default_factory=list)  # (executable, devices, seconds)

    def to_json(self) -> dict[str, float | int]:
        return {name: round(value, 4) if isinstance(value, float) else value for name, value in vars(self).items()}


class TpuSizer(GpuSizer):
    """Sizes JAX executables and arrays for one TPU generation; cached per executable and per
    (shard shape, dtype), and with `cache_dir` on disk."""

    VERSION_MODULES = ("jaxlib", "libtpu")

    def __init__(
        self,
        spec: TpuSpec,
        cache_dir: str | os.PathLike[str] | None = None,
        *,
        beside: bool = False,
        user_cache_dir: str | os.PathLike[str] | None = None,
        store_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.spec = spec  # type: ignore[assignment]
        self.tpu_spec = spec
        self.beside = beside  # compile each program for the TPU in a worker as JAX compiles it (`install`)
        self.target = spec.preset
        self._start(cache_dir, user_cache_dir, store_dir)
        self._arrays: dict[tuple[tuple[int, ...], str], int | None] = {}
        self._array_keys: dict[tuple[tuple[int, ...], str], str] = {}  # (shape, dtype) -> its entry's key
        self.costs = SizingCosts()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[int, tuple[Any, Future[Any]]] = {}  # id(recipe) -> (recipe, its compile in the worker)
        self._counting = threading.Lock()  # one compile at a time counts its own seconds
        self._array_counting = threading.Lock()  # arrays are sized in the test's thread, beside the worker
        self._topology_lock = threading.Lock()
        self.unsized_arrays: set[str] = set()  # dtypes the compiler could not size: kept dense, noted

    def sizing_costs(self) -> SizingCosts:
        """The session's sizing costs so far, the executables' counted by the shared machinery."""
        costs = self.costs
        costs.executables_compiled = self.compiles
        costs.executable_seconds = self.compile_seconds  # executables' only: arrays count in costs.array_seconds
        costs.executable_lowering_seconds = self.lowering_seconds
        costs.executables_from_disk = self.disk_hits
        costs.executables_from_session = self.session_hits
        costs.entries_from_store = self.store_hits
        return costs

    def counts(self) -> dict[str, float | int]:
        """As the GPU sizer's, array shapes included: each is sized by the compile of a program too."""
        return {
            "compiled": self.compiles + self.costs.arrays_compiled,
            "seconds": round(self.compile_seconds + self.costs.array_seconds, 3),
            "from_store": self.store_hits,
            "from_cache": self.disk_hits + self.costs.arrays_from_disk - self.store_hits,
        }

    def stored_entries(self, keys: Any, arrays: Any = ()) -> dict[str, dict[str, Any]]:
        """The executables' entries, and those of the array shards of these (shape, dtype)."""
        with self._lock:
            array_keys = [self._array_keys.get((tuple(shape), str(dtype))) for shape, dtype in arrays]
        return super().stored_entries([*keys, *(key for key in array_keys if key is not None)])

    # -- compiling beside the test ---------------------------------------------------------------

    def install(self) -> bool:
        """Hook JAX's lowering, and start the worker that compiles for the TPU beside the test: XLA's
        compile releases the GIL (jaxlib's bindings), so while JAX compiles a program for the CPU,
        and while the test runs, the TPU compile of that program goes on in the worker. A run waits
        only for the sizes of its own executable. Only a sizer made with `beside` has a worker, and one
        in a process (the session's); any other sizes each executable when it first runs."""
        global _beside
        if self.installed:
            return True
        if not super().install():
            return False
        with _beside_lock:
            if not self.beside or _beside is not None:
                return True
            _beside = self
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="devmem-tpu-sizer")
        lowering.hooks.on_lowered.append(self._compile_beside)
        self._pool.submit(self._warm_up)
        return True

    def uninstall(self) -> None:
        global _beside
        if self.installed and self._pool is not None:
            try:
                lowering.hooks.on_lowered.remove(self._compile_beside)
            except ValueError:
                pass
            pool, self._pool = self._pool, None
            pool.shutdown(wait=True, cancel_futures=True)  # nothing compiles for the TPU once the session is over
            self._pending.clear()
            with _beside_lock:
                if _beside is self:
                    _beside = None
        super().uninstall()

    def _warm_up(self) -> None:
        """The compile-only client and the one-chip topology, made before the first compile needs them.
        A failure here is not lost: the first compile that needs them meets it again and says it."""
        try:
            self._target_devices(1)
        except Exception:  # noqa: BLE001  # anything libtpu raises: the test's own call reports it
            pass

    def _compile_beside(self, recipe: Any) -> None:
        """Start the TPU compile of a program JAX is about to compile for the CPU."""
        pool = self._pool
        if pool is None:
            return
        context = _trace_context()
        with self._lock:
            self._pending[id(recipe)] = (recipe, pool.submit(self._size_beside, recipe, context))

    def _size_beside(self, recipe: Any, context: object) -> Any:
        """The recipe's sizes, compiled in the worker; `_ELSEWHERE` where the test's thread had JAX
        settings of its own in force (`with jax.default_matmul_precision(...)`, a mesh in context:
        JAX's trace context, which its own caches key on), which this thread would not lower with."""
        if context is None or _trace_context() != context:
            return _ELSEWHERE
        try:
            return self._size_recipe(recipe)
        except Exception as exc:  # the worker never raises into the run that waits for it
            return Unavailable(f"XLA:TPU could not compile it ({first_line(exc)})")

    def sizes_for(self, executable: Any) -> Any:
        """As the GPU sizer's, waiting for the worker where it compiles this executable already."""
        if not self.installed:
            return super().sizes_for(executable)
        with self._lock:
            try:
                return self._results[executable]
            except KeyError:
                pass
            except TypeError:  # not weak-referenceable: the GPU sizer says so
                return super().sizes_for(executable)
            recipe = lowering.hooks.by_executable.get(executable)
            entry = self._pending.pop(id(recipe), None) if recipe is not None else None
        if entry is None or entry[0] is not recipe:
            return super().sizes_for(executable)
        result = entry[1].result()  # the lock is free meanwhile: arrays are sized as before
        if result is _ELSEWHERE:
            return super().sizes_for(executable)  # lowered here, in the test's own JAX settings
        with self._lock:
            self._results[executable] = result
        return result

    def _size_recipe(self, recipe: Any) -> Any:
        if recipe.devices:
            try:
                self._target_devices(len(recipe.devices))
            except NoTopologyError as exc:
                return NoTopology(str(exc))
            except SizerError:
                pass  # the compiler cannot be used here at all: the shared machinery says why
        with self._counting:
            compiles, seconds = self.compiles, self.compile_seconds
            result = super()._size_recipe(recipe)
            if self.compiles > compiles:
                name = str(recipe.arguments.get("fun_name", "executable"))
                self.costs.compiled.append((name, getattr(result, "devices", 0), self.compile_seconds - seconds))
        return result

    def _compiler_problem(self) -> str | None:
        return compilers.load("tpu")

    def _version_of(self, module: str) -> str:
        """Its distribution's version (libtpu has no `__version__`), or "?"."""
        try:
            return importlib.metadata.version(module)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    def _target_text(self) -> str:
        """The generation, and its chip config where the presets name one: sizes cached for v4's split
        mode (two devices per chip) are never taken for its megacore devices."""
        spec = self.tpu_spec
        config = spec.chip_config_name
        return f"tpu:{spec.generation}" + (f":{config}" if config else "")

    def _failed(self, exc: Exception) -> Any:
        text = str(exc)
        figures = parse_refusal(text)
        if figures is not None:
            return Refused(self.target, " ".join(text.split())[:400], figures[0], figures[1], text)
        return Unavailable(f"XLA:TPU could not compile it ({first_line(exc)})")

    def _target_devices(self, count: int) -> list[Any]:
        """`count` compile-only devices of the generation's topology of that many devices."""
        if count in self._topologies:
            return self._topologies[count]
        with self._topology_lock:  # the worker and the test's thread may both ask first
            return self._make_topology(count)

    def _make_topology(self, count: int) -> list[Any]:
        if count in self._topologies:
            return self._topologies[count]
        if self._problem is not None:
            raise SizerError(self._problem)
        spec = self.tpu_spec
        try:
            wanted = spec.topology_for(count)
        except InvalidSettingError as exc:
            raise NoTopologyError(str(exc)) from None
        topologies = self._topologies_module()
        started = time.perf_counter()
        try:
            with quiet_libtpu():
                topology = topologies.get_topology_desc(topology_name=wanted.name, platform="tpu", **wanted.options())
        except Exception as exc:
            if count == 1:  # no chip at all: the compiler itself cannot be used here
                raise SizerError(f"{UNUSABLE}: libtpu gives no {wanted.name} topology ({first_line(exc)})") from None
            raise NoTopologyError(spec.no_topology(count, f"libtpu refused {wanted.name}: {first_line(exc)}")) from None
        seconds = time.perf_counter() - started
        if self._topologies:
            self.costs.topologies += 1
            self.costs.topology_seconds += seconds
        else:
            self.costs.client_start_seconds += seconds
        devices = list(topology.devices)
        if len(devices) != count:  # never a topology of another size under this count's name
            raise NoTopologyError(spec.no_topology(count, f"libtpu's {wanted.name} has {len(devices)} devices"))
        self._topologies[count] = devices
        return devices

    # -- arrays --------------------------------------------------------------------------------

    def padded_sizes(self, asked: Iterable[tuple[tuple[int, ...], str]]) -> dict[int, set[int]]:
        """Each tiled size the compiler gave a shard of these (shape, dtype) -> the dense sizes of the
        shards it gave it to (one, unless shapes of different dense sizes tile alike): what tells
        padding in a trace."""
        found: dict[int, set[int]] = {}
        with self._lock:
            arrays = [
                (key, self._arrays[key])
                for key in {(tuple(shape), str(dtype)) for shape, dtype in asked}
                if key in self._arrays
            ]
        for (shape, dtype), size in arrays:
            dense = dense_bytes(shape, dtype)
            if size is not None and dense is not None:
                found.setdefault(size, set()).add(dense)
        return found

    def shard_bytes(self, shape: tuple[int, ...], dtype: Any) -> int | None:
        """The bytes one chip holds for an array of `shape` and `dtype` in its default (tiled)
        layout, as the TPU compiler states it (the argument size of a program that holds it); None
        where it cannot say (the dense size is then used, and the record says so)."""
        if not self.installed:
            return None
        key = (tuple(int(n) for n in shape), str(dtype))
        with self._lock:
            if key in self._arrays:
                return self._arrays[key]
        size = self._array_bytes(key, dtype)  # unlocked: the worker's compile may be under way
        with self._lock:
            self._arrays[key] = size
            if size is None:
                self.unsized_arrays.add(key[1])
        return size

    def _array_bytes(self, key: tuple[tuple[int, ...], str], dtype: Any) -> int | None:
        shape = key[0]
        if 0 in shape:
            return 0
        disk_key = self._array_cache_key(key)
        with self._lock:
            self._array_keys[key] = disk_key
        about: dict[str, Any] = {"shape": list(shape), "dtype": key[1]}  # what the entry says it sizes
        cached = self._read_entry(disk_key, (ARRAY_FIELD,), least=dense_bytes(shape, key[1]) or 0, **about)
        if cached is not None:
            self.costs.arrays_from_disk += 1
            return int(cached[ARRAY_FIELD])
        try:
            import jax  # JAX: imported only where it runs
            from jax.sharding import SingleDeviceSharding

            chip = self._target_devices(1)[0]
            started = time.perf_counter()
            with lowering.retargeting():
                argument = jax.ShapeDtypeStruct(shape, dtype, sharding=SingleDeviceSharding(chip))
                stats = jax.jit(_hold, keep_unused=True).lower(argument).compile().memory_analysis()
            seconds = time.perf_counter() - started
            with self._array_counting:  # not in compile_seconds, which the worker's compiles update meanwhile
                self.costs.arrays_compiled += 1
                self.costs.array_seconds += seconds
            size = int(stats.argument_size_in_bytes)  # type: ignore[union-attr]
        except Exception:
            return None
        self._write_entry(disk_key, {ARRAY_FIELD: size, **about})
        return size

    def _array_cache_key(self, key: tuple[tuple[int, ...], str]) -> str:
        digest = hashlib.sha256(
            f"array:{ARRAY_CACHE_FORMAT}\0{self._software_versions()}\0{self._target_text()}\0{key}".encode()
        )
        return digest.hexdigest()


def dense_bytes(shape: tuple[int, ...], dtype: str) -> int | None:
    """An array's bytes untiled: its elements times its dtype's item size (numpy's); None where numpy
    does not know the dtype."""
    try:
        import numpy as np  # numpy: JAX's own dependency, here only where JAX runs

        itemsize = np.dtype(dtype).itemsize
    except Exception:  # noqa: BLE001 - a dtype numpy does not name (JAX's own: float8 kinds)
        return None
    return math.prod(int(dimension) for dimension in shape) * itemsize


_ELSEWHERE = object()
"""What the worker gives for a program it leaves to the test's thread."""


def _trace_context() -> object:
    """JAX's trace context in this thread (the thread-local settings that tracing and lowering
    read), or None where this JAX has none to compare."""
    return internals.trace_context()


_beside: TpuSizer | None = None
"""The sizer whose worker compiles beside the tests: one per process."""
_beside_lock = threading.Lock()


def _hold(x: Any) -> None:
    """A program that holds one argument and computes nothing (kept with `keep_unused`, which JAX
    would otherwise prune): the compiler lays the argument out as it lays out any array of its shape
    and dtype, and states its size. An identity program states the same size (tested on every
    generation), and its compile takes about twice as long: it copies the argument into its output."""
