"""TensorFlow's profile (an XSpace: tsl/profiler/protobuf/xplane.proto) read for its allocator events.

Each BFC allocator of TensorFlow records every allocation and deallocation as a `MemoryAllocation` /
`MemoryDeallocation` TraceMe on the host plane (`BFCAllocator::AddTraceMe`, xla/tsl/framework/
bfc_allocator.cc) with the allocator's name, the requested and the allocated bytes, the chunk's
address, and the op that asked (`tf_op`) with its step id (`id`). A function's kernels carry the step
id of the function's `FunctionRun` event, which runs inside the event of whatever called it: an
eager call of the function (`EagerLocalExecute: __inference_step_219`) or a tf.data iterator
(`Iterator::...::Map`, `ParallelMapProduce`); so the function each op ran in can be named. An
allocation outside any op (a tf.data batch filled in the executor's done callback, say) takes the
function of the step it happened in (`ExecutorState::Process`, `ExecutorDoneCallback`), or else
what its thread was doing.

Only the protobuf's fields are read here, through the generated classes TensorFlow ships; nothing
imports TensorFlow. Timestamps: the host plane's lines count from the session's start
(`profile_start_time` on the `Task Environment` plane), on TensorFlow's clock, the wall clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

HOST_PLANE = "/host:CPU"
ENVIRONMENT_PLANE = "Task Environment"
ALLOCATION, DEALLOCATION = "MemoryAllocation", "MemoryDeallocation"
_WANTED_STATS = ("allocator_name", "requested_bytes", "addr", "tf_op", "id", "allocation_bytes")
ALLOCATOR_STATS = ("bytes_allocated", "peak_bytes_in_use", "fragmentation", "allocation_bytes")
"""The allocator's own figures after each call (`AddTraceMe`): bytes in use, peak, fragmentation (its
`GetFragmentation`, written with six significant digits, NaN when nothing is free) and the chunk's size."""
_FUNCTION = re.compile(r"^__inference_(.+?)_\d+$")
_ABSOLUTE_NS = 10**15  # line timestamps below this count from the session's start (about 11 days)


class AllocatorEvent(NamedTuple):
    """One allocator call TensorFlow's profiler recorded (a tuple: a profile holds thousands)."""

    time_ns: int  # on TensorFlow's clock (the wall clock), absolute
    allocate: bool  # False: a deallocation
    allocator: str  # e.g. "GPU_0_bfc", "bfc_cpu_allocator_for_gpu"
    address: int
    requested_bytes: int
    op: str = ""  # the op that asked, "" when none was running
    function: str = ""  # the function (or tf.data stage) the op ran in, "" when unknown
    thread: int = 0  # the index of the thread's line in the profile
    stats: AllocatorStats | None = None  # the allocator's figures after the call, when asked for
    runtime_function: str = ""  # the op's function as the runtime names it (`__inference_step_219`), "" when unknown
    first_call: bool = False  # made by a tf.function's first call, outside its run (FIRST_CALL)
    chunk_bytes: int = 0  # the allocator's chunk for it (0: not stated)


class AllocatorStats(NamedTuple):
    """What TensorFlow's BFC allocator states after one call (see ALLOCATOR_STATS)."""

    bytes_in_use: int
    peak_bytes_in_use: int
    fragmentation: float
    chunk_bytes: int


@dataclass
class Profile:
    """What one profiling session holds for the trace."""

    events: list[AllocatorEvent] = field(default_factory=list)
    host_events: int = 0  # every event TensorFlow recorded on the host: 0 means it did nothing
    start_ns: int | None = None  # the session's start on TensorFlow's clock, when the profile says
    functions: set[str] = field(default_factory=set)  # the tf.functions called eagerly, by their authors' names


def function_name(name: str) -> str:
    """A graph function's name as its author wrote it: `__inference_step_219` -> `step`."""
    match = _FUNCTION.match(name)
    return match.group(1) if match else name


def runtime_name(event_name: str) -> str:
    """The runtime's name of a function called eagerly (`__inference_step_219`); "" for another caller."""
    name = event_name[len(_EAGER) :] if event_name.startswith(_EAGER) else ""
    return name if _FUNCTION.match(name) else ""


_EAGER = "EagerLocalExecute: "


def caller_name(event_name: str) -> str | None:
    """What an enclosing event says about who ran the code inside it, or None: a function (or an
    op) called eagerly, a stage of a tf.data pipeline, host data made a tensor."""
    if event_name.startswith(_EAGER):
        return function_name(event_name[len(_EAGER) :])
    if event_name.startswith("Iterator::"):
        stage = event_name.rsplit("::", 1)[-1]
        return "tf.data " + stage.split("[", 1)[0]
    if event_name.endswith("Produce") and len(event_name) > len("Produce"):  # ParallelMapProduce, PrefetchProduce
        return "tf.data " + event_name[: -len("Produce")]
    if event_name in ("convert_to_tensor", "tf.constant"):  # host data made a tensor
        return event_name
    return None


def _stat_value(stat: Any, stat_names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return getattr(stat, kind) if kind else None


def _start_ns(space: Any) -> int | None:
    for plane in space.planes:
        if plane.name != ENVIRONMENT_PLANE:
            continue
        names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names.get(stat.metadata_id) == "profile_start_time":
                value = _stat_value(stat, names)
                return int(value) if value else None
    return None


_ALLOCATION, _DEALLOCATION, _RUN, _CALLER, _STEP, _PHASE = 1, 2, 3, 4, 5, 6  # what an event is to the reader
_RUNNING, _FIRST_CALL, _KERNELS = 1, 2, 3  # what the innermost enclosing event says the code inside it does
_PHASES = {
    "tf.function-graph_building": _FIRST_CALL,
    "KernelAndDeviceFunc::Run": _KERNELS,  # builds a tf.function's kernels (they run in FunctionRun); runs an eager op
    "EagerKernelExecute": _RUNNING,
    "EagerCopyToDevice": _RUNNING,
}
FIRST_CALL = """What a tf.function's first call in a process makes outside its run: in no trace.
Tracing keeps on the host the small constants it infers shapes from (`ShapeRefiner`'s cache,
common_runtime/shape_refiner.h; `EvaluateConstantTensor`, eval_const_tensor.cc). Instantiating optimises the graph: Grappler evaluates constants on a CPU
device of its own (`DeviceSimple`, grappler/optimizers/evaluation_utils.cc), host memory beside a
GPU. With Grappler's folding off, the executor folds them as it builds the kernels
(`ConstantFold`, common_runtime/constant_folding.cc). Each `Const` kernel keeps its tensor
(`ConstantOp`, kernels/constant_op.cc), on a GPU in its memory, while the function lives. All of it
happens once per process, in whichever test called the function first: the record names the
functions instead (`capture.py`)."""
_INITIALIZER = "initialize_variables"
"""The function TensorFlow makes to run the initializers a tf.function's first trace lifted out
(`_initialize_uninitialized_variables`, eager/polymorphic_function/polymorphic_function.py). It is
made and run once, in the test that makes the variables, and its constants become their buffers
(Keras's optimizer slots: `Initializer/zeros`): its kernels' constants stay in the trace."""
_STEP_SCOPES = ("ExecutorState::Process", "ExecutorDoneCallback")  # events that run one step, with its id


class _Pending(NamedTuple):
    """An allocator event as its line gives it, before the function it ran in is known (that needs
    every line's `FunctionRun` events: read after all of them)."""

    time_ns: int
    allocate: bool
    thread: int
    allocator: str
    address: int
    requested: int
    op: str
    step: int
    caller: str
    scope: int
    step_inside: bool
    stats: AllocatorStats | None
    first_call: bool
    chunk: int


def read_profile(space: Any, start_ns: int | None = None, *, with_stats: bool = False) -> Profile:
    """The allocator events of an XSpace, in the order of their lines, each with its op and, where
    the profile shows it, the function it ran in. `start_ns`: when the session started, for a
    profile that does not say. `with_stats`: keep the allocator's own figures of each call too
    (for holding the model to the allocator; a test's capture does not need them)."""
    profile = Profile(start_ns=_start_ns(space) or start_ns)
    pending: list[_Pending] = []
    run_callers: dict[int, str] = {}  # step id of a FunctionRun -> who called that function
    run_functions: dict[int, str] = {}  # step id of a FunctionRun -> the runtime's name of that function
    for plane in space.planes:
        if plane.name == HOST_PLANE:
            _read_plane(plane, profile, with_stats, pending, run_callers, run_functions)
    for event in pending:
        function = run_callers.get(event.step, "") if event.step else ""
        graph = run_functions.get(event.step, "") if event.step and event.op else ""
        if (
            not event.op and not function
        ):  # no op: the step it happened in, or what the thread was doing, the inner first
            in_step = run_callers.get(event.scope, "") if event.scope else ""
            function = (in_step or event.caller) if event.step_inside else (event.caller or in_step)
        op = event.op
        profile.events.append(
            AllocatorEvent(
                event.time_ns,
                event.allocate,
                event.allocator,
                event.address,
                event.requested,
                function_name(op) if op.startswith("__inference_") else op,
                function,
                event.thread,
                event.stats,
                graph,
                event.first_call,
                event.chunk,
            )
        )
    profile.functions = {function_name(name) for name in run_functions.values() if name}
    return profile


def _event_roles(plane: Any) -> tuple[dict[int, int], dict[int, str], dict[int, str]]:
    """What each kind of event of the plane is to the reader (by its metadata id), the caller each
    caller's kind names, and the runtime's name of a function a caller runs (`runtime_name`)."""
    roles: dict[int, int] = {}
    callers: dict[int, str] = {}
    runtime: dict[int, str] = {}
    for key, meta in plane.event_metadata.items():
        name = meta.name
        if name == ALLOCATION:
            roles[key] = _ALLOCATION
        elif name == DEALLOCATION:
            roles[key] = _DEALLOCATION
        elif name == "FunctionRun":
            roles[key] = _RUN
        elif name in _STEP_SCOPES:
            roles[key] = _STEP
        elif name in _PHASES:
            roles[key] = _PHASE
        elif (caller := caller_name(name)) is not None:
            roles[key], callers[key], runtime[key] = _CALLER, caller, runtime_name(name)
    return roles, callers, runtime


def _read_plane(
    plane: Any,
    profile: Profile,
    with_stats: bool,
    pending: list[_Pending],
    run_callers: dict[int, str],
    run_functions: dict[int, str],
) -> None:
    """The host plane's allocator events into `pending`, and the caller of each `FunctionRun` into
    `run_callers` (the runtime's name of the function it ran into `run_functions`). A profile holds some tens of thousands of events per second of TensorFlow work,
    so each event costs one dictionary lookup unless it is an allocator event, a `FunctionRun` or a
    caller; of an allocator event only the five statistics used are read."""
    stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    wanted = {key: name for key, name in stat_names.items() if name in _WANTED_STATS}
    figures = {key: name for key, name in stat_names.items() if name in ALLOCATOR_STATS} if with_stats else {}
    step_stat = next((key for key, name in wanted.items() if name == "id"), None)
    roles, callers, runtime = _event_roles(plane)
    phases = {key: _PHASES[meta.name] for key, meta in plane.event_metadata.items() if roles.get(key) == _PHASE}
    for thread, line in enumerate(plane.lines):
        events = line.events
        profile.host_events += len(events)
        base = line.timestamp_ns
        if base < _ABSOLUTE_NS:
            base += profile.start_ns or 0
        # enclosing callers, steps and phases: (end, caller, step id, the caller's runtime name, phase); popped lazily
        stack: list[tuple[int, str, int, str, int]] = []
        last_start = -1
        for event in events:
            role = roles.get(event.metadata_id)
            if role is None:
                continue
            start = event.offset_ps
            if start < last_start:  # not sorted by time (a profile TensorFlow did not sort): no nesting
                stack.clear()
            last_start = start
            while stack and stack[-1][0] <= start:
                stack.pop()
            if role == _CALLER:
                if event.duration_ps > 0:  # a function's eager call: its first call's work, until its kernels execute
                    function = runtime[event.metadata_id]
                    phase = _FIRST_CALL if function else _RUNNING
                    stack.append((start + event.duration_ps, callers[event.metadata_id], 0, function, phase))
                continue
            if role == _STEP or role == _PHASE:
                if event.duration_ps > 0:
                    phase = phases.get(event.metadata_id, _RUNNING)
                    if phase == _KERNELS:  # a tf.function's when its innermost caller runs one, else an eager op's
                        function = next((entry[3] for entry in reversed(stack) if entry[1]), "")
                        phase = _FIRST_CALL if function and function_name(function) != _INITIALIZER else _RUNNING
                    elif role == _STEP and stack and stack[-1][4] == _FIRST_CALL:
                        phase = _FIRST_CALL  # the executor folding constants as it builds the kernels
                    scope = 0
                    if role == _STEP:
                        scope = next(
                            (
                                stat.int64_value or stat.uint64_value
                                for stat in event.stats
                                if stat.metadata_id == step_stat
                            ),
                            0,
                        )
                    stack.append((start + event.duration_ps, "", scope, "", phase))
                continue
            caller, scope, step_inside = "", 0, False  # the innermost caller and step, and which is inside
            function_id = ""
            for _, name, step_id, runtime_id, _ in reversed(stack):
                if name and not caller:
                    caller, function_id = name, runtime_id
                elif step_id and not scope:
                    scope, step_inside = step_id, not caller
                if caller and scope:
                    break
            if role == _RUN:
                if caller:
                    run = next((stat for stat in event.stats if wanted.get(stat.metadata_id) == "id"), None)
                    if run is not None:
                        run_callers[run.int64_value or run.uint64_value] = caller
                        run_functions[run.int64_value or run.uint64_value] = function_id
                if event.duration_ps > 0:
                    stack.append((start + event.duration_ps, "", 0, "", _RUNNING))
                continue
            allocator, op, requested, address, step, chunk = _wanted_stats(event, wanted, stat_names)
            stats = _allocator_stats(event, figures) if figures else None
            pending.append(
                _Pending(
                    base + start // 1000,
                    role == _ALLOCATION,
                    thread,
                    allocator,
                    address,
                    requested,
                    op,
                    step,
                    caller,
                    scope,
                    step_inside,
                    stats,
                    bool(stack) and stack[-1][4] == _FIRST_CALL,
                    chunk,
                )
            )


def _wanted_stats(
    event: Any, wanted: dict[int, str], stat_names: dict[int, str]
) -> tuple[str, str, int, int, int, int]:
    """An allocator event's allocator, op, requested bytes, address, step id and chunk's bytes, its
    other statistics left unread."""
    allocator, op, requested, address, step, chunk, found = "", "", 0, 0, 0, 0, 0
    for stat in event.stats:
        name = wanted.get(stat.metadata_id)
        if name is None:
            continue
        if name == "allocator_name":
            allocator = stat.str_value or stat_names.get(stat.ref_value, "")
        elif name == "tf_op":
            op = stat.str_value or stat_names.get(stat.ref_value, "")
        elif name == "requested_bytes":
            requested = stat.int64_value or stat.uint64_value
        elif name == "addr":
            address = stat.uint64_value or stat.int64_value
        elif name == "allocation_bytes":
            chunk = stat.int64_value or stat.uint64_value
        else:
            step = stat.int64_value or stat.uint64_value
        found += 1
        if found == len(_WANTED_STATS):
            break
    # TensorFlow 2.19 prints a missing op as "(null)" (tf.data's batch filled outside any op): none
    return allocator, "" if op == "(null)" else op, requested, address, step, chunk


def _allocator_stats(event: Any, figures: dict[int, str]) -> AllocatorStats:
    values: dict[str, float] = {}
    for stat in event.stats:
        name = figures.get(stat.metadata_id)
        if name is not None:
            kind = stat.WhichOneof("value")
            values[name] = (
                getattr(stat, kind) if kind in ("int64_value", "uint64_value", "double_value") else float("nan")
            )
    return AllocatorStats(
        int(values.get("bytes_allocated", -1)),
        int(values.get("peak_bytes_in_use", -1)),
        float(values.get("fragmentation", float("nan"))),
        int(values.get("allocation_bytes", -1)),
    )
