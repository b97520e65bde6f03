"""The buffers live at a compiled program's peak, read from XLA's own statement of the program.

XLA's buffer assignment places each value of the optimized module in an allocation; the values of the
run's temp allocation share its bytes over time, as XLA's heap simulator scheduled them. The moment the
temp is fullest is the program's peak, and the values live then are what a regression of its temp is
made of. This module reads that moment:

- from XLA's heap simulator traces (ALLOC, FREE, SHARE_WITH events, in the order the simulator placed
  them), where the buffer assignment carries them: XLA's dump of the module (`xla_dump_to` with
  `xla_dump_hlo_as_proto`, which writes an `HloProto` of the module and its buffer assignment after
  optimization), as the GPU and TPU sizers compile each program anyway (`dump_options`, `read_dump`);
- from the module's schedule where it does not: the CPU executable JAX already compiled states its
  buffer assignment without traces (`CompiledMemoryStats.serialized_buffer_assignment_proto`), and its
  module its schedule; a value is live from the instruction that defines it to the last instruction
  that uses it (or an alias of it), as XLA's HloLiveRange counts it (`from_executable`: no compile).

Bytes in use at a moment are the union of the live values' byte ranges in the allocation (a value that
shares another's buffer adds nothing). Each value is named by its shape and dtype, the op that defines
it and the user's `file:line` (the innermost frame of the instruction's stack that is not JAX's own,
from the module's stack-frame tables). A TPU's values carry their memory space (VMEM is space 1,
outside HBM) and their padded bytes beside the logical ones.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ...model.buffers import PeakBuffer, ProgramBuffers
from .hlo_proto import Instruction, Program, ProtoError, read_hlo_proto, read_program, read_stack_frames
from .sizes import ExecutableSizes

__all__ = ["buffers_at_peak", "dump_options", "from_executable", "in_jax", "program_buffers", "read_dump"]

ALLOC, FREE, SHARE_WITH = 0, 1, 2
"""HeapSimulatorTrace.Event.Kind (xla/service/hlo.proto)."""
DUMPED_MODULE = "after_optimizations.hlo.pb"
"""How the name of XLA's dump of the optimized module and its buffer assignment ends
(`cpu_after_optimizations.hlo.pb`, `after_optimizations.hlo.pb`...)."""
HEAP_TRACE, SCHEDULE = "XLA's heap simulation", "the module's schedule"


def dump_options(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Compiler options that make XLA write the optimized module and its buffer assignment, as one
    `HloProto` per module, to `directory` (and no text dumps)."""
    return {"xla_dump_to": str(directory), "xla_dump_hlo_as_proto": True, "xla_dump_hlo_as_text": False}


def read_dump(directory: str | os.PathLike[str]) -> ProgramBuffers:
    """The buffers at the peak of the program XLA dumped to `directory`; ProtoError where it holds none."""
    found = sorted(Path(directory).glob(f"*{DUMPED_MODULE}"))
    for path in found:
        program = read_hlo_proto(path.read_bytes())
        if program.allocations:
            return buffers_at_peak(program)
    raise ProtoError(f"XLA's dump in {directory} holds no buffer assignment ({len(found)} module file(s))")


def from_executable(xla_executable: Any) -> ProgramBuffers:
    """The buffers at the peak of a loaded executable (jaxlib's), from what it states of itself; ProtoError
    or whatever jaxlib raises where it cannot say."""
    assignment = xla_executable.get_compiled_memory_stats().serialized_buffer_assignment_proto
    modules = xla_executable.hlo_modules()
    if not assignment or not modules:
        raise ProtoError("the executable states no buffer assignment")
    return buffers_at_peak(read_program(modules[0].as_serialized_hlo_module_proto(), assignment))


def program_buffers(xla_executable: Any, sized: Any = None) -> tuple[ProgramBuffers | None, str]:
    """(the buffers at the executable's peak, or None; why not): those of the compile that sized it
    (`sized`, a GPU or TPU sizer's result, which read them from its compile; a refusal states none),
    else the executable's own."""
    if isinstance(sized, ExecutableSizes) and sized.buffers is not None:
        if sized.source != "compiled" and not _lines_are_its_own(sized.buffers, xla_executable):
            # a cache's entry is shared by programs that differ only in their source lines (the same
            # function in two files, a file whose lines moved since): its lines are another's
            return sized.buffers.without_lines(), ""
        return sized.buffers, ""
    if sized is not None:
        note = sized.buffers_note if isinstance(sized, ExecutableSizes) else ""
        return None, note or "the target's compile stated no buffers"
    try:
        return from_executable(xla_executable), ""
    except Exception as exc:  # noqa: BLE001 - a backend or jaxlib that states no buffer assignment
        return None, f"XLA stated no buffer assignment ({type(exc).__name__}: {str(exc)[:200]})"


def _lines_are_its_own(buffers: ProgramBuffers, xla_executable: Any) -> bool:
    """Whether every line `buffers` name is a source line of the executable's own module (a location
    of its stack-frame tables); a line stored below the project's root matches the same line of that
    file by its ending."""
    named = {frame for buffer in buffers.buffers if buffer.at for frame in buffer.at.split(", ")}
    if not named:
        return True
    try:
        program = read_stack_frames(xla_executable.hlo_modules()[0].as_serialized_hlo_module_proto())
    except Exception:  # noqa: BLE001 - a backend that states no module: no line can be checked
        return False
    own: dict[str, set[str]] = {}
    for file_id, line in program.locations:
        if 0 < file_id <= len(program.files):
            own.setdefault(str(line), set()).add(program.files[file_id - 1])
    return all(
        any(path == file or path.endswith("/" + file) for path in own.get(line, ()))
        for file, _, line in (frame.rpartition(":") for frame in named)
    )


def buffers_at_peak(program: Program) -> ProgramBuffers:
    """The values live at the moment each temp allocation is fullest, largest first."""
    live: list[tuple[int, int, int]] = []  # (buffer, bytes, memory space)
    peak = 0
    sources = set()
    traced = {buffer for trace in program.traces for _, buffer, _ in trace}
    for allocation in program.allocations:
        if not allocation.temp or not allocation.assigned:
            continue
        placed = {buffer: (offset, size) for buffer, offset, size in allocation.assigned}
        if placed.keys() & traced:
            events = [(kind, buffer) for trace in program.traces for kind, buffer, _ in trace if buffer in placed]
            sources.add(HEAP_TRACE)
        else:
            events = list(_scheduled_events(program, placed))
            sources.add(SCHEDULE)
        at_peak, in_use = _peak(events, placed)
        peak += in_use if allocation.color == 0 else 0
        live += [(buffer, placed[buffer][1], allocation.color) for buffer in at_peak]
    buffers = [_named(program, buffer, size, space) for buffer, size, space in live]
    buffers.sort(key=lambda item: (-item.bytes, item.key))
    return ProgramBuffers(
        tuple(buffers),
        peak_bytes=peak,
        padding_bytes=sum(buffer.padding for buffer in buffers if buffer.memory_space == 0),
        source=" and ".join(sorted(sources)),
    )


def _peak(events: Iterable[tuple[int, int]], placed: dict[int, tuple[int, int]]) -> tuple[list[int], int]:
    """The buffers live when the union of their byte ranges is largest (the first such moment), and those bytes."""
    holders: dict[tuple[int, int], list[int]] = {}  # byte range -> live buffers in it
    live_bytes = best = 0
    best_live: list[int] = []
    for kind, buffer in events:
        extent = placed[buffer]
        sharing = holders.setdefault(extent, [])
        if kind in (ALLOC, SHARE_WITH):
            if buffer in sharing:
                continue
            if not sharing:
                live_bytes += extent[1]
            sharing.append(buffer)
            if live_bytes > best:
                best = live_bytes
                best_live = [held[0] for held in holders.values() if held]  # a shared range named once
        elif kind == FREE and buffer in sharing:
            sharing.remove(buffer)
            if not sharing:
                live_bytes -= extent[1]
    return best_live, best


def _scheduled_events(program: Program, placed: dict[int, tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """ALLOC and FREE events of the allocation's values in the entry computation's schedule: each value
    from its defining instruction to the last instruction that uses it or an alias of it; a value of a
    computation the entry calls (a loop's body) lives across that call."""
    sequence = program.sequences.get(program.entry) or []
    position = {instruction: index for index, instruction in enumerate(sequence)}
    callers = _entry_callers(program, position)
    users: dict[int, int] = {}  # instruction -> the last position that uses it
    for index, instruction_id in enumerate(sequence):
        instruction = program.instructions.get(instruction_id)
        for operand in instruction.operand_ids if instruction is not None else ():
            users[operand] = index
    ranges: dict[int, list[int]] = {}  # position -> buffers allocated there
    ends: dict[int, list[int]] = {}
    for buffer_id in placed:
        buffer = program.buffers.get(buffer_id)
        if buffer is None:
            continue
        at = _entry_position(program, buffer.instruction, position, callers)
        if at is None:
            continue
        end = at
        for instruction in (buffer.instruction, *program.aliases.get(buffer_id, ())):
            end = max(end, users.get(instruction, at), position.get(instruction, at))
        ranges.setdefault(at, []).append(buffer_id)
        ends.setdefault(end, []).append(buffer_id)
    for index in range(len(sequence)):
        for buffer_id in ranges.get(index, ()):
            yield ALLOC, buffer_id
        for buffer_id in ends.get(index, ()):
            yield FREE, buffer_id


def _entry_callers(program: Program, position: dict[int, int]) -> dict[int, int]:
    """Computation -> the entry instruction that calls it (directly or through computations it calls)."""
    callers: dict[int, int] = {}
    calls: dict[int, list[int]] = {}
    for instruction in program.instructions.values():
        for called in instruction.called:
            calls.setdefault(instruction.computation, []).append(called)
            if instruction.id in position:
                callers.setdefault(called, instruction.id)
    pending = list(callers)
    while pending:
        computation = pending.pop()
        for called in calls.get(computation, ()):
            if called not in callers:
                callers[called] = callers[computation]
                pending.append(called)
    return callers


def _entry_position(
    program: Program, instruction_id: int, position: dict[int, int], callers: dict[int, int]
) -> int | None:
    if instruction_id in position:
        return position[instruction_id]
    instruction = program.instructions.get(instruction_id)
    caller = callers.get(instruction.computation) if instruction is not None else None
    return position.get(caller) if caller is not None else None


def _named(program: Program, buffer_id: int, size: int, space: int) -> PeakBuffer:
    buffer = program.buffers.get(buffer_id)
    instruction = program.instructions.get(buffer.instruction) if buffer is not None else None
    if buffer is None or instruction is None:
        return PeakBuffer(size, "?", "?", "", None, space)
    shape = instruction.shape.at(buffer.index)
    op = instruction.op_name.rsplit("/", 1)[-1] if instruction.op_name else instruction.opcode
    logical = shape.logical_bytes if shape is not None else None
    return PeakBuffer(
        size,
        shape.text if shape is not None else "?",
        op or instruction.opcode,
        ", ".join(_lines_of(program, instruction)),
        logical if logical != size else None,
        space,
    )


LINES_SHOWN = 3
"""The user's lines named for one buffer at most: a fusion's own, then those of the ops fused into it."""


def _lines_of(program: Program, instruction: Instruction) -> list[str]:
    """The user's `file:line`s of an instruction: its own, then (a fusion: XLA keeps one op's metadata
    for the whole fusion, a matmul fused with the concatenation feeding it, say) those of the ops fused
    into it, in order, each once."""
    lines = [user_line(program, instruction.stack_frame_id) or _users_source(instruction)]
    if instruction.opcode == "fusion":
        for fused in _fused(program, instruction):
            lines.append(user_line(program, fused.stack_frame_id) or _users_source(fused))
    return list(dict.fromkeys(line for line in lines if line))[:LINES_SHOWN]


def _fused(program: Program, fusion: Instruction) -> Iterator[Instruction]:
    """The instructions of the computations a fusion calls (and those they call), in the module's order."""
    pending, seen = list(fusion.called), set()
    while pending:
        computation = pending.pop(0)
        if computation in seen:
            continue
        seen.add(computation)
        for instruction in program.in_computation(computation):
            yield instruction
            pending.extend(instruction.called)


def user_line(program: Program, frame_id: int) -> str:
    """`file:line` of the innermost frame in the user's code (`users_file`); "" where none is known."""
    for file, line in program.frame_chain(frame_id):
        if users_file(file):
            return f"{file}:{line}"
    return ""


def _users_source(instruction: Instruction) -> str:
    """The `file:line` XLA kept in an instruction's metadata, where it is the user's."""
    return instruction.source if users_file(instruction.source.rpartition(":")[0]) else ""


_JAX_FOLDERS: tuple[str, ...] = ()
_NOT_USERS: tuple[str, ...] = ()
_resolved = functools.lru_cache(maxsize=4096)(os.path.realpath)


def users_file(file: str) -> bool:
    """Whether a frame's file can be the user's line: none of JAX's (`in_jax`), of pytest-devmem's own
    (lowering a program again for a GPU or TPU runs JAX's lowering rules, and the ops they make take
    the frames of that call, in the plugin's worker) or of Python's standard library (that worker's
    thread)."""
    global _NOT_USERS
    if not file or in_jax(file):
        return False
    if not _NOT_USERS:
        paths = sysconfig.get_paths()
        places = (os.path.dirname(os.path.dirname(os.path.dirname(__file__))), paths["stdlib"], paths["platstdlib"])
        _NOT_USERS = tuple(os.path.realpath(place) + os.sep for place in places)
    return not _resolved(file).startswith(_NOT_USERS)


def in_jax(file: str) -> bool:
    """Whether `file` belongs to JAX's own packages (jax, jaxlib), as imported here: never the user's
    line. Both sides are compared resolved, so a symlinked environment names the same files."""
    global _JAX_FOLDERS
    if not _JAX_FOLDERS:  # read once JAX is imported
        locations = (getattr(sys.modules.get(name), "__file__", None) for name in ("jax", "jaxlib"))
        _JAX_FOLDERS = tuple(os.path.dirname(os.path.realpath(path)) + os.sep for path in locations if path)
    return bool(file) and _resolved(file).startswith(_JAX_FOLDERS)
