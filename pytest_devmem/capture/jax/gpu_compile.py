"""Each JAX executable's buffer sizes as XLA:GPU would compile it, on a machine without a GPU.

XLA:GPU assigns buffers differently from XLA:CPU (an attention step: no temporary on CPU, 1 GiB on
an H100), so the CPU compile's `temp_size_in_bytes` misstates what a GPU run allocates. JAX 0.10
compiles for a GPU that is not present ("deviceless" ahead-of-time compilation) once the CUDA
plugin is installed beside the CPU jaxlib: `jax.experimental.topologies.get_topology_desc(
platform="cuda", target_config=...)` gives compile-only devices of the GPU that the target config
describes (`model.gpu_targets`). Each executable's jaxpr is lowered again for that many GPUs
(`lowering`: a sharded executable keeps its mesh and specs, on GPUs) and compiled on the
compile-only client; its sizes are XLA's memory analysis of that compile, per device.

Results are cached per executable; under a key made of the GPU module's text, the target config,
the jaxlib and plugin versions and XLA_FLAGS for the session (another executable of the same
module, in a later test, compiles nothing); and on disk under that key (when given a folder: a
rerun of an unchanged suite compiles nothing; entries are written atomically, so xdist workers
sharing the folder never read half an entry). An executable that
cannot be compiled this way gets an `Unavailable` with the reason (no plugin, host callbacks, a
custom call with no CUDA handler...), and keeps its CPU sizes. JAX is imported lazily.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import json
import os
import re
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...files import write_atomic
from ...model.buffers import ProgramBuffers
from ...model.gpu_targets import GpuSpec
from ...units import format_size
from . import cache_entry, compilers, lowering
from .lowering import compiling_for_target

__all__ = [
    "ExecutableSizes",
    "GpuSizer",
    "Unavailable",
    "compiling_for_target",
    "cuda_compiler_problem",
    "environment_for_deviceless_compile",
    "load_cuda_compiler",
]

CUDA_MAJORS = ("13", "12")
"""The CUDA majors JAX publishes its GPU compiler for, the newest first: `jax-cudaNN-pjrt` holds
XLA:GPU's compiler (module `jax_plugins.xla_cudaNN`), `jax-cudaNN-plugin` registers the handlers of
the CUDA kernels it calls (cuSOLVER, cuFFT..., module `jax_cudaNN_plugin`). The first major whose
two packages are installed is the one used; `devmem compilers install` installs CUDA 12's, in a
folder of their own that a sizing process loads (compilers.py)."""


def _plugin_modules(major: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """(package, module) of the PJRT plugin and of the kernels' handlers for one CUDA major."""
    return (f"jax-cuda{major}-pjrt", f"jax_plugins.xla_cuda{major}"), (
        f"jax-cuda{major}-plugin",
        f"jax_cuda{major}_plugin",
    )


CACHE_FORMAT = 2
"""Bumped when what a disk-cache entry holds, or how its key is made, changes."""


@dataclass(frozen=True)
class ExecutableSizes:
    """One executable's sizes per device, from XLA:GPU's memory analysis for `target`."""

    target: str
    devices: int  # GPUs the executable was compiled for
    temp_bytes: int
    output_bytes: int
    argument_bytes: int
    alias_bytes: int  # outputs that reuse a donated argument's buffer
    code_bytes: int
    compile_seconds: float  # lowering and compiling; 0.0 when the disk cache answered
    source: str  # "compiled" or "disk cache"
    buffers: ProgramBuffers | None = None  # the buffers at its peak, as the compile's dump states them
    buffers_note: str = ""  # why they are not known
    key: str = ""  # the cache key its entry is kept under (compile_store.py); "" where it has none

    def to_json(self) -> dict[str, Any]:
        data = {item.name: getattr(self, item.name) for item in dataclasses.fields(self) if item.name != "key"}
        data["buffers"] = self.buffers.to_json() if self.buffers is not None else None
        return data


@dataclass(frozen=True)
class Unavailable:
    """Why an executable could not be compiled for the target; it keeps its CPU sizes."""

    reason: str


# -- the installed CUDA compiler --------------------------------------------------------


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def installed_cuda_major() -> str | None:
    """The CUDA major whose compiler packages can both be imported here (`CUDA_MAJORS`): installed
    in the environment, or loaded from the compilers' folder; or None."""
    for major in CUDA_MAJORS:
        if all(_module_found(module) for _, module in _plugin_modules(major)):
            return major
    return None


def cuda_compiler_problem() -> str | None:
    """Why XLA:GPU's compiler cannot be used here, or None: it can be imported, or loaded from the
    compilers' folder (compilers.py, whose messages name `devmem compilers install`). Imports no framework."""
    if installed_cuda_major() is not None:
        return None
    return compilers.problem("gpu")


def load_cuda_compiler() -> str | None:
    """XLA:GPU's compiler made importable in this process (from the compilers' folder where the
    environment has none); None once it is, else why not."""
    if installed_cuda_major() is not None:
        return None
    return compilers.load("gpu") or (None if installed_cuda_major() is not None else cuda_compiler_problem())


def environment_for_deviceless_compile(environ: Mapping[str, str], gpu_present: bool) -> dict[str, str]:
    """Settings to put in the environment before JAX starts, so that the CUDA plugin registers its
    compiler on a machine without a GPU while JAX runs on the CPU.

    Without them, the plugin's start-up check of the CUDA libraries fails (no driver, no runtime)
    and JAX prints that failure's traceback; with JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 the plugin
    registers, its backend fails to start without a driver, and JAX runs on the CPU as before.
    Nothing is set where a GPU is present, where the user chose JAX's platforms, or where the
    plugin cannot be imported (neither installed nor loaded from the compilers' folder: JAX will not
    find it).
    """
    if gpu_present or installed_cuda_major() is None:
        return {}
    if "JAX_PLATFORMS" in environ or "JAX_SKIP_CUDA_CONSTRAINTS_CHECK" in environ:
        return {}
    return {"JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1"}


# -- the sizer ----------------------------------------------------------------------------


class GpuSizer:
    """Sizes JAX executables for one GPU target; cached per executable and, with `cache_dir`, on disk.
    The TPU sizer (tpu_compile.py) is the same machinery with another compiler behind
    `_target_devices`, `_target_text`, `VERSION_MODULES` and `_failed`."""

    @property
    def VERSION_MODULES(self) -> tuple[str, ...]:  # noqa: N802 - the TPU sizer's is a class constant
        """Modules whose versions key the disk cache: a new compiler gives new sizes."""
        major = installed_cuda_major() or CUDA_MAJORS[-1]
        return ("jaxlib", *(module + ".version" for _, module in _plugin_modules(major)))

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
        """The sizer's state before its first executable. `cache_dir` is the project's (pytest's cache
        directory); `user_cache_dir` one beside it that the user keeps for all projects (as JAX's own
        persistent compilation cache is a directory the user names): read after the project's, and
        written with it, so that a fresh checkout compiles nothing the user's cache holds. `store_dir`:
        the entries stored beside the baselines (compile_store.py), read last and never written here
        (`--devmem-update` writes them, from the records)."""
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.user_cache_dir = Path(user_cache_dir) if user_cache_dir is not None else None
        self.store_dir = Path(store_dir) if store_dir is not None else None
        self.user_cache_hits = 0  # of disk_hits (and arrays found on disk): found in the user's cache only
        self.store_hits = 0  # entries (executables and arrays) found beside the baselines only
        self._entries: dict[str, dict[str, Any]] = {}  # every entry this process read or wrote, by key
        self.installed = False
        self.note = ""
        self.compiles = 0
        self.disk_hits = 0
        self.session_hits = 0  # executables of a module compiled earlier in the session
        self.compile_seconds = 0.0
        self.lowering_seconds = 0.0  # of compile_seconds: JAX lowering the program again for the target
        self._lock = threading.RLock()
        self._results: weakref.WeakKeyDictionary[Any, ExecutableSizes | Unavailable] = weakref.WeakKeyDictionary()
        self._by_module: dict[str, ExecutableSizes] = {}  # the same computation jitted again (another test's closure)
        self._topologies: dict[int, list[Any]] = {}
        self._versions = ""
        self._problem: str | None = None
        self.cache_problems: list[str] = []  # disk-cache entries not believed, each naming its file (cache_entry.py)

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
        return load_cuda_compiler()

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
        except _SizerError as exc:
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
        return Unavailable(_explain(exc))

    def _target_text(self) -> str:
        """The target as the disk cache's key names it."""
        return self.spec.target_config()

    def _target_devices(self, count: int) -> list[Any]:
        """`count` compile-only GPUs of the target on one host."""
        if count in self._topologies:
            return self._topologies[count]
        if self._problem is not None:
            raise _SizerError(self._problem)
        try:
            from jax.experimental import topologies  # type: ignore[import-not-found]
        except ImportError as exc:
            self._problem = f"jax.experimental.topologies could not be imported ({exc})"
            raise _SizerError(self._problem) from None
        config = self.spec.target_config()
        try:
            topology = _cuda_topology(topologies, config, count)
        except _SizerError as exc:
            self._problem = str(exc)
            raise
        devices = list(topology.devices)
        self._topologies[count] = devices
        return devices

    # -- the disk cache ----------------------------------------------------------------------

    def _source_key(self, recipe: Any, devices: int) -> str | None:
        """The cache key of a program by what JAX lowered for its own devices and its jaxpr (which
        holds what a platform-dependent lowering would choose between); None where not known."""
        if not recipe.source:
            return None
        try:
            jaxpr = str(recipe.arguments.get("closed_jaxpr"))
        except Exception:
            return None
        return self._digest(devices, "source", recipe.source, jaxpr)

    def _digest(self, devices: int, *texts: str) -> str:
        digest = hashlib.sha256()
        for part in (
            str(CACHE_FORMAT),
            self._software_versions(),
            self._target_text(),
            os.environ.get("XLA_FLAGS", ""),
            str(devices),
            *texts,
        ):
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()

    def _cache_key(self, computation: Any, devices: int) -> str | None:
        try:
            from jax._src.interpreters import mlir  # type: ignore[import-not-found]

            text = mlir.module_to_string(computation.stablehlo(), enable_debug_info=False)
        except Exception:
            return None
        return self._digest(devices, "lowered", _MODULE_NAME.sub("module @program", text, count=1))

    def _software_versions(self) -> str:
        if not self._versions:
            parts = []
            for module in self.VERSION_MODULES:
                try:
                    parts.append(f"{module}={getattr(importlib.import_module(module), '__version__', '?')}")
                except ImportError:
                    parts.append(f"{module}=?")
            self._versions = ";".join(parts)
        return self._versions

    def _read_cache(self, key: str | None, devices: int) -> ExecutableSizes | None:
        if key is not None and key in self._by_module:
            self.session_hits += 1
            return self._by_module[key]
        data = self._read_entry(key, _CACHED_SIZES, devices)
        if data is None or key is None:
            return None
        buffers = cached_buffers(data)  # checked by its own reader: a bad one keeps the sizes, saying why
        sizes = {name: data[name] for name in _CACHED_FIELDS}
        found = ExecutableSizes(
            target=self.target, compile_seconds=0.0, source="disk cache", key=key, **sizes, **buffers
        )
        self.disk_hits += 1
        self._by_module[key] = dataclasses.replace(
            found, source="cache"
        )  # later in the session: the session's own cache
        return found

    def _write_cache(self, key: str | None, sizes: ExecutableSizes) -> None:
        if key is not None:
            self._by_module[key] = dataclasses.replace(sizes, compile_seconds=0.0, source="cache")
        entry: dict[str, Any] = {name: getattr(sizes, name) for name in _CACHED_FIELDS}
        if sizes.buffers is not None:
            entry[BUFFERS_FIELD] = sizes.buffers.top().to_json()
        self._write_entry(key, entry)

    def _cache_dirs(self) -> tuple[Path, ...]:
        """Where entries are kept: the project's cache first, then the user's."""
        return tuple(directory for directory in (self.cache_dir, self.user_cache_dir) if directory is not None)

    def _read_entry(self, key: str | None, sizes: tuple[str, ...], devices: int | None = None) -> dict[str, Any] | None:
        """The entry stored under `key`, checked (cache_entry.py: `sizes` in bytes, with `devices`
        that device count): the project's, else the user's, else the one beside the baselines
        (compile_store.py; either then copied into the project's, so that a CI job that keeps only
        the project's cache keeps it). None where none holds one that can be believed; each that
        cannot is in `cache_problems`."""
        if key is None:
            return None
        places = (*self._cache_dirs(), *((self.store_dir,) if self.store_dir is not None else ()))
        for directory in places:
            try:
                data = cache_entry.read_entry(
                    directory / f"{key}.json", sizes, self.spec.memory_per_device, devices, kept=(BUFFERS_FIELD,)
                )
            except cache_entry.BadEntry as exc:
                self.cache_problems.append(cache_entry.describe(exc))
                continue
            if data is None:
                continue
            if directory is self.user_cache_dir or directory is self.store_dir:
                if directory is self.user_cache_dir:
                    self.user_cache_hits += 1
                else:
                    self.store_hits += 1
                if self.cache_dir is not None:
                    self._write_entry(key, data, only=self.cache_dir)
            self._entries[key] = data
            return data
        return None

    def take_cache_problems(self) -> list[str]:
        """The disk-cache entries not believed since the last call, each naming its file."""
        problems = self.cache_problems[:]  # no lock: the TPU sizer's worker may be appending, and may hold one
        del self.cache_problems[: len(problems)]
        return problems

    def stored_entries(self, keys: Any, arrays: Any = ()) -> dict[str, dict[str, Any]]:
        """The entries (by key) behind these executables' sizes, as this process read or wrote them:
        what a test's record sends for the store beside the baselines. `arrays`: the (shape, dtype)
        of array shards the test sized (a TPU sizer's; none here)."""
        with self._lock:
            return {key: self._entries[key] for key in keys if key in self._entries}

    def counts(self) -> dict[str, float | int]:
        """How many programs this process compiled for the target and in how long, and how many
        sizes came from the entries beside the baselines and from the caches on disk: the summary's."""
        return {
            "compiled": self.compiles,
            "seconds": round(self.compile_seconds, 3),
            "from_store": self.store_hits,
            "from_cache": self.disk_hits - self.store_hits,
        }

    def _write_entry(self, key: str | None, entry: Mapping[str, Any], only: Path | None = None) -> None:
        """`entry` under `key` in each cache directory (or `only` that one), written atomically (xdist
        workers, and other projects' sessions in the user's cache, may share it)."""
        if key is None or not cache_entry.writable(entry, self.spec.memory_per_device):
            return  # sizes beyond a device: compiled again each time, never a bad entry to warn about
        if only is None:
            self._entries[key] = dict(entry)
        text = json.dumps(dict(entry), sort_keys=True)
        for directory in (only,) if only is not None else self._cache_dirs():
            try:
                directory.mkdir(parents=True, exist_ok=True)
                # unsynced: an entry lost with the machine's power costs one compile, and a sync per
                # entry waits for the disk (files.write_atomic); readers never see half of one
                write_atomic(directory / f"{key}.json", text, durable=False)
            except OSError:
                pass  # a cache that cannot be written only costs a compile next time


_MODULE_NAME = re.compile(r"^module @[\w$.\-]+", re.MULTILINE)
"""The module's name (`module @jit_step`), the jit object's: left out of what names a program, which
is sized alike under any name."""

_CACHED_SIZES = ("temp_bytes", "output_bytes", "argument_bytes", "alias_bytes", "code_bytes")
_CACHED_FIELDS = (cache_entry.DEVICES, *_CACHED_SIZES)
BUFFERS_FIELD = "buffers"
"""A cache entry's buffers at the program's peak (model/buffers.py's JSON); entries written before it have none."""


def compile_with_buffers(computation: Any) -> tuple[Any, ProgramBuffers | None, str]:
    """`computation` (JAX's Lowered) compiled, with XLA's dump of its buffer assignment read into the
    buffers at its peak (capture/jax/buffers.py) from a folder removed after: (compiled, buffers or
    None, why not). The dump changes nothing of the compile but the files it writes."""
    import tempfile

    from .buffers import dump_options, read_dump

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


def cached_buffers(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The `buffers` and `buffers_note` of ExecutableSizes from a cache entry, checked: an entry without
    them (an older one) or with bad ones keeps its sizes and says why it has no buffers."""
    stored = entry.get(BUFFERS_FIELD)
    if stored is None:
        return {
            "buffers_note": "sized from a cache entry written before buffers were kept: clear the cache to list them"
        }
    try:
        return {"buffers": ProgramBuffers.from_json(stored)}
    except ValueError as exc:
        return {"buffers_note": f"the cache entry's buffers are unreadable ({exc})"}


class _SizerError(Exception):
    """The target cannot be compiled for at all here; the message says why."""


def _preset_memory(preset: str) -> int | None:
    from ...model.device import PRESETS

    entry = PRESETS.get(preset)
    return entry[0] if entry else None


def _cuda_topology(topologies: Any, config: str, count: int) -> Any:
    """The target's topology; where the CUDA plugin did not register (its start-up check of the CUDA
    libraries fails without a GPU, unless JAX_SKIP_CUDA_CONSTRAINTS_CHECK or JAX_PLATFORMS was set),
    it is registered again with that check skipped: JAX keeps running on the CPU."""
    try:
        return topologies.get_topology_desc(platform="cuda", target_config=config, topology=f"1x1x{count}")
    except NotImplementedError:
        pass
    except Exception as exc:
        raise _SizerError(f"XLA refused the GPU target: {_first_line(exc)}") from None
    _register_cuda_plugin()
    try:
        return topologies.get_topology_desc(platform="cuda", target_config=config, topology=f"1x1x{count}")
    except Exception as exc:
        raise _SizerError(
            f"the CUDA plugin is installed but gives no GPU topology ({_first_line(exc)}); "
            "set JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 before JAX starts"
        ) from None


def _register_cuda_plugin() -> None:
    try:
        plugin = importlib.import_module(_plugin_modules(installed_cuda_major() or CUDA_MAJORS[-1])[0][1])
    except ImportError:
        return
    before = os.environ.get("JAX_SKIP_CUDA_CONSTRAINTS_CHECK")
    os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
    try:
        plugin.initialize()
    except Exception:
        pass
    finally:
        if before is None:
            os.environ.pop("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", None)
        else:
            os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = before


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


_EXPLANATIONS: tuple[tuple[str, str], ...] = (
    (
        "Unknown backend: 'gpu'",
        "it calls back to Python (jax.debug.print, pure_callback, io_callback), which XLA:GPU compiles only where a GPU backend runs",
    ),
    ("No FFI handler registered for", "it calls a custom kernel that has no CUDA implementation registered here"),
    (
        "No registered implementation for custom call",
        "it calls a custom kernel that has no CUDA implementation registered here",
    ),
    (
        "No PTX compilation provider",
        f"XLA found no ptxas to compile GPU kernels (nvidia-cuda-nvcc-cu12, which `{compilers.COMMAND}` installs)",
    ),
    ("ptxas too old", "the ptxas XLA found does not support this GPU's compute capability"),
    ("utotun", "XLA needed to autotune on a real GPU"),
)


def _explain(exc: BaseException) -> str:
    """A reason a user can act on, then XLA's or JAX's own first line."""
    text = str(exc)
    for marker, explanation in _EXPLANATIONS:
        if marker in text:
            if "custom kernel" in explanation and compilers.loaded_after_jax("gpu"):
                explanation += (
                    " (JAX was imported before the CUDA compiler's folder was loaded, so its kernels' handlers were "
                    "not registered: something imported JAX before pytest-devmem's first hook)"
                )
            return f"{explanation} ({_first_line(exc)})"
    return f"XLA:GPU could not compile it without a GPU ({_first_line(exc)})"
