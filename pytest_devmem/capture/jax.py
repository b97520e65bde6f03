"""JAX's device allocations as trace events, modelled on what XLA does per executable run.

Per run of a compiled executable (`pxla.ExecuteReplicated.__call__`): each output buffer is
allocated; one temp buffer of the executable's `temp_size_in_bytes` (its memory analysis, read once
per executable, so a compile-cache hit gives the same trace) is allocated for the run and freed at
its end; a donated input whose buffer became an output keeps its allocation, and a donated input
that did not is freed after the run; host values passed as arguments are transferred for the run.
Arrays that reach the device without an executable (`jax.device_put` of host data) come out of
`dispatch._batched_device_put_impl` and are allocations too (`jnp.asarray` runs a small executable). A buffer is freed when the last array holding it
is garbage-collected or deleted (`Array.delete`).

To see every run, calls must go through Python dispatch: the C++ fast path of `jax.jit` never calls
back. The capture makes `pjit._get_fastpath_data` answer None, as JAX itself does for executables
it cannot fast-path, and clears the C++ dispatch caches once. These are JAX internals: the capture
checks each hook before it installs any, and where one is missing it says so (`note`) and traces
nothing, rather than report a partial figure. Tested with JAX 0.10.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from .patches import Patches
from .recorder import TraceRecorder

SOURCE = "jax"
TESTED_JAX = "0.10"
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""The monitoring event JAX records once per executable XLA compiles (jax._src.dispatch)."""
"""The JAX minor version these hooks were written against and are tested with."""


class _Owner(weakref.ref):  # type: ignore[type-arg]
    """A weak reference from a buffer to one array that holds it."""

    __slots__ = ("pointer", "object_id")
    pointer: int
    object_id: int


@dataclass
class _Buffer:
    trace_id: int
    size: int
    owners: dict[int, _Owner] = field(default_factory=dict)  # id(array) -> owner (arrays are unhashable)


@dataclass
class JaxWindow:
    """What the capture saw in one test window, for the record."""

    executables: dict[str, int] = field(default_factory=dict)  # name -> runs
    temp_unknown: set[str] = field(default_factory=set)  # executables whose memory analysis failed
    compiled: list[str] = field(default_factory=list)  # executables XLA compiled in the window, by name
    failure: str = ""  # the capture's own error, if one stopped it: the trace is then incomplete


class JaxCapture:
    """Hooks JAX once per process and reports its allocations to a TraceRecorder."""

    name = SOURCE

    def __init__(self, recorder: TraceRecorder) -> None:
        self._recorder = recorder
        self._lock = threading.RLock()  # weakref callbacks can fire inside a locked section
        self._live: dict[int, _Buffer] = {}  # device pointer -> buffer
        self._owner_of: dict[int, _Owner] = {}  # id(array) -> its owner reference
        self._temp_bytes: weakref.WeakKeyDictionary[Any, int | None] = weakref.WeakKeyDictionary()
        self._patches = Patches()
        self._array_type: type = type(None)  # jaxlib's ArrayImpl, once installed
        self._compile_listener: Callable[..., None] | None = None
        self.installed = False
        self.note = ""
        self.version = ""
        self.window = JaxWindow()

    # -- installing ---------------------------------------------------------------------

    def install(self) -> bool:
        """Hook JAX (imported already); False, with `note` saying why, where this JAX offers no hook."""
        if self.installed:
            return True
        try:
            from jax._src import dispatch, pjit  # type: ignore[import-not-found]
            from jax._src.interpreters import pxla  # type: ignore[import-not-found]
            from jax._src.lib import xla_client  # type: ignore[import-not-found]
            import jax as jax_module  # type: ignore[import-not-found]
        except ImportError as exc:
            self.note = f"JAX's dispatch internals could not be imported ({exc}): JAX allocations are not traced"
            return False
        self.version = str(getattr(jax_module, "__version__", ""))
        array_type = getattr(xla_client, "ArrayImpl", None)
        missing = [
            name
            for name, present in (
                ("pjit._get_fastpath_data", hasattr(pjit, "_get_fastpath_data")),
                ("pxla.ExecuteReplicated.__call__", "__call__" in vars(getattr(pxla, "ExecuteReplicated", object))),
                ("dispatch._batched_device_put_impl", hasattr(dispatch, "_batched_device_put_impl")),
                ("ArrayImpl.delete", hasattr(array_type, "delete")),
            )
            if not present
        ]
        if missing:
            self.note = (
                f"JAX {self.version} lacks {', '.join(missing)} (pytest-devmem's hooks are tested with JAX {TESTED_JAX}): "
                "JAX allocations are not traced"
            )
            return False
        self._array_type = array_type  # type: ignore[assignment]
        self._patches.replace(pjit, "_get_fastpath_data", lambda original: _no_fastpath)
        self._patches.replace(pxla.ExecuteReplicated, "__call__", self._wrap_execute)
        self._patches.replace(dispatch, "_batched_device_put_impl", self._wrap_device_put)
        self._patches.replace(array_type, "delete", self._wrap_delete)
        self._listen_to_compiles()
        for cache_name in ("_cpp_pjit_cache_fun_only", "_cpp_pjit_cache_explicit_attributes"):
            cache = getattr(pjit, cache_name, None)
            if cache is not None and hasattr(cache, "clear"):
                cache.clear()  # entries made before the hook would keep the fast path
        self.installed = True
        return True

    def uninstall(self) -> None:
        """Put JAX's own functions back (the fast path returns for executables compiled afterwards)."""
        self._patches.restore()
        if self._compile_listener is not None:
            try:
                from jax._src import monitoring  # type: ignore[import-not-found]

                monitoring.unregister_event_duration_listener(self._compile_listener)
            except (ImportError, AttributeError, AssertionError, ValueError):
                pass
            self._compile_listener = None
        self.installed = False

    def _listen_to_compiles(self) -> None:
        """Count XLA compilations through JAX's public monitoring events: one backend-compile event per
        executable compiled (a compile-cache hit sends none)."""
        try:
            import jax.monitoring  # type: ignore[import-not-found]
        except ImportError:
            return
        capture = self

        def on_event(event: str, duration_secs: float, **details: str | int) -> None:
            if event == BACKEND_COMPILE_EVENT and capture._recorder.recording:
                capture.window.compiled.append(str(details.get("fun_name", "executable")))

        jax.monitoring.register_event_duration_secs_listener(on_event)
        self._compile_listener = on_event

    # -- window -------------------------------------------------------------------------

    def begin(self) -> None:
        self.window = JaxWindow()

    # -- hooks --------------------------------------------------------------------------

    def _wrap_execute(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def __call__(executable: Any, *args: Any) -> Any:
            if not capture._recorder.recording or capture.window.failure:
                return original(executable, *args)
            return capture._execute(original, executable, args)

        return __call__

    def _execute(self, original: Callable[..., Any], executable: Any, args: tuple[Any, ...]) -> Any:
        """Run the executable; around it, record what XLA allocates for the run. A fault in this
        bookkeeping never reaches the test: it stops the capture for the window, with a note."""
        name = str(getattr(executable, "name", "executable"))
        try:
            inputs, transfers = self._before_run(name, args)
        except Exception as exc:
            self._fail(exc)
            return original(executable, *args)
        outputs = original(executable, *args)
        try:
            self._after_run(executable, name, inputs, transfers, outputs)
        except Exception as exc:
            self._fail(exc)
        return outputs

    def _before_run(self, name: str, args: tuple[Any, ...]) -> tuple[list[tuple[Any, int]], list[tuple[int, int]]]:
        """The traced arrays passed in, and the host values transferred for the run (allocated now)."""
        inputs: list[tuple[Any, int]] = []
        transfers: list[tuple[int, int]] = []
        for arg in args:
            if isinstance(arg, self._array_type):
                pointer = _pointer(arg)
                if pointer is not None and pointer in self._live:
                    inputs.append((arg, pointer))
            else:
                size = int(getattr(arg, "nbytes", 0) or 0)
                if size:
                    transfers.append((self._recorder.allocate(size, SOURCE, f"{name} argument"), size))
        return inputs, transfers

    def _after_run(self, executable: Any, name: str, inputs: list[tuple[Any, int]], transfers: list[tuple[int, int]], outputs: Any) -> None:
        """Outputs allocated, the temp buffer for the run, donated inputs and transfers freed."""
        recorder = self._recorder
        self.window.executables[name] = self.window.executables.get(name, 0) + 1
        donated = {pointer for arg, pointer in inputs if arg.is_deleted()}
        with self._lock:
            for output in outputs:
                if isinstance(output, self._array_type):
                    self._track(output, name, donated)
            temp = self._temp_size(executable, name)
            if temp:
                temp_id = recorder.allocate(temp, SOURCE, f"{name} temp")
                recorder.free(temp_id)
            for pointer in donated:  # donated, and its buffer did not become an output
                buffer = self._live.get(pointer)
                if buffer is not None:
                    self._drop_dead_owners(buffer)
                    if not buffer.owners:
                        self._release(pointer, buffer)
        for transfer_id, size in transfers:
            recorder.free(transfer_id)

    def _fail(self, exc: Exception) -> None:
        self.window.failure = f"the JAX capture stopped on an internal error ({type(exc).__name__}: {exc}): the trace is incomplete"

    def _wrap_device_put(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def batched_device_put(*args: Any, **kwargs: Any) -> Any:
            results = original(*args, **kwargs)
            if capture._recorder.recording and not capture.window.failure:
                try:
                    with capture._lock:
                        for result in results:
                            if isinstance(result, capture._array_type):
                                capture._track(result, "device_put", set(), own_buffer=True)
                except Exception as exc:
                    capture._fail(exc)
            return results

        return batched_device_put

    def _wrap_delete(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def delete(array: Any) -> Any:
            result = original(array)
            owner = capture._owner_of.get(id(array))
            if owner is not None and owner() is array:
                try:
                    with capture._lock:
                        capture._drop_owner(owner)
                except Exception as exc:
                    capture._fail(exc)
            return result

        return delete

    # -- buffers ------------------------------------------------------------------------

    def _track(self, array: Any, label: str, donated: set[int], own_buffer: bool = False) -> None:
        """Count `array`'s buffer: a new allocation, a buffer another array holds too, or a
        donated input's buffer handed on to this output.

        `own_buffer` (a transfer from the host) counts it as a buffer of its own whatever its
        address: on CPU a transfer may alias the host array (zero copy), so two transfers of one
        host array share an address here, while on a GPU each is a separate device buffer.
        """
        found = _buffer_of(array)
        if found is None:
            return
        pointer, size = found
        if own_buffer:
            pointer = -id(array)  # a key no device address takes
        buffer = self._live.get(pointer)
        if buffer is not None:
            self._drop_dead_owners(buffer)
            if not buffer.owners and pointer not in donated:
                self._release(pointer, buffer)  # a stale entry: that memory was freed and reused
                buffer = None
        if buffer is None:
            buffer_id = self._recorder.allocate(size, SOURCE, label)
            if not buffer_id:
                return
            buffer = self._live[pointer] = _Buffer(buffer_id, size)
        if id(array) in self._owner_of:
            return
        owner = _Owner(array, self._collected)
        owner.pointer, owner.object_id = pointer, id(array)
        buffer.owners[id(array)] = owner
        self._owner_of[id(array)] = owner

    def _collected(self, owner: _Owner) -> None:
        try:
            with self._lock:
                self._drop_owner(owner)
        except Exception as exc:  # runs inside the garbage collector: never raise there
            self._fail(exc)

    def _drop_owner(self, owner: _Owner) -> None:
        if self._owner_of.get(owner.object_id) is owner:
            del self._owner_of[owner.object_id]
        buffer = self._live.get(owner.pointer)
        if buffer is None or buffer.owners.get(owner.object_id) is not owner:
            return
        del buffer.owners[owner.object_id]
        if not buffer.owners:
            self._release(owner.pointer, buffer)

    def _drop_dead_owners(self, buffer: _Buffer) -> None:
        for object_id, owner in list(buffer.owners.items()):
            array = owner()
            if array is None or array.is_deleted():
                del buffer.owners[object_id]
                if self._owner_of.get(owner.object_id) is owner:
                    del self._owner_of[owner.object_id]

    def _release(self, pointer: int, buffer: _Buffer) -> None:
        del self._live[pointer]
        self._recorder.free(buffer.trace_id)

    def _temp_size(self, executable: Any, name: str) -> int:
        """The executable's temp bytes from its memory analysis, read once per executable."""
        try:
            return self._temp_bytes[executable] or 0
        except KeyError:
            pass
        except TypeError:  # not weak-referenceable: read it each time
            return _read_temp_size(executable) or 0
        temp = _read_temp_size(executable)
        self._temp_bytes[executable] = temp
        if temp is None:
            self.window.temp_unknown.add(name)
        return temp or 0


def _no_fastpath(*args: Any, **kwargs: Any) -> None:
    """Stands in for `pjit._get_fastpath_data`: no C++ fast path, so every run reaches the capture."""
    return None


def _read_temp_size(executable: Any) -> int | None:
    try:
        return int(executable.xla_executable.get_compiled_memory_stats().temp_size_in_bytes)
    except Exception:  # a backend without memory analysis
        return None


def _pointer(array: Any) -> int | None:
    found = _buffer_of(array)
    return found[0] if found is not None else None


def _buffer_of(array: Any) -> tuple[int, int] | None:
    """(device pointer, bytes on the device) of an array's buffer on its first device; None when
    the array is deleted or has none."""
    try:
        return int(array.unsafe_buffer_pointer()), int(array.on_device_size_in_bytes())
    except Exception:
        pass
    try:  # sharded over several devices: the first device's shard stands for the device
        shard = array.addressable_data(0)
        return int(shard.unsafe_buffer_pointer()), int(shard.on_device_size_in_bytes())
    except Exception:
        return None
