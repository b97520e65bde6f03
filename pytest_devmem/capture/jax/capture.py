"""JAX's device allocations as trace events, modelled on what XLA does per executable run, on each
device, without waiting for the device.

Per run of a compiled executable: each output is allocated, one allocation per addressable shard on
that shard's device, sized from its shape, dtype and sharding; one temp buffer of the executable's
`temp_size_in_bytes` is allocated on each of its devices for the run and freed at its end; a donated
input whose buffer XLA aliased to an output hands its allocation to that output, and a donated input
that was not aliased is freed after the run; host values passed as arguments are transferred for the
run, split over the devices their parameter's sharding names. What an executable does per run (its
temp, its aliases, see `executables`) is read once per executable, so a compile-cache hit gives
the same trace. Arrays that reach the device without an executable (`jax.device_put`) come out of
`dispatch._batched_device_put_impl` and are allocations too. An allocation is freed when the last
array holding it is garbage-collected (a weak reference says so) or deleted (`Array.delete`).
Each allocation names the user's line of the call that made it (the executable's run, the put:
`call_sites.py`), looked up once per call site.

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

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from threading import get_ident
from typing import Any

from ..call_sites import CallSites
from ..patches import Patches
from ..recorder import FLUSH_CHECK, TraceRecorder
from .executables import ExecutablePlan, Executables, defined_by_jax, source_of
from .holdings import Holdings, Owner
from .lowering import compiling_for_target
from .post_hook import post_hook_slot
from .shards import ShardSizes, device_label, host_shards

SOURCE = "jax"
TESTED_JAX = "0.10"
"""The JAX minor version these hooks were written against and are tested with."""
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""The monitoring event JAX records once per executable XLA compiles (jax._src.dispatch)."""
DEVICE_PUT = "device_put"
SIGNATURE_CHARACTERS = 200
"""How much of an executable's parameter shapes a record keeps (a step over a large pytree has hundreds)."""


@dataclass
class JaxWindow:
    """What the capture saw in one test window, for the record."""

    executables: dict[str, int] = field(default_factory=dict)  # name -> runs
    temp_unknown: set[str] = field(default_factory=set)  # executables whose memory analysis failed
    compiled: list[str] = field(default_factory=list)  # executables XLA compiled in the window, by name
    used: dict[str, dict[int, ExecutablePlan]] = field(
        default_factory=dict
    )  # name -> the distinct executables run (compiled here or found in a cache), by id
    failure: str = ""  # the capture's own error, if one stopped it: the trace is then incomplete


class JaxCapture:
    """Hooks JAX once per process and reports its allocations to a TraceRecorder."""

    name = SOURCE

    def __init__(self, recorder: TraceRecorder, sizer: Any = None) -> None:
        """`sizer`: a GPU sizer (capture/jax/gpu_compile.py) whose target's compile gives each executable's
        temp bytes; None keeps the CPU compile's."""
        self._recorder = recorder
        self.sizer = sizer
        self.sizing_note = ""  # why the sizer could not be installed, if it could not
        self._holdings = Holdings(recorder, self._fail)
        self._executables = Executables(lambda: None)
        self._shards = ShardSizes()
        self._patches = Patches()
        self._array_type: Any = type(None)  # jaxlib's ArrayImpl, once installed
        self._jax_array: Any = type(None)  # jax.Array: device values, never host transfers
        self._flatten: Callable[[Any], list[Any]] = lambda tree: [tree]
        self._donate_input: Any = None
        self._compile_listener: Callable[..., None] | None = None
        self._post_hook: Callable[..., None] | None = None
        self.installed = False
        self.note = ""
        self.version = ""
        self._window = JaxWindow()
        self._failed = False  # the window's capture stopped on its own error
        self._step_plans: list[ExecutablePlan] = []  # per step the recorder numbered: the plan it runs
        self.call_sites = CallSites()  # the user's line of each call, by call site, for the process's life

    @property
    def window(self) -> JaxWindow:
        """What the capture saw since `begin`: the runs the recorder took as compact steps counted
        in, as far as it has written them (all of them once its window closed)."""
        window = self._window
        taken = self._recorder.steps_taken
        if not taken:
            return window
        merged = JaxWindow(
            dict(window.executables),
            set(window.temp_unknown),
            window.compiled,
            {name: dict(plans) for name, plans in window.used.items()},
            window.failure,
        )
        for step, runs in taken.items():
            plan = self._step_plans[step]
            merged.executables[plan.label] = merged.executables.get(plan.label, 0) + runs
            merged.used.setdefault(plan.label, {})[id(plan)] = plan
            if not plan.temp_known:
                merged.temp_unknown.add(plan.label)
        return merged

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
            import jax as jax_module  # type: ignore[import-not-found]
            from jax._src import dispatch, pjit  # type: ignore[import-not-found]
            from jax._src.interpreters import pxla  # type: ignore[import-not-found]
            from jax._src.lib import _jax, xla_client  # type: ignore[import-not-found]
            from jax._src.tree_util import dispatch_registry  # type: ignore[import-not-found]
        except ImportError as exc:
            self.note = f"JAX's dispatch internals could not be imported ({exc}): JAX allocations are not traced"
            return False
        self.version = str(getattr(jax_module, "__version__", ""))
        array_type = getattr(xla_client, "ArrayImpl", None)
        cache = getattr(_jax, "PjitFunctionCache", None)
        slot = post_hook_slot()
        missing = [
            name
            for name, present in (
                ("pjit._get_fastpath_data", hasattr(pjit, "_get_fastpath_data")),
                ("pxla.ExecuteReplicated.__call__", "__call__" in vars(getattr(pxla, "ExecuteReplicated", object))),
                ("dispatch._batched_device_put_impl", hasattr(dispatch, "_batched_device_put_impl")),
                ("ArrayImpl.delete", hasattr(array_type, "delete")),
                ("api._post_hook_state", slot is not None),
                ("PjitFunctionCache.clear_all", hasattr(cache, "clear_all")),
            )
            if not present
        ]
        if missing:
            self.note = (
                f"JAX {self.version} lacks {', '.join(missing)} (pytest-devmem's hooks are tested with JAX {TESTED_JAX}): "
                "JAX allocations are not traced"
            )
            return False
        assert slot is not None and cache is not None
        self._array_type = array_type
        self._jax_array = jax_module.Array
        self._flatten = lambda tree: dispatch_registry.flatten(tree, None)[0]  # as the fast path flattens
        if self.sizer is not None and not self.sizer.install():
            self.sizing_note = self.sizer.note
        self._executables = Executables(cache.clear_all, self.installed_sizer)
        self._shards = ShardSizes(getattr(self.installed_sizer, "shard_bytes", None))
        self._donate_input = getattr(getattr(xla_client, "ArrayCopySemantics", None), "DONATE_INPUT", None)
        self._patches.replace(pjit, "_get_fastpath_data", self._wrap_fastpath_data)
        self._patches.replace(pxla.ExecuteReplicated, "__call__", self._wrap_execute)
        if hasattr(getattr(pxla, "MeshExecutable", None), "create_cpp_call"):
            self._patches.replace(pxla.MeshExecutable, "create_cpp_call", self._wrap_compiled_call)
        self._patches.replace(dispatch, "_batched_device_put_impl", self._wrap_device_put)
        self._patches.replace(array_type, "delete", self._wrap_delete)
        self._post_hook = self._fast_hook()
        slot.subscribe(self._post_hook)
        self._listen_to_compiles()
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
        if self.sizer is not None:
            self.sizer.uninstall()
        if self._post_hook is not None:  # subscribed: JAX is imported, and the slot made
            slot = post_hook_slot()
            if slot is not None:
                slot.unsubscribe(self._post_hook)
            self._post_hook = None
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
            if (
                event == BACKEND_COMPILE_EVENT and capture._recorder.recording and not compiling_for_target()
            ):  # the GPU sizer's compiles are not the test's
                capture._window.compiled.append(str(details.get("fun_name", "executable")))

        jax.monitoring.register_event_duration_secs_listener(on_event)
        self._compile_listener = on_event

    # -- window -------------------------------------------------------------------------

    def begin(self) -> None:
        self._window = JaxWindow()
        self._failed = False
        self._recorder.steps_taken.clear()
        self._shards.asked.clear()

    def needed(self) -> dict[str, int]:
        """Per function, the executables the window needed: each distinct executable it ran (compiled
        in it or found in a cache, which depends on what ran before in the process), or, where more,
        the compiles it made (an executable compiled and never run). The same in any test order."""
        needed = {name: len(plans) for name, plans in self.window.used.items()}
        compiled: dict[str, int] = {}
        for name in self.window.compiled:
            compiled[name] = compiled.get(name, 0) + 1
        for name, count in compiled.items():
            needed[name] = max(needed.get(name, 0), count)
        return dict(sorted(needed.items()))

    def functions(self) -> dict[str, dict[str, object]]:
        """Per function the window ran (by executable name, "jit(step)"): the parameters' shapes of
        each distinct executable it needed (`signatures`), where it is defined (`defined_in`, "step at
        model.py:12", from JAX's debug info; "" where not known) and whether JAX itself defined it
        (`by_jax`: its eager helpers, `jnp.zeros`' `broadcast_in_dim` and the like, compiled once per
        shape). The same in any test order, as `needed`."""
        found: dict[str, dict[str, object]] = {}
        for name, plans in sorted(self.window.used.items()):
            defined_in = next((plan.defined_in for plan in plans.values() if plan.defined_in), "")
            found[name] = {
                "signatures": [  # in the order the test first ran them
                    plan.signature
                    if len(plan.signature) <= SIGNATURE_CHARACTERS
                    else plan.signature[:SIGNATURE_CHARACTERS] + "..."
                    for plan in plans.values()
                ],
                "defined_in": defined_in,
                "by_jax": bool(defined_in) and defined_by_jax(defined_in),
            }
        return found

    def window_sizes(self) -> dict[str, dict[str, object]]:
        """Per executable run in the window, where a GPU sizer was asked for: the compile its temp
        bytes come from, the CPU compile's for comparison, and why where it kept the CPU's."""
        if self.sizer is None:
            return {}
        found: dict[str, dict[str, object]] = {}
        for label, used in self.window.used.items():
            # the plans this window ran, never the last one read under the name: two functions of one
            # name (`<lambda>`), one compiled earlier and found in JAX's cache, are each their own
            plans = list(used.values())
            plan = next((p for p in plans if p.size_note or p.refused is not None), plans[0])
            found[label] = {
                "sized_for": plan.sized_for,
                **({"cpu_temp_bytes": plan.cpu_temp} if plan.cpu_temp is not None and plan.refused is None else {}),
                **({"note": plan.size_note} if plan.size_note else {}),
                **({"refused": plan.refused} if plan.refused is not None else {}),
            }
        return found

    def window_compiler_entries(self) -> dict[str, dict[str, Any]]:
        """The target compiler's entries (by cache key, compile_store.py) that sized what the window
        ran: each executable it ran and each array shard it sized. The same in any test order: an
        entry found in the process's own memory is named as one read from disk."""
        sizer = self.installed_sizer
        if sizer is None:
            return {}
        keys = {plan.sized_key for plans in self.window.used.values() for plan in plans.values() if plan.sized_key}
        return sizer.stored_entries(sorted(keys), sorted(self._shards.asked))  # type: ignore[no-any-return]

    def padded_sizes(self) -> dict[int, set[int]]:
        """A TPU sizer's tiled shard sizes and the dense sizes they stand for (tpu_compile.py); empty elsewhere."""
        sizer = self.installed_sizer
        padded = getattr(sizer, "padded_sizes", None)
        return padded() if callable(padded) else {}

    def window_buffers(self) -> dict[str, dict[str, object]]:
        """Per executable run in the window: the buffers at its peak (model/buffers.py's JSON, the
        largest kept), or why they are not known."""
        found: dict[str, dict[str, object]] = {}
        for label, used in self.window.used.items():  # the plans this window ran (see window_sizes)
            plan = max(used.values(), key=lambda p: max((size for _, size in p.temps), default=0))
            found[label] = plan.buffers.top().to_json() if plan.buffers is not None else {"unknown": plan.buffers_note}
        return found

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
                plan.defined_in = source_of(executable)
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

    def _wrap_execute(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def __call__(executable: Any, *args: Any) -> Any:
            return capture._execute(original, executable, args)

        return __call__

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
                self._window.used.setdefault(plan.label, {})[id(plan)] = plan
            raise plan.raises.error()
        try:
            outputs = original(executable, *args)
        except BaseException:
            for transfer in transfers:  # the run failed: what it was given is gone with it
                self._recorder.free(transfer)
            raise
        try:
            leaves = self._flatten(list(outputs))
            self._learn(plan, args, parameters, leaves)
            if recording:
                self._record_run(plan, parameters, leaves, transfers, site)
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
        recorder, steps = self._recorder, self._executables.by_aval
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
            if record is None:
                return  # no window open, or paused
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

    def _record_step(self, plan: ExecutablePlan, output: Any, site: str) -> None:
        """`_record_run` for a run with one array out, nothing donated and no host values (its
        output's allocations, then its temps), as a compact step of the recorder's; this and every
        later run of it from the same line on the fast path (`_fast_hook`)."""
        record = self._recorder.step_record
        if record is None:
            return
        aval, sharding = output.aval, output.sharding
        known = self._executables.step_of(aval, sharding, plan, site)
        if known is None:
            outputs = tuple((size, SOURCE, plan.label, device) for device, size in self._shards.of(output) if size > 0)
            temps = tuple((size, SOURCE, plan.temp_label, device) for device, size in plan.temps if size > 0)
            step = self._recorder.step(outputs, temps, site)
            self._step_plans.append(plan)
            assert len(self._step_plans) == step + 1
            known = self._executables.remember_step(aval, sharding, plan, step, site)
        buffer_id = next(self._recorder.ids)
        record((known[3], buffer_id, self._recorder.clock(), get_ident()))
        owner = Owner(output, self._holdings.collected_callback)
        owner.held = buffer_id  # its id alone: a Held is made only if it comes to be shared
        self._holdings.owners.add(owner)

    def _fast_parameters(
        self, plan: ExecutablePlan, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[Any]:
        """The executable's parameters in a fast-path call: its arguments flattened as JAX flattens
        them (static ones left out, keywords by name), behind the constants JAX passes first."""
        info = getattr(function, "_jit_info", None)
        static_numbers = tuple(getattr(info, "static_argnums", ()) or ())
        static_names = tuple(getattr(info, "static_argnames", ()) or ())
        if static_numbers and args:
            statics = {number % len(args) if number < 0 else number for number in static_numbers}
            args = tuple(value for position, value in enumerate(args) if position not in statics)
        if static_names:
            kwargs = {name: value for name, value in kwargs.items() if name not in static_names}
        flat = self._flatten((args, kwargs))
        constants = plan.arguments - len(flat)
        if plan.arguments < 0 or constants < 0:
            raise LookupError(
                f"{plan.label} was called on JAX's fast path with {len(flat)} arguments, its runs took {plan.arguments}"
            )
        return [flat[position - constants] if position >= constants else None for position in plan.kept]

    def _is_host(self, value: Any) -> bool:
        return value is not None and not isinstance(value, self._jax_array) and bool(getattr(value, "nbytes", 0))

    def _copies(self, plan: ExecutablePlan, position: int, value: Any) -> tuple[tuple[str, int], ...]:
        """A device array the executable wants on devices it is not on (an uncommitted `jnp.ones`
        beside an input sharded over 4 devices, a pmap's `in_axes=None`): JAX copies it there for
        the run (`shard_args`), each of those devices its share under the executable's sharding."""
        if not isinstance(value, self._jax_array) or position >= len(plan.in_shardings):
            return ()
        try:
            have = {device_label(device) for device in value.sharding.device_set}
            wanted = host_shards(value, int(value.nbytes), plan.in_shardings[position])
        except Exception:  # a value or sharding this cannot read: no copy assumed
            return ()
        return tuple((device, size) for device, size in wanted if device not in have)

    def _transfer(self, plan: ExecutablePlan, parameters: list[Any], site: str = "") -> list[int]:
        """Host values among the parameters, allocated on their parameter's devices for the run; and
        device arrays copied to the devices they are not on. Both are freed when the run ends."""
        transfers: list[int] = []
        for position, value in enumerate(parameters):
            if not self._is_host(value):
                for device, part in self._copies(plan, position, value):
                    transfers.append(self._recorder.allocate(part, SOURCE, plan.argument_label, device, site))
                continue
            size = int(value.nbytes)
            sharding = plan.in_shardings[position] if position < len(plan.in_shardings) else None
            shards = (
                host_shards(value, size, sharding)
                if sharding is not None
                else ((plan.devices[0] if plan.devices else "", size),)
            )
            for device, part in shards:
                transfers.append(self._recorder.allocate(part, SOURCE, plan.argument_label, device, site))
        return transfers

    def _record_run(
        self,
        plan: ExecutablePlan,
        parameters: list[Any] | None,
        outputs: Sequence[Any],
        transfers: list[int],
        site: str = "",
    ) -> None:
        """Outputs allocated (or handed a donated input's allocation), the temp buffers for the run,
        donated inputs and transfers freed; what it allocates made at `site`, the user's line of the call."""
        allocate, label, holdings, shards_of, array_type = (
            self._recorder.allocate,
            plan.label,
            self._holdings,
            self._shards.of,
            self._array_type,
        )
        runs = self._window.executables
        runs[label] = runs.get(label, 0) + 1
        self._window.used.setdefault(label, {})[id(plan)] = plan
        if not plan.temp_known:
            self._window.temp_unknown.add(label)
        for index, output in enumerate(outputs):
            if (
                type(output) is not array_type
                and not isinstance(output, array_type)
                or holdings.held_by(output) is not None
            ):
                continue  # not an array, or one the run was given and gave back
            if parameters is not None and index in plan.aliases:
                donor = (
                    self._device_array(parameters[plan.aliases[index]])
                    if plan.aliases[index] < len(parameters)
                    else None
                )
                held = holdings.hand_over(donor) if donor is not None and donor.is_deleted() else None
                if held is not None:
                    holdings.hold(output, held)
                    continue
            holdings.hold_new(
                output, [allocate(size, SOURCE, label, device, site) for device, size in shards_of(output)]
            )
        if plan.temps:
            free = self._recorder.free
            for temp in [allocate(size, SOURCE, plan.temp_label, device, site) for device, size in plan.temps]:
                free(temp)
        if parameters is not None:
            for position in plan.donated:  # donated, and its buffers became no output's
                donor = self._device_array(parameters[position]) if position < len(parameters) else None
                if donor is not None and donor.is_deleted():
                    holdings.release(donor)
        for transfer in transfers:
            self._recorder.free(transfer)

    def _device_array(self, value: Any) -> Any:
        """The ArrayImpl behind a parameter (a PRNG key array wraps one); None for anything else."""
        if type(value) is self._array_type:
            return value
        if isinstance(value, self._jax_array):
            leaves = self._flatten(value)
            if len(leaves) == 1 and isinstance(leaves[0], self._array_type):
                return leaves[0]
        return None

    # -- transfers and deletions --------------------------------------------------------

    def _wrap_device_put(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def batched_device_put(*values: Any, **kwargs: Any) -> Any:
            results = original(*values, **kwargs)
            if capture._recorder.recording and not capture._failed:
                try:
                    site = capture.call_sites.site_of(sys._getframe(1))
                    capture._after_device_put(values, kwargs.get("copy_semantics") or (), results, site)
                except Exception as exc:
                    capture._fail(exc)
            return results

        return batched_device_put

    def _after_device_put(
        self, values: Sequence[Any], copy_semantics: Sequence[Any], results: Sequence[Any], site: str = ""
    ) -> None:
        """Each result is a transfer of its own, made at `site`, except where it is the value itself,
        shares the value's buffers (put onto the placement it had: JAX reuses them), or took them
        over (donated)."""
        holdings = self._holdings
        for position, result in enumerate(results):
            if not isinstance(result, self._array_type) or holdings.held_by(result) is not None:
                continue
            source = self._device_array(values[position]) if position < len(values) else None
            held = None
            if source is not None and source is not result and holdings.held_by(source) is not None:
                copy = copy_semantics[position] if position < len(copy_semantics) else None
                if source.is_deleted():
                    held = holdings.hand_over(source) if copy is not None and copy == self._donate_input else None
                elif source.sharding == result.sharding:
                    held = holdings.held_by(source)
            if held is None:
                holdings.hold_new(
                    result,
                    [
                        self._recorder.allocate(size, SOURCE, DEVICE_PUT, device, site)
                        for device, size in self._shards.of(result)
                    ],
                )
            else:
                holdings.hold(result, held)

    def _wrap_delete(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def delete(array: Any) -> Any:
            result = original(array)
            try:
                capture._holdings.delete(array)
            except Exception as exc:
                capture._fail(exc)
            return result

        return delete
