"""JAX's device allocations as trace events, modelled on what XLA does per executable run, on each
device, without waiting for the device: what a run, a put or a deletion allocates and frees is
`runs.py`'s; what an executable does per run (its temp, its aliases) is read once per executable
(`executables.py`), so a compile-cache hit gives the same trace. An allocation is freed when the
last array holding it is garbage-collected (a weak reference says so) or deleted (`Array.delete`).

Runs arrive two ways. JAX's Python dispatch runs an executable through `pxla.ExecuteReplicated`,
whose `__call__` the capture wraps: every first run of a jitted function with new argument types
takes it. After that JAX's C++ fast path runs the executable itself and calls back only its
post-hook (`post_hook`), with the jitted function, its arguments and its outputs. Each output
array carries the aval and sharding objects of the executable it came from, so the first output
names the executable; `pjit._get_fastpath_data` is wrapped so that an executable the capture could
not tell apart from another keeps to the Python path. These are JAX internals: the capture checks
each hook before it installs any, and where one is missing it says so (`note`) and traces nothing,
rather than report a partial figure. Tested with JAX 0.10.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from threading import get_ident
from typing import Any

from ...supported import SUPPORTED_JAX
from ..call_sites import CallSites
from ..framework import Patches
from ..recorder import FLUSH_CHECK, TraceRecorder
from . import internals
from .backend_log import KeptAsText
from .executables import ExecutablePlan, Executables, argument_names_of, source_of, static_arguments
from .holdings import Holdings, Owner
from .lowering import compiling_for_target
from .post_hook import post_hook_slot
from .runs import SOURCE, RunRecording
from .shards import Asked, ShardSizes
from .window import JaxWindow

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""The monitoring event JAX records once per executable XLA compiles (jax._src.dispatch)."""


class JaxCapture(RunRecording):
    """Hooks JAX once per process and reports its allocations to a TraceRecorder."""

    name = SOURCE

    def __init__(self, recorder: TraceRecorder, sizer: Any = None) -> None:
        """`sizer`: a GPU sizer (capture/jax/gpu_compile.py) whose target's compile gives each executable's
        temp bytes; None keeps the CPU compile's."""
        self._recorder = recorder
        self.sizer = sizer
        self._holdings = Holdings(recorder, self._fail)
        self._executables = Executables(lambda: None)
        self._shards = ShardSizes()
        self._patches = Patches()
        self._backend_log = KeptAsText()  # JAX's backend-start log kept as text (backend_log.py)
        self._array_type: Any = type(None)  # jaxlib's ArrayImpl, once installed
        self._jax_array: Any = type(None)  # jax.Array: device values, never host transfers
        self._flatten: Callable[[Any], list[Any]] = lambda tree: [tree]
        self._donate_input = self._always_copy = None  # ArrayCopySemantics' (RunRecording declares them)
        self._compile_listener: Callable[..., None] | None = None
        self._post_hook: Callable[..., None] | None = None
        self.installed = False
        self.note = ""
        self.version = ""
        self._window = JaxWindow()
        self._failed = False  # the window's capture stopped on its own error
        self._step_plans: list[ExecutablePlan] = []  # per step the recorder numbered: the plan it runs
        self._step_asked: list[Asked] = []  # per step: the shard shapes its output's size was asked for
        self.call_sites = CallSites()  # the user's line of each call, by call site, for the process's life

    @property
    def window(self) -> JaxWindow:
        """What the capture saw since `begin`: the runs the recorder took as compact steps counted
        in, as far as it has written them (all of them once its window closed)."""
        taken = self._recorder.steps_taken
        if not taken:
            return self._window
        for step in taken:
            self._shards.asked.update(self._step_asked[step])  # sized once, in whichever window made the step
        return self._window.with_runs((self._step_plans[step], runs) for step, runs in taken.items())

    # -- installing ---------------------------------------------------------------------

    @property
    def installed_sizer(self) -> Any:
        """The target's sizer where it went in (capture/jax/gpu_compile.py, tpu_compile.py); None
        where none was asked for or it could not be installed (then the CPU compile's sizes stand)."""
        return self.sizer if self.sizer is not None and self.sizer.installed else None

    def install(self) -> bool:
        """Hook JAX (imported already); False, with `note` saying why, where this JAX offers no hook."""
        if self.installed:
            return True
        try:
            import jax as jax_module

            internal = internals.dispatch()
        except ImportError as exc:
            self.note = f"JAX's dispatch internals could not be imported ({exc}): JAX allocations are not traced"
            return False
        self.version = str(getattr(jax_module, "__version__", ""))
        dispatch, pjit, pxla, xla_client = internal.dispatch, internal.pjit, internal.pxla, internal.xla_client
        array_type = getattr(xla_client, "ArrayImpl", None)
        cache = getattr(internal.lib, "PjitFunctionCache", None)
        slot = post_hook_slot()
        missing = [
            name
            for name, present in (
                ("pjit._get_fastpath_data", hasattr(pjit, "_get_fastpath_data")),
                ("pxla.ExecuteReplicated.__call__", "__call__" in vars(getattr(pxla, "ExecuteReplicated", object))),
                ("dispatch._batched_device_put_impl", hasattr(dispatch, "_batched_device_put_impl")),
                ("pxla.batched_device_put", callable(getattr(pxla, "batched_device_put", None))),
                ("ArrayImpl.delete", hasattr(array_type, "delete")),
                ("ArrayImpl.addressable_data", hasattr(array_type, "addressable_data")),
                ("api._post_hook_state", slot is not None),
                ("PjitFunctionCache.clear_all", hasattr(cache, "clear_all")),
            )
            if not present
        ]
        if missing:
            self.note = (
                f"JAX {self.version} lacks {', '.join(missing)} (pytest-devmem's hooks are tested with JAX {SUPPORTED_JAX}): "
                "JAX allocations are not traced"
            )
            return False
        assert slot is not None and cache is not None
        self._array_type = array_type
        self._jax_array = jax_module.Array
        self._flatten = internal.flatten  # as the fast path flattens
        if self.sizer is not None:
            self.sizer.install()  # where it cannot be, its `note` says why and the CPU's sizes stand
        self._executables = Executables(cache.clear_all, self.installed_sizer)
        self._shards = ShardSizes(getattr(self.installed_sizer, "shard_bytes", None))
        semantics = getattr(xla_client, "ArrayCopySemantics", None)
        self._donate_input = getattr(semantics, "DONATE_INPUT", None)
        self._always_copy = getattr(semantics, "ALWAYS_COPY", None)
        self._patches.replace(pjit, "_get_fastpath_data", self._wrap_fastpath_data)
        self._patches.replace(pxla.ExecuteReplicated, "__call__", self._wrap_execute)
        if hasattr(getattr(pxla, "MeshExecutable", None), "create_cpp_call"):
            self._patches.replace(pxla.MeshExecutable, "create_cpp_call", self._wrap_compiled_call)
        self._patches.replace(dispatch, "_batched_device_put_impl", self._wrap_device_put)
        self._patches.replace(pxla, "batched_device_put", self._wrap_sharded_put)
        self._patches.replace(array_type, "delete", self._wrap_delete)
        self._patches.replace(array_type, "addressable_data", self._wrap_addressable_data)
        self._post_hook = self._fast_hook()
        slot.subscribe(self._post_hook)
        self._listen_to_compiles()
        logging.getLogger(internals.BACKENDS_LOGGER).addFilter(self._backend_log)
        cache.clear_all()  # fast-path entries made before the hooks name no executable the capture knows
        if self.installed_sizer is not None and hasattr(jax_module, "clear_caches"):
            # what JAX compiled before the sizer went in (at import, in a test nobody measured) would
            # keep the CPU's sizes, found in JAX's caches: lowered again through the sizer instead, so
            # a test's figures do not depend on what ran before the capture was installed
            jax_module.clear_caches()
        self.installed = True
        return True

    def uninstall(self) -> None:
        """Put JAX's own functions back."""
        self._patches.restore()
        logging.getLogger(internals.BACKENDS_LOGGER).removeFilter(self._backend_log)
        if self.sizer is not None:
            self.sizer.uninstall()
        if self._post_hook is not None:  # subscribed: JAX is imported, and the slot made
            slot = post_hook_slot()
            if slot is not None:
                slot.unsubscribe(self._post_hook)
            self._post_hook = None
        if self._compile_listener is not None:
            try:
                import jax.monitoring

                jax.monitoring.unregister_event_duration_listener(self._compile_listener)
            except (ImportError, AttributeError, AssertionError, ValueError):
                pass
            self._compile_listener = None
        self.installed = False

    def _listen_to_compiles(self) -> None:
        """Count XLA compilations through JAX's public monitoring events: one backend-compile event per
        executable compiled (a compile-cache hit sends none)."""
        try:
            import jax.monitoring
        except ImportError:
            return
        capture = self

        def on_event(event: str, duration_secs: float, **details: str | int) -> None:
            if (
                event == BACKEND_COMPILE_EVENT and capture._recorder.recording and not compiling_for_target()
            ):  # the GPU sizer's compiles are not the test's
                capture._window.compiled.append(str(details.get("fun_name", "executable")))

        jax.monitoring.register_event_duration_secs_listener(on_event)
        self._compile_listener = on_event

    # -- window -------------------------------------------------------------------------

    def begin(self) -> None:
        self._window = JaxWindow(since=self._executables.read)
        self._failed = False
        self._recorder.steps_taken.clear()
        self._shards.asked.clear()

    def window_compiler_entries(self) -> dict[str, dict[str, Any]]:
        """The target compiler's entries (by cache key, compile_store.py) that sized what the window
        ran: each executable it ran and each array shard it sized. The same in any test order: an
        entry found in the process's own memory is named as one read from disk."""
        sizer = self.installed_sizer
        if sizer is None:
            return {}
        return sizer.stored_entries(sorted(self.window.sized_keys), sorted(self._shards.asked))

    def compiler_entries(self, keys: Iterable[Any]) -> dict[str, dict[str, Any]]:
        """The target compiler's entries of `keys`, programs' cache keys and array shards' (shape,
        dtype), as `window_compiler_entries` gives a window's."""
        sizer = self.installed_sizer
        if sizer is None:
            return {}
        keys = list(keys)
        programs = sorted(key for key in keys if isinstance(key, str))
        return sizer.stored_entries(programs, sorted(key for key in keys if not isinstance(key, str)))

    def padded_sizes(self) -> dict[int, set[int]]:
        """A TPU sizer's tiled shard sizes and the dense sizes they stand for, of this window's shards; empty elsewhere."""
        sizer = self.installed_sizer
        return sizer.padded_sizes(self._shards.asked) if sizer is not None else {}

    def _fail(self, exc: Exception) -> None:
        self._failed = True
        self._executables.forget_steps()  # every later run through `_on_fast_run`, which stops here
        self._window.failure = (
            f"the JAX capture stopped on an internal error ({type(exc).__name__}: {exc}): the trace is incomplete"
        )

    # -- which executable runs ----------------------------------------------------------

    def _wrap_fastpath_data(self, original: Callable[..., Any]) -> Callable[..., Any]:
        executables = self._executables

        def get_fastpath_data(executable: Any, *args: Any, **kwargs: Any) -> Any:
            data = original(executable, *args, **kwargs)
            try:
                plan = executables.known(executable.unsafe_call) if executable is not None else None
            except Exception:
                return None
            if plan is not None and not plan.defined_in:  # the run just made: its function, from JAX's debug info
                plan.defined_in, plan.argument_names = source_of(executable), argument_names_of(executable)
                plan.static = static_arguments(sys._getframe(1))  # the call that compiled it: pjit's cache miss
            if data is None:
                return None
            try:
                if plan is None or not data.out_avals:
                    return None  # never seen run, or nothing to name it by: the Python path for it
                return data if executables.remember(data.out_avals[0], data.out_shardings[0], plan) else None
            except Exception:
                return None

        return get_fastpath_data

    def _wrap_compiled_call(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def create_cpp_call(executable: Any, params: Any) -> Any:
            if not getattr(executable, "out_avals", None):
                return None  # no output to name it by on the fast path: `Compiled` calls it from Python
            return original(executable, params)

        return create_cpp_call

    def _learn(
        self, plan: ExecutablePlan, args: Sequence[Any], parameters: Sequence[Any], leaves: Sequence[Any]
    ) -> None:
        """What a run on the Python path teaches about later runs on the fast path: how many flat
        arguments a call has, whether host values come with it, the donations it made, and the
        first output, which names the executable."""
        deleted = [
            position
            for position, value in enumerate(parameters)
            if isinstance(value, self._jax_array) and value.is_deleted()
        ]
        reads_arguments = plan.runs_read_arguments
        plan.learn(
            len(args),
            any(
                self._is_host(value) or self._copies(plan, position, value) for position, value in enumerate(parameters)
            ),
            deleted,
        )
        if plan.runs_read_arguments and not reads_arguments:
            self._executables.forget_steps()  # its runs are no steps any more
        if leaves and isinstance(leaves[0], self._array_type):
            self._executables.remember(leaves[0].aval, leaves[0].sharding, plan)

    # -- runs ---------------------------------------------------------------------------

    def _execute(self, original: Callable[..., Any], executable: Any, args: tuple[Any, ...]) -> Any:
        """Run the executable on the Python path; around it, record what XLA allocates for the run
        (and, in or out of a window, learn the executable). A fault in this bookkeeping never reaches
        the test: it stops the capture for the window, with a note."""
        recording = self._recorder.recording and not self._failed
        site = ""
        try:
            plan = self._executables.plan(executable)
            parameters = [args[position] for position in plan.kept if position < len(args)]
            if recording:
                site = self.call_sites.site_of(sys._getframe(1))
            transfers = self._transfer(plan, parameters, site) if recording else []
        except Exception as exc:
            if recording:
                self._fail(exc)
            return original(executable, *args)
        if plan.raises is not None:  # the target cannot run it (its compiler refused it): raised at the call, as there
            for transfer in transfers:  # its arguments never reach the device
                self._recorder.free(transfer)
            if recording:  # a program the test needed, never run
                self._window.executables.setdefault(plan.label, 0)
                self._window.ran(plan)
            error = plan.raises.error()  # with its record's entry: pytest raises it again for each test of a fixture's
            error.devmem_sizes = {plan.label: {"sized_for": plan.sized_for, "refused": plan.refused}}  # type: ignore[attr-defined]
            raise error
        try:
            outputs = original(executable, *args)
        except BaseException:
            for transfer in transfers:  # the run failed: what it was given is gone with it
                self._recorder.free(transfer)
            if recording:  # a program the test needed, never run here (the host could not, say)
                self._window.executables.setdefault(plan.label, 0)
                self._window.ran(plan)
            raise
        try:
            leaves = self._flatten(list(outputs))
            self._learn(plan, args, parameters, leaves)
            if recording:
                self._record_run(plan, parameters, leaves, transfers, site)
            elif self._recorder.fixtures.noting:
                self._note(leaves, plan, parameters)
        except Exception as exc:
            if recording:
                self._fail(exc)
        return outputs

    def _fast_hook(self) -> Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]:
        """JAX's post-hook. The run every loop repeats (one array out, nothing donated, no host
        values, an executable already seen so run, called from the same line) costs four identity
        checks against the last such run (its output's aval and sharding, its caller's code object
        and instruction offset; where another executable or line ran last, the call site's line
        from `call_sites` and a dictionary look-up), one compact record and a weak reference to its
        output kept in a set, everything it needs bound here; anything else goes on to `_on_fast_run`."""
        recorder, steps, note = self._recorder, self._executables.by_aval, self._note_fast
        fixtures = recorder.fixtures
        array_type, slow = self._array_type, self._on_fast_run
        keep, collected = self._holdings.owners.add, self._holdings.collected_callback
        ids, clock, flush_if_long, fail = recorder.ids, recorder.clock, recorder.flush_if_long, self._fail
        site_of, lines_of, getframe = self.call_sites.site_of, self.call_sites.lines_of, sys._getframe
        if "_sharding" not in dir(array_type):  # what `sharding` reads (jax/_src/array.py), at a third of the cost
            return slow
        # the last run's entry of `steps` (aval, sharding, plan, step, site), with the code object and
        # instruction offset of the user's frame that called it (None where JAX's own code called it:
        # an eager op, whose line the walk finds each time), one object so that a thread never sees
        # half of another's update; forgotten whenever `steps` is emptied
        nothing: tuple[Any, Any, Any, int, str, Any, int] = (None, None, None, 0, "", None, -1)
        last = nothing

        def forget_last() -> None:
            nonlocal last
            last = nothing

        self._executables.on_forget = forget_last

        def post_hook(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any) -> None:
            nonlocal last
            record = recorder.step_record
            if record is None:  # no window open, or paused
                if fixtures.noting:
                    note(function, args, kwargs, outputs)
                return
            # `steps` holds only runs that read no arguments, and is emptied (and the last run
            # forgotten) when a plan learns that its runs do, and when the capture fails
            if type(outputs) is array_type:
                known = last
                aval = outputs.aval
                caller = getframe(1)
                if (
                    aval is not known[0]
                    or outputs._sharding is not known[1]
                    or caller.f_code is not known[5]
                    or caller.f_lasti != known[6]
                ):
                    site = site_of(caller)
                    entry = steps.get((id(aval), site))
                    code = caller.f_code
                    if entry is None or entry[0] is not aval or entry[1] is not outputs._sharding:
                        slow(function, args, kwargs, outputs, site)
                        entry = steps.get((id(aval), site))  # the step it may have made: the next run asks no walk
                        if entry is not None and entry[0] is aval and entry[1] is outputs._sharding:
                            last = (*entry, code if lines_of(code) is not None else None, caller.f_lasti)
                        return
                    last = known = (*entry, code if lines_of(code) is not None else None, caller.f_lasti)
                buffer_id = next(ids)
                record((known[3], buffer_id, clock(), get_ident()))
                owner = Owner(outputs, collected)
                owner.held = buffer_id
                keep(owner)
                if not buffer_id % FLUSH_CHECK:
                    try:
                        flush_if_long()
                    except Exception as exc:  # inside JAX's call: a fault of the capture's stops it, never the test
                        fail(exc)
                return
            slow(function, args, kwargs, outputs, site_of(getframe(1)))

        return post_hook

    def _on_fast_run(
        self, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any, site: str | None = None
    ) -> None:
        """JAX's post-hook after a run on the C++ fast path: the same events as on the Python path.
        `site`: the user's line of the call (found here where not given)."""
        if not self._recorder.recording or self._failed:
            return
        try:
            if site is None:
                site = self.call_sites.site_of(sys._getframe(1))
            if type(outputs) is self._array_type:  # one array out
                plan = self._executables.named_by(outputs)
                if plan is not None and not plan.runs_read_arguments:
                    self._record_step(plan, outputs, site)  # the step every loop repeats, in one call
                    return
                leaves = [outputs]
            else:
                leaves = self._flatten(outputs)
                plan = self._executables.named_by(leaves[0])
            if plan is None:
                raise LookupError(
                    f"a run of {getattr(function, '__name__', function)!r} on JAX's fast path names no executable the capture has seen"
                )
            if plan.runs_read_arguments:
                parameters = self._fast_parameters(plan, function, args, kwargs)
                self._record_run(
                    plan,
                    parameters,
                    leaves,
                    self._transfer(plan, parameters, site) if plan.host_arguments else [],
                    site,
                )
            else:
                self._record_run(plan, None, leaves, [], site)
        except Exception as exc:
            self._fail(exc)
