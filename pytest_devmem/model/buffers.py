"""The buffers live at a compiled program's peak, as plain data: what the record and the baseline keep of
each executable, and the comparison of two such lists. No framework, no pytest.

A buffer is one value of XLA's buffer assignment that lives in the program's temp allocation at the
moment that allocation is fullest: its bytes as allocated (on a TPU, in its tiled layout), its logical
bytes (shape times the dtype's size, where known), its shape and dtype (`f32[4096,512]`), the HLO op that
defines it, the memory space it lives in (0: the device's main memory; on a TPU, 1 is the core's VMEM,
which no HBM figure counts) and the user's `file:line` that op came from (or "" where the compiler kept
none). A program's list is kept short (`TOP_BUFFERS`, largest first) with the count of the rest, so
that a baseline stays small and a buffer absent from it reads "not among the baseline's largest", never
"did not exist".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..units import format_size

TOP_BUFFERS = 5
"""Buffers kept per program in a record and its baseline, largest first."""


def _one_line(text: str) -> str:
    """Stored text kept on its line: a line break read back would start a line of a message."""
    return text.replace("\n", "\\n")


@dataclass(frozen=True)
class PeakBuffer:
    """One value live at its program's peak."""

    bytes: int  # as allocated
    shape: str  # `f32[4096,512]`
    op: str  # the HLO op (or the JAX primitive its op_name ends with)
    at: str = ""  # the user's `file:line`; "" where not known
    logical_bytes: int | None = None  # shape x dtype size, where it differs from `bytes`; None: no padding known
    memory_space: int = 0  # XLA's memory space: 0 the device's main memory (HBM)

    @property
    def padding(self) -> int:
        """Bytes lost to the layout (a TPU's tiles): allocated less logical, 0 where not known."""
        return max(0, self.bytes - self.logical_bytes) if self.logical_bytes is not None else 0

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What names the same buffer in two runs of a program: its shape, op, line and memory space."""
        return (self.shape, self.op, self.at, self.memory_space)

    def text(self) -> str:
        """`f32[4096,512] sort at model.py:6`."""
        where = f" at {self.at}" if self.at else ""
        space = f" in memory space {self.memory_space}" if self.memory_space else ""
        return _one_line(f"{self.shape} {self.op}{where}{space}")

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"bytes": self.bytes, "shape": self.shape, "op": self.op, "at": self.at}
        if self.logical_bytes is not None and self.logical_bytes != self.bytes:
            data["logical_bytes"] = self.logical_bytes
        if self.memory_space:
            data["memory_space"] = self.memory_space
        return data

    @classmethod
    def from_json(cls, data: object) -> PeakBuffer:
        """A stored buffer, checked: ValueError naming the bad field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a buffer must be an object, not {type(data).__name__}")
        size, logical, space = data.get("bytes"), data.get("logical_bytes"), data.get("memory_space", 0)
        for name, value in (("bytes", size), ("logical_bytes", logical), ("memory_space", space)):
            if name == "logical_bytes" and value is None:
                continue  # not stored: no padding known (the same bytes, or a dtype of no whole-byte size)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f'a buffer\'s "{name}" must be a whole number of bytes >= 0, not {value!r}')
        texts = {name: data.get(name, "") for name in ("shape", "op", "at")}
        for name, value in texts.items():
            if not isinstance(value, str):
                raise ValueError(f'a buffer\'s "{name}" must be a string, not {value!r}')
        if not texts["shape"] or not texts["op"]:
            raise ValueError('a buffer needs its "shape" and "op"')
        assert isinstance(size, int) and isinstance(space, int) and (logical is None or isinstance(logical, int))
        return cls(size, str(texts["shape"]), str(texts["op"]), str(texts["at"]), logical, space)


@dataclass(frozen=True)
class ProgramBuffers:
    """A program's buffers at its peak: the largest, and how many more there were."""

    buffers: tuple[PeakBuffer, ...]
    more: int = 0  # buffers live at the peak beyond those kept
    peak_bytes: int = 0  # the temp allocations' bytes in use at that moment, all buffers counted
    padding_bytes: int = 0  # of those, bytes lost to layout padding (all buffers counted)
    source: str = ""  # where the figures come from: XLA's heap simulation, or the module's schedule
    notes: tuple[str, ...] = field(default_factory=tuple)

    def top(self, count: int = TOP_BUFFERS) -> ProgramBuffers:
        kept = self.buffers[:count]
        return ProgramBuffers(
            kept,
            self.more + len(self.buffers) - len(kept),
            self.peak_bytes,
            self.padding_bytes,
            self.source,
            self.notes,
        )

    def keyed(self) -> dict[tuple[tuple[str, str, str, int], int], PeakBuffer]:
        """Its buffers by their key and which of that key they are: two alike (two `u32[512,64] add`
        of one line) are two, the first matched with another run's first."""
        seen: dict[tuple[str, str, str, int], int] = {}
        keyed = {}
        for buffer in self.buffers:
            seen[buffer.key] = seen.get(buffer.key, -1) + 1
            keyed[(buffer.key, seen[buffer.key])] = buffer
        return keyed

    def without_lines(self) -> ProgramBuffers:
        """The same buffers with no user's line named (where the program's lines are not its own)."""
        return dataclasses.replace(self, buffers=tuple(dataclasses.replace(b, at="") for b in self.buffers))

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "buffers": [buffer.to_json() for buffer in self.buffers],
            "more": self.more,
            "peak_bytes": self.peak_bytes,
        }
        if self.padding_bytes:
            data["padding_bytes"] = self.padding_bytes
        if self.source:
            data["source"] = self.source
        if self.notes:
            data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_json(cls, data: object) -> ProgramBuffers:
        """A stored list, checked: ValueError naming what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a program's buffers must be an object, not {type(data).__name__}")
        listed = data.get("buffers")
        if not isinstance(listed, list):
            raise ValueError('a program\'s "buffers" must be a list')
        numbers = {name: data.get(name, 0) for name in ("more", "peak_bytes", "padding_bytes")}
        for name, value in numbers.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f'a program\'s "{name}" must be a whole number >= 0, not {value!r}')
        notes = data.get("notes", [])
        source = data.get("source", "")
        if (
            not isinstance(notes, list)
            or not all(isinstance(note, str) for note in notes)
            or not isinstance(source, str)
        ):
            raise ValueError('a program\'s "notes" must be a list of strings and its "source" a string')
        return cls(
            tuple(PeakBuffer.from_json(item) for item in listed),
            int(numbers["more"]),
            int(numbers["peak_bytes"]),
            int(numbers["padding_bytes"]),
            source,
            tuple(notes),
        )


def programs_from_json(data: object) -> dict[str, ProgramBuffers]:
    """Stored programs' buffers by executable; ValueError naming the program whose entry is bad."""
    if not isinstance(data, Mapping):
        raise ValueError(f"buffers must map executables to their buffers, not {type(data).__name__}")
    found = {}
    for name, entry in data.items():
        try:
            found[str(name)] = ProgramBuffers.from_json(entry)
        except ValueError as exc:
            raise ValueError(f"buffers of {name!r}: {exc}") from None
    return found


@dataclass(frozen=True)
class BufferChange:
    """One buffer at a program's peak now, set against the baseline's list of that program."""

    buffer: PeakBuffer
    before: int | None  # its bytes at the baseline's peak; None where the baseline does not list it
    baseline_complete: bool  # the baseline listed every buffer at its peak (so absent means new)

    def text(self) -> str:
        """`f32[4096,512] sort at model.py:6 (new, 8.00 MiB)`."""
        if self.before is not None:
            change = f"{format_size(self.before)} → {format_size(self.buffer.bytes)}"
        elif self.baseline_complete:
            change = f"new, {format_size(self.buffer.bytes)}"
        else:
            change = f"not among the baseline's largest, {format_size(self.buffer.bytes)}"
        padding = f", {format_size(self.buffer.padding)} of it padding" if self.buffer.padding else ""
        return f"{self.buffer.text()} ({change}{padding})"


def buffer_changes(before: ProgramBuffers | None, now: ProgramBuffers, top: int = 2) -> list[BufferChange]:
    """The buffers at the peak now that are new or larger than at the baseline's peak, most growth
    first; with no baseline list, the largest now (each "not among the baseline's largest"). Only
    those in the device's main memory (memory space 0), which the program's temp figure counts."""
    known = {key: buffer.bytes for key, buffer in before.keyed().items()} if before is not None else {}
    complete = before is not None and before.more == 0
    changes = []
    for key, buffer in now.keyed().items():
        if buffer.memory_space:
            continue
        was = known.get(key)
        if was is None or buffer.bytes > was:
            changes.append(BufferChange(buffer, was, complete))
    changes.sort(key=lambda change: (-(change.buffer.bytes - (change.before or 0)), change.buffer.key))
    return changes[:top]


def describe_growth(label: str, before: ProgramBuffers | None, now: ProgramBuffers | None, top: int = 2) -> str:
    """`f32[4096,512] sort at model.py:6 (new, 8.00 MiB)`: what grew in program `label`'s temp, or ""."""
    if now is None:
        return ""
    return "; ".join(change.text() for change in buffer_changes(before, now, top))


# -- the arrays held at the peak, by the user's line that made them ------------------------------

TOP_LINES = 3
"""Lines kept per holder at the peak (model/machine/maps.py): a baseline that lists fewer listed them all."""
SMALL_SHARE = 0.01
"""Holders and lines under this share of a test's peak are left out of what a person reads first."""
LINE_UNKNOWN = "line unknown"
"""How a holder's bytes whose line the capture could not name read (never a guessed line)."""


def line_text(site: str) -> str:
    """`model.py:12`, or LINE_UNKNOWN for a buffer made where no line is known ("")."""
    return site or LINE_UNKNOWN


def lines_from_json(data: object) -> dict[str, dict[str, int]]:
    """Stored lines at the peak (`{holder: {"file:line": bytes}}`, "" where the line is not known),
    checked: ValueError naming what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError(f"lines at the peak must map holders to their lines, not {type(data).__name__}")
    found: dict[str, dict[str, int]] = {}
    for name, lines in data.items():
        if not isinstance(name, str) or not isinstance(lines, Mapping):
            raise ValueError(f"the lines of {name!r} must map each `file:line` to bytes")
        for site, size in lines.items():
            if not isinstance(site, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise ValueError(
                    f"the lines of {name!r}: {site!r} must name a whole number of bytes >= 0, not {size!r}"
                )
        found[name] = dict(lines)
    return found


def describe_lines(before: Mapping[str, int] | None, now: Mapping[str, int] | None, top: int = 2) -> str:
    """`made at model.py:12 (new, 8.00 MiB), line unknown (1.00 MiB)`: the lines whose buffers held more
    of a holder at the peak than at the baseline's, most growth first (with no baseline lines, the
    largest now); "" where none is known."""
    if not now:
        return ""
    grown = [
        (site, (before or {}).get(site), size)
        for site, size in now.items()
        if before is None or size > before.get(site, 0)
    ]
    grown.sort(key=lambda item: (-(item[2] - (item[1] or 0)), item[0]))
    parts = []
    for site, was, size in grown[:top]:
        if before is None:
            change = format_size(size)
        elif was is not None:
            change = f"{format_size(was)} → {format_size(size)}"
        elif len(before) < TOP_LINES:
            change = f"new, {format_size(size)}"
        else:
            change = f"not among the baseline's largest, {format_size(size)}"
        parts.append(f"{'made at ' + _one_line(site) if site else LINE_UNKNOWN} ({change})")
    return ", ".join(parts)
