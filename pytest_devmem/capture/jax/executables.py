"""What one compiled JAX executable allocates per run, read once from the executable itself.

Per run XLA allocates each output, one temp buffer per device of the size its memory analysis gives
(`temp_size_in_bytes` is per device: an SPMD executable's module is the per-device program), and
reuses a donated input's buffer for the output XLA aliased it to. The aliases are the compiled
module's `input_output_alias` (the header line of its HLO text): JAX lowers `donate_argnums` to
aliases where shapes match and to `buffer_donor` entries that XLA may alias while compiling
(jax/_src/interpreters/mlir.py, `_set_up_aliases`), so only the compiled module knows which it did.
"""

from __future__ import annotations

import hashlib
import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...model.buffers import ProgramBuffers
from ...model.executables import ARGUMENT_SUFFIX, TEMP_SUFFIX
from . import internals
from .buffers import in_jax, program_buffers
from .shards import Shards, device_label
from .sizes import ExecutableSizes, NotRunnable

STEP_CACHE_LIMIT = 4096
"""Steps kept by their output's identity before the cache starts again (executables' outputs
reuse their aval and sharding objects run after run)."""
_ALIAS_ENTRY = re.compile(r"\{([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}")
_DONOR_ENTRY = re.compile(r"\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}\s*\)")
_LAYOUT = re.compile(r"\{[^{}]*\}|/\*[^*]*\*/")  # a shape's layout in HLO text (`{1,0}`, `{1,0:T(8,128)}`), a comment


@dataclass(eq=False)
class ExecutablePlan:
    """The facts of one executable that every run repeats."""

    label: str
    devices: tuple[str, ...]  # the devices it runs on
    temps: Shards  # (device, temp bytes) on each device the executable runs on
    temp_known: bool  # False: no memory analysis on this backend, temps unknown
    aliases: dict[int, int]  # output index -> parameter index of the donated input it reuses
    donated: tuple[int, ...]  # parameters donated (aliased or left for XLA to use)
    kept: tuple[int, ...]  # the flat arguments the executable takes, by position (JAX drops unused ones)
    in_shardings: tuple[Any, ...]  # per parameter: how a host value passed there is placed
    arguments: int = -1  # flat arguments per call, constants included; learned from a run
    host_arguments: bool = False  # a run had host values among its arguments
    sized_for: str = "cpu"  # the compile its temp sizes come from: the CPU one, or a GPU target's
    cpu_temp: int | None = None  # the CPU compile's temp bytes, where another target's are used
    size_note: str = ""  # why it keeps the CPU compile's sizes although a GPU target was asked
    refused: dict[str, object] | None = None  # the target's compiler refused it for memory: its message and figures
    signature: str = ""  # its parameters' shapes as XLA compiled them, e.g. "f32[128,784], s32[]"
    defined_in: str = ""  # the traced function, "name at file:line" (JAX's debug info); "" where not known
    argument_names: tuple[str, ...] = ()  # its parameters' paths, "params['w']" (JAX's debug info); () where not known
    static: str = ""  # the static arguments of the call that compiled it, "scale=2.0"; "" where none or not known
    raises: NotRunnable | None = None  # the target cannot run it: its call raises this instead of running
    buffers: ProgramBuffers | None = None  # the buffers at its peak, as the compile that sized it states them
    buffers_note: str = ""  # why they are not known
    sized_key: str = ""  # the key of the target compiler's entry its sizes came from (compile_store.py)
    serial: int = -1  # the order in which the process first ran it (`Executables.plan`): its own number
    program: str = ""  # a digest of the compiled module's canonical text (no names, no metadata); "" where none
    runs_read_arguments: bool = field(init=False)  # donations to follow or host values to transfer
    temp_label: str = field(init=False)
    argument_label: str = field(init=False)

    def __post_init__(self) -> None:
        self.temp_label = self.label + TEMP_SUFFIX
        self.argument_label = self.label + ARGUMENT_SUFFIX
        self.runs_read_arguments = bool(self.donated)

    def learn(self, arguments: int, host_arguments: bool, deleted: Sequence[int]) -> None:
        """What a run showed: its count of flat arguments, host values among them, parameters
        deleted by the run (donated, where the compiled module did not say so)."""
        self.arguments = arguments
        self.host_arguments = self.host_arguments or host_arguments
        if any(position not in self.donated for position in deleted):
            self.donated = tuple(sorted({*self.donated, *deleted}))
        self.runs_read_arguments = bool(self.donated) or self.host_arguments

    def same_runs_as(self, other: ExecutablePlan) -> bool:
        """Whether a run of either gives the same events and is the same program (so either may stand
        for the other: in the trace and in the programs a test needed)."""
        facts = ("label", "program", "devices", "temps", "aliases", "donated", "kept", "arguments", "host_arguments")
        return all(getattr(self, name) == getattr(other, name) for name in facts) and all(
            a is b or a == b for a, b in zip(self.in_shardings, other.in_shardings)
        )


def source_of(executable: Any) -> str:
    """Where a `pxla.MeshExecutable`'s function is defined, "name at file:line" as JAX's debug info
    has it (`_all_args_info.debug_info.func_src_info`, jax/_src/interpreters/pxla.py); "" where not."""
    return internals.function_source(executable)


def argument_names_of(executable: Any) -> tuple[str, ...]:
    """The paths of an executable's parameters, "params['w']", as JAX's debug info names them."""
    return internals.argument_names(executable)


def static_arguments(caller: Any) -> str:
    """`scale=2.0`: the static arguments of the jit call that compiled an executable."""
    return internals.static_arguments(caller)


def defined_by_jax(defined_in: str) -> bool:
    """Whether "name at file:line" names a file of JAX's own packages (jax, jaxlib): JAX's eager
    operations run as jitted functions of its own (`jax._src.dispatch.xla_primitive_callable`, and
    `jnp`/`jax.random` helpers such as `_normal`), compiled once per shape."""
    _, _, place = defined_in.rpartition(" at ")
    return in_jax(place.rsplit(":", 1)[0])


def plan_of(executable: Any, sizer: Any = None) -> ExecutablePlan:
    """Read the plan of a `pxla.ExecuteReplicated` (the callable behind a compiled jit executable).
    With a GPU `sizer` (capture/jax/gpu_compile.py), its temp bytes are those of the same computation
    compiled for the sizer's GPU, where that compile succeeds."""
    xla_executable = executable.xla_executable
    devices = [device_label(device) for device in xla_executable.local_devices()]
    temp = cpu_temp = _temp_size(xla_executable)
    sized_for, note, refused, sizes, sized_key = "cpu", "", None, None, ""
    raises: NotRunnable | None = None
    if sizer is not None:
        sizes = sizer.sizes_for(executable)
        if isinstance(sizes, ExecutableSizes):
            temp, sized_for, sized_key = sizes.temp_bytes, sizes.target, sizes.key
        elif isinstance(sizes, NotRunnable):  # it never runs there, nor here: its call raises
            raises, refused, note = sizes, sizes.refusal(), sizes.note()
            if refused is not None:  # the target's compiler refused it for memory: no temp of its own
                sized_for, temp = str(refused.get("target")), 0
        else:  # Unavailable: it keeps the CPU compile's sizes
            note = sizes.reason
    tokens = len(getattr(executable, "ordered_effects", ()) or ())  # effect tokens lead inputs and outputs
    text = _module_text(xla_executable)
    header = text.split("\n", 1)[0]
    aliases, donors = parse_donations(header)
    aliases = {
        output - tokens: parameter - tokens
        for output, parameter in aliases.items()
        if output >= tokens and parameter >= tokens
    }
    donated = tuple(sorted(set(aliases.values()) | {parameter - tokens for parameter in donors if parameter >= tokens}))
    handler = getattr(executable, "in_handler", None)
    buffers, buffers_note = program_buffers(xla_executable, sizes if sized_for != "cpu" else None)
    return ExecutablePlan(
        label=str(getattr(executable, "name", "executable")),
        devices=tuple(devices),
        temps=tuple((device, temp) for device in devices) if temp else (),
        temp_known=temp is not None,
        aliases=aliases,
        donated=donated,
        kept=tuple(sorted(executable.kept_var_idx)),
        in_shardings=tuple(getattr(handler, "in_shardings", ()) or ()),
        sized_for=sized_for,
        cpu_temp=cpu_temp if sized_for != "cpu" else None,
        size_note=note,
        refused=refused,
        signature=parse_signature(header),
        raises=raises,
        buffers=buffers,
        buffers_note=buffers_note,
        sized_key=sized_key,
        program=hashlib.sha256(text.encode()).hexdigest()[:32] if text else "",
    )


def _temp_size(xla_executable: Any) -> int | None:
    try:
        return int(xla_executable.get_compiled_memory_stats().temp_size_in_bytes)
    except Exception:  # a backend without memory analysis
        return None


def _module_text(xla_executable: Any) -> str:
    """The compiled module's HLO text as XLA prints it canonically: instructions numbered in order,
    no metadata (source lines, op names), so that the same program compiled twice, or traced from
    another caller, reads the same ("" where the backend gives none). Its first line is the module's
    header (`HloPrintOptions.canonical`, xla/hlo/ir/hlo_print_options.h). The options raise where
    a JAX release moved them: the donations the text holds are never lost without a word."""
    options = internals.canonical_print_options()
    try:
        modules = xla_executable.hlo_modules()
        return modules[0].to_string(options) if modules else ""
    except Exception:
        return ""


def parse_signature(header: str) -> str:
    """The parameters' and results' shapes of `entry_computation_layout={(f32[4,3]{1,0}, bf16[3]{0})->f32[4]{0}}`
    in an HLO module's header, layouts and index comments left out: "(f32[4,3], bf16[3])->f32[4]" ("" where
    the header has none)."""
    return " ".join(_LAYOUT.sub("", _attribute(header, "entry_computation_layout")).split())


def parse_donations(header: str) -> tuple[dict[int, int], set[int]]:
    """Read `input_output_alias={ {out}: (param, {index}, kind), ... }` and `buffer_donor={ (param, {index}), ... }`
    from an HLO module's header line. A tupled parameter (XLA tuples very long argument lists) counts
    by its tuple index; an alias into a nested output is left out (its output is then counted afresh)."""
    aliases: dict[int, int] = {}
    for output, parameter, index in _ALIAS_ENTRY.findall(_attribute(header, "input_output_alias")):
        output_index = _index(output)
        if len(output_index) > 1:
            continue
        aliases[output_index[0] if output_index else 0] = _parameter(int(parameter), _index(index))
    donors = {
        _parameter(int(parameter), _index(index))
        for parameter, index in _DONOR_ENTRY.findall(_attribute(header, "buffer_donor"))
    }
    return aliases, donors - set(aliases.values())


def _attribute(header: str, name: str) -> str:
    """The braced value of `name={...}` in the header, braces balanced; "" when absent."""
    start = header.find(name + "={")
    if start < 0:
        return ""
    depth, position = 0, start + len(name) + 1
    for offset, character in enumerate(header[position:]):
        depth += {"{": 1, "}": -1}.get(character, 0)
        if depth == 0:
            return header[position + 1 : position + offset]
    return ""


def _index(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.replace(" ", "").split(",") if part)


def _parameter(number: int, index: tuple[int, ...]) -> int:
    return index[0] if index else number


class Executables:
    """The plans of the executables seen in this process, and which plan a run on JAX's fast path
    stands for: the aval and sharding objects of an executable's first output are its own, kept in
    JAX's fast-path cache entry and given to every output array it makes."""

    def __init__(self, clear_fast_path: Callable[[], None], sizer: Any = None) -> None:
        self._clear_fast_path = clear_fast_path
        self.sizer = sizer  # a GPU sizer: temps as that GPU's compile sizes them
        self._plans: dict[int, tuple[weakref.ref[Any], ExecutablePlan]] = {}  # id(ExecuteReplicated) -> plan
        self._named: dict[tuple[int, int], tuple[Any, Any, ExecutablePlan]] = {}  # (id(aval), id(sharding)) -> plan
        self._ambiguous: set[tuple[int, int]] = set()  # first outputs of executables that run differently
        # (id(aval), id(sharding), call site) of a one-array output -> (aval, sharding, plan, the
        # recorder's step for its runs, call site): what JAX's post-hook looks up on a run
        self.steps: dict[tuple[int, int, str], tuple[Any, Any, ExecutablePlan, int, str]] = {}
        # the same by (id(aval), call site) alone, the last seen of each (its sharding checked by identity)
        self.by_aval: dict[tuple[int, str], tuple[Any, Any, ExecutablePlan, int, str]] = {}
        self.on_forget: Callable[[], None] = lambda: None  # told whenever `by_aval` is emptied or a step remembered
        self.read = 0  # executables read so far: the next one's serial

    def plan(self, executable: Any) -> ExecutablePlan:
        """The plan of an ExecuteReplicated, read on first use."""
        known = self.known(executable)
        if known is not None:
            return known
        plan = plan_of(executable, self.sizer)
        plan.serial, self.read = self.read, self.read + 1
        key, plans = id(executable), self._plans

        def forget(_: object) -> None:
            plans.pop(key, None)

        plans[key] = (weakref.ref(executable, forget), plan)
        return plan

    def known(self, executable: Any) -> ExecutablePlan | None:
        entry = self._plans.get(id(executable))
        return entry[1] if entry is not None and entry[0]() is executable else None

    def remember(self, aval: Any, sharding: Any, plan: ExecutablePlan) -> bool:
        """Let a run whose first output has these aval and sharding objects stand for `plan`; False
        where an executable that runs differently has them too (neither is then named by them, and
        JAX's fast-path cache is cleared so that both return to the Python path, where they stay)."""
        key = (id(aval), id(sharding))
        if key in self._ambiguous:
            return False
        known = self._named.get(key)
        if known is None:
            self._named[key] = (aval, sharding, plan)  # held: the ids stay theirs
            return True
        if known[2] is plan or known[2].same_runs_as(plan):
            return True
        self._ambiguous.add(key)
        del self._named[key]
        self.forget_steps()  # no step stands for either any more: each run is named again
        self._clear_fast_path()
        return False

    def named_by(self, output: Any) -> ExecutablePlan | None:
        """The plan of the executable that made `output` on the fast path; None if none is known."""
        aval, sharding = output.aval, output.sharding
        known = self._named.get((id(aval), id(sharding)))
        if known is None or known[0] is not aval or known[1] is not sharding:
            return None
        return known[2]

    def forget_steps(self) -> None:
        """Every run named afresh on its next run (a plan that learned its runs read arguments, say)."""
        self.steps.clear()
        self.by_aval.clear()
        self.on_forget()

    def remember_step(
        self, aval: Any, sharding: Any, plan: ExecutablePlan, step: int, site: str = ""
    ) -> tuple[Any, Any, ExecutablePlan, int, str]:
        """Let the recorder's `step` stand for a run of `plan` called at `site` with one output of
        this aval and sharding (held: their ids stay theirs)."""
        if len(self.steps) >= STEP_CACHE_LIMIT:
            self.forget_steps()
        entry = self.steps[(id(aval), id(sharding), site)] = self.by_aval[(id(aval), site)] = (
            aval,
            sharding,
            plan,
            step,
            site,
        )
        self.on_forget()  # the post-hook's last run may have stood for another step of these objects
        return entry

    def step_of(
        self, aval: Any, sharding: Any, plan: ExecutablePlan, site: str = ""
    ) -> tuple[Any, Any, ExecutablePlan, int, str] | None:
        """The step remembered for `plan`'s runs at `site` with this output, now the one its aval
        stands for there; None if none."""
        known = self.steps.get((id(aval), id(sharding), site))
        if known is None or known[0] is not aval or known[1] is not sharding or known[2] is not plan:
            return None
        self.by_aval[(id(aval), site)] = known
        return known
