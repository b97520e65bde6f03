"""XLA's protocol buffers of a compiled program, read without the protobuf package: the HLO module
(`HloModuleProto`: instructions, their shapes, metadata and the schedule; its stack frames) and its
buffer assignment (`BufferAssignmentProto`: logical buffers, allocations, heap simulator traces).

jaxlib gives both as bytes (`HloModule.as_serialized_hlo_module_proto()`, and
`CompiledMemoryStats.serialized_buffer_assignment_proto` on the CPU), and XLA's dump writes them together
as an `HloProto` (`xla_dump_hlo_as_proto`). Only the fields named below are read, by their numbers in
xla/service/hlo.proto and xla/xla_data.proto; tests/capture/test_buffers.py holds this reading to the
generated classes of those files (TensorFlow's copy) on real programs. Bad bytes raise `ProtoError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["Allocation", "Instruction", "LogicalBuffer", "Program", "ProtoError", "read_hlo_proto", "read_program"]


class ProtoError(ValueError):
    """Bytes that are not the protocol buffer they were taken for."""


# -- the wire format ------------------------------------------------------------------------

Fields = dict[int, list[object]]


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise ProtoError("a protocol buffer ends inside a number")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
        if shift > 70:
            raise ProtoError("a protocol buffer number is longer than 10 bytes")


def fields(data: bytes) -> Fields:
    """Each field number's values in order: ints for varints and fixed widths, bytes for the rest."""
    found: Fields = {}
    position, end = 0, len(data)
    while position < end:
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        value: object
        if wire == 0:
            value, position = _varint(data, position)
        elif wire == 2:
            length, position = _varint(data, position)
            if position + length > end:
                raise ProtoError("a protocol buffer field runs past its end")
            value, position = data[position : position + length], position + length
        elif wire == 1:
            value, position = int.from_bytes(data[position : position + 8], "little"), position + 8
        elif wire == 5:
            value, position = int.from_bytes(data[position : position + 4], "little"), position + 4
        else:
            raise ProtoError(f"protocol buffer wire type {wire} is not one XLA writes")
        if number == 0 or position > end:
            raise ProtoError("not a protocol buffer")
        found.setdefault(number, []).append(value)
    return found


def _int(found: Fields, number: int, default: int = 0) -> int:
    values = found.get(number)
    if not values:
        return default
    value = values[-1]
    if not isinstance(value, int):
        raise ProtoError(f"field {number} should be a number")
    return value - (1 << 64) if value >= 1 << 63 else value


def _ints(found: Fields, number: int) -> list[int]:
    """A repeated integer field, packed or not."""
    result: list[int] = []
    for value in found.get(number, ()):
        if isinstance(value, int):
            result.append(value)
        else:
            assert isinstance(value, bytes)
            position = 0
            while position < len(value):
                item, position = _varint(value, position)
                result.append(item)
    return result


def _text(found: Fields, number: int) -> str:
    values = found.get(number)
    if not values:
        return ""
    value = values[-1]
    if not isinstance(value, bytes):
        raise ProtoError(f"field {number} should be text")
    return value.decode("utf-8", "replace")


def _messages(found: Fields, number: int) -> list[Fields]:
    return [fields(value) for value in found.get(number, ()) if isinstance(value, bytes)]


def _message(found: Fields, number: int) -> Fields:
    values = found.get(number)
    return fields(values[-1]) if values and isinstance(values[-1], bytes) else {}


# -- what is read ------------------------------------------------------------------------------

PRIMITIVE_TYPES = {
    1: ("pred", 1), 2: ("s8", 1), 3: ("s16", 2), 4: ("s32", 4), 5: ("s64", 8), 6: ("u8", 1), 7: ("u16", 2),
    8: ("u32", 4), 9: ("u64", 8), 10: ("f16", 2), 11: ("f32", 4), 12: ("f64", 8), 13: ("tuple", 0),
    14: ("opaque", 0), 15: ("c64", 8), 16: ("bf16", 2), 17: ("token", 0), 18: ("c128", 16),
    19: ("f8e5m2", 1), 20: ("f8e4m3fn", 1), 21: ("s4", 0), 22: ("u4", 0), 23: ("f8e4m3b11fnuz", 1),
    24: ("f8e5m2fnuz", 1), 25: ("f8e4m3fnuz", 1), 26: ("s2", 0), 27: ("u2", 0), 28: ("f8e4m3", 1),
    29: ("f8e3m4", 1), 30: ("s1", 0), 31: ("u1", 0), 32: ("f4e2m1fn", 0), 33: ("f8e8m0fnu", 1),
}  # fmt: skip
"""xla_data.proto's PrimitiveType: (the name XLA prints, bytes per element; 0 where not whole bytes)."""


@dataclass(frozen=True)
class Shape:
    element_type: int
    dimensions: tuple[int, ...]
    tuple_shapes: tuple[Shape, ...] = ()
    memory_space: int = 0

    def at(self, index: tuple[int, ...]) -> Shape | None:
        shape: Shape | None = self
        for part in index:
            shape = shape.tuple_shapes[part] if shape is not None and part < len(shape.tuple_shapes) else None
        return shape

    @property
    def text(self) -> str:
        name = PRIMITIVE_TYPES.get(self.element_type, (f"type{self.element_type}", 0))[0]
        return f"{name}[{','.join(str(d) for d in self.dimensions)}]"

    @property
    def logical_bytes(self) -> int | None:
        width = PRIMITIVE_TYPES.get(self.element_type, ("", 0))[1]
        if not width:
            return None
        return math.prod(self.dimensions) * width


def _shape(found: Fields) -> Shape:
    layout = _message(found, 5)
    return Shape(
        _int(found, 2),
        tuple(_ints(found, 3)),
        tuple(_shape(item) for item in _messages(found, 4)),
        _int(layout, 8),
    )


@dataclass(frozen=True)
class Instruction:
    id: int
    name: str
    opcode: str
    shape: Shape
    op_name: str  # metadata's op_name: `jit(step)/jit(sort)/sort`
    stack_frame_id: int
    source: str  # metadata's own file:line, where the compiler kept one and no stack frame
    operand_ids: tuple[int, ...]
    called: tuple[int, ...]  # computations it calls
    computation: int  # the computation it belongs to


@dataclass
class Program:
    """An HLO module's instructions, schedule and stack frames, and its buffer assignment."""

    name: str = ""
    instructions: dict[int, Instruction] = field(default_factory=dict)
    entry: int = 0  # the entry computation's id
    sequences: dict[int, list[int]] = field(default_factory=dict)  # computation -> instructions in order
    files: list[str] = field(default_factory=list)
    locations: list[tuple[int, int]] = field(default_factory=list)  # (file id, line), ids 1-based
    frames: list[tuple[int, int]] = field(default_factory=list)  # (location id, parent frame id), ids 1-based
    buffers: dict[int, LogicalBuffer] = field(default_factory=dict)
    aliases: dict[int, list[int]] = field(default_factory=dict)  # buffer -> instructions it also appears at
    allocations: list[Allocation] = field(default_factory=list)
    # heap simulations: (kind, buffer, shared with)
    traces: list[list[tuple[int, int, int]]] = field(default_factory=list)
    _by_computation: dict[int, list[Instruction]] = field(default_factory=dict, repr=False)

    def in_computation(self, computation: int) -> list[Instruction]:
        """The instructions of one computation, in the module's order."""
        if not self._by_computation:
            for instruction in self.instructions.values():
                self._by_computation.setdefault(instruction.computation, []).append(instruction)
        return self._by_computation.get(computation, [])

    def frame_chain(self, frame_id: int) -> list[tuple[str, int]]:
        """(file, line) from the innermost frame out."""
        chain, seen = [], set()
        while 0 < frame_id <= len(self.frames) and frame_id not in seen:
            seen.add(frame_id)
            location, parent = self.frames[frame_id - 1]
            if 0 < location <= len(self.locations):
                file_id, line = self.locations[location - 1]
                if 0 < file_id <= len(self.files):
                    chain.append((self.files[file_id - 1], line))
            frame_id = parent
        return chain


@dataclass(frozen=True)
class LogicalBuffer:
    id: int
    size: int
    instruction: int
    index: tuple[int, ...]
    color: int


@dataclass(frozen=True)
class Allocation:
    index: int
    size: int
    color: int
    temp: bool  # neither a parameter, an output, a constant, nor thread-local: the run's temp
    assigned: tuple[tuple[int, int, int], ...]  # (buffer, offset, size)


def read_program(module: bytes, assignment: bytes = b"") -> Program:
    """An `HloModuleProto` and a `BufferAssignmentProto`, as bytes."""
    program = Program()
    _read_module(fields(module), program)
    if assignment:
        _read_assignment(fields(assignment), program)
    return program


def read_hlo_proto(data: bytes) -> Program:
    """An `HloProto` (XLA's dump of a module with its buffer assignment)."""
    found = fields(data)
    program = Program()
    _read_module(_message(found, 1), program)
    _read_assignment(_message(found, 3), program)
    return program


def _read_module(found: Fields, program: Program) -> None:
    program.name = _text(found, 1)
    program.entry = _int(found, 6)
    for computation in _messages(found, 3):
        computation_id = _int(computation, 5)
        for item in _messages(computation, 2):
            metadata = _message(item, 7)
            file, line = _text(metadata, 3), _int(metadata, 4)
            instruction = Instruction(
                id=_int(item, 35),
                name=_text(item, 1),
                opcode=_text(item, 2),
                shape=_shape(_message(item, 3)),
                op_name=_text(metadata, 2),
                stack_frame_id=_int(metadata, 15),
                source=f"{file}:{line}" if file and line else "",
                operand_ids=tuple(_ints(item, 36)),
                called=tuple(_ints(item, 38)),
                computation=computation_id,
            )
            program.instructions[instruction.id] = instruction
    for entry in _messages(_message(found, 7), 1):  # map<int64, InstructionSequence>: key 1, value 2
        program.sequences[_int(entry, 1)] = _ints(_message(entry, 2), 1)
    _read_frames(found, program)


def read_stack_frames(module: bytes) -> Program:
    """An `HloModuleProto`'s stack-frame tables alone (files, locations, frames): its source lines,
    without reading its instructions."""
    program = Program()
    _read_frames(fields(module), program)
    return program


def _read_frames(found: Fields, program: Program) -> None:
    frames = _message(found, 17)
    program.files = [value.decode("utf-8", "replace") for value in frames.get(1, ()) if isinstance(value, bytes)]
    program.locations = [(_int(item, 1), _int(item, 3)) for item in _messages(frames, 3)]
    program.frames = [(_int(item, 1), _int(item, 2)) for item in _messages(frames, 4)]


def _read_assignment(found: Fields, program: Program) -> None:
    for item in _messages(found, 1):
        location = _message(item, 3)
        buffer = LogicalBuffer(
            _int(item, 1), _int(item, 2), _int(location, 4), tuple(_ints(location, 3)), _int(item, 4)
        )
        program.buffers[buffer.id] = buffer
    for item in _messages(found, 2):
        program.aliases.setdefault(_int(item, 1), []).append(_int(_message(item, 2), 4))
    for item in _messages(found, 3):
        flags = [_int(item, number) for number in (3, 5, 7, 12)]  # thread-local, parameter, live out, constant
        program.allocations.append(
            Allocation(
                index=_int(item, 1),
                size=_int(item, 2),
                color=_int(item, 8),
                temp=not any(flags),
                assigned=tuple((_int(a, 1), _int(a, 2), _int(a, 3)) for a in _messages(item, 9)),
            )
        )
    for trace in _messages(found, 4):
        program.traces.append([(_int(e, 1), _int(e, 2), _int(e, 5)) for e in _messages(trace, 1)])
