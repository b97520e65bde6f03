"""A trace's events, stored by column: what the captures build and the model of the machine replays.

An event is one allocator call: which buffer, how many bytes, when, made by which allocator
(`source`: `jax`, `tensorflow`, `pool`) on which device (`cpu:0`, `gpu:1`; empty for the session's
first device) in which process. A trace keeps its events in columns of machine integers rather than
as objects (about 60 bytes an event), so a test of a million events stays small in memory, and the
model of the machine replays the columns without building an object per event. Its files are
`Trace`'s (the package's `__init__`); nothing here reads or writes one.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar, overload

from .format import ACTIONS, ALLOCATE_CODE, BY_COLUMN_FROM, FREE_CODE, TraceFormatError

_T = TypeVar("_T", bound="TraceColumns")

NUMBER_COLUMNS = (
    "pointers",
    "sizes",
    "times",
    "threads",
    "streams",
    "sources",
    "labels",
    "devices",
    "processes",
    "sites",
)
"""Every column beside `actions` (a bytearray of ACTIONS' codes), each an `array` of one typecode, in order."""
NAME_COLUMNS = ("sources", "labels", "devices", "sites")
"""The columns that hold indexes into `names`."""


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One allocator call. `pointer` is the address the recording pool returned (0 for a failure),
    or any id that is unique among the buffers live at once. `source` says whose allocator made
    the call and `label` what for (free text, for people and reports); `device` where (`cpu:0`,
    `gpu:1`; empty: the first device), `process` in which process (several simulated together);
    `site` the user's line that made the buffer (`file:line`; empty where not known)."""

    action: str
    pointer: int
    size: int
    time: float = 0.0
    thread: int = 0
    stream: int = 0
    source: str = ""
    label: str = ""
    device: str = ""
    process: int = 0
    site: str = ""


class TraceColumns:
    """An ordered list of allocator events, stored by column.

    Build one from TraceEvents (`Trace([...])`, `append`) or column values (`add`); read it back as
    TraceEvents (iteration, indexing, `events`) or, where speed matters, through the columns:
    `actions` (codes into ACTIONS), `pointers`, `sizes`, `times`, `threads`, `streams`, and
    `sources`, `labels`, `devices`, `sites` (indexes into `names`), `processes`. `Trace` is this with its
    files (CSV and Arrow IPC).
    """

    __slots__ = ("actions", *NUMBER_COLUMNS, "names", "_name_index")

    def __init__(self, events: Iterable[TraceEvent] = ()) -> None:
        self.actions = bytearray()
        self.pointers = array("Q")
        self.sizes = array("q")
        self.times = array("d")
        self.threads = array("Q")
        self.streams = array("Q")
        self.sources = array("I")
        self.labels = array("I")
        self.devices = array("I")
        self.processes = array("I")
        self.sites = array("I")
        self.names: list[str] = [""]
        self._name_index: dict[str, int] = {"": 0}
        for event in events:
            self.append(event)

    # -- building ---------------------------------------------------------------------------

    def name_code(self, text: str) -> int:
        """The index of `text` in `names`, added if new (sources, labels, devices and sites share it)."""
        code = self._name_index.get(text)
        if code is None:
            code = self._name_index[text] = len(self.names)
            self.names.append(text)
        return code

    def add(
        self,
        action: int,
        pointer: int,
        size: int,
        time: float = 0.0,
        thread: int = 0,
        stream: int = 0,
        source: str = "",
        label: str = "",
        device: str = "",
        process: int = 0,
        site: str = "",
    ) -> None:
        """Append one event given by its column values (`action` a code: ALLOCATE_CODE, ...)."""
        self.actions.append(action)
        self.pointers.append(pointer)
        self.sizes.append(size)
        self.times.append(time)
        self.threads.append(thread)
        self.streams.append(stream)
        code = self.name_code
        self.sources.append(code(source))
        self.labels.append(code(label))
        self.devices.append(code(device))
        self.processes.append(process)
        self.sites.append(code(site))

    def append(self, event: TraceEvent) -> None:
        self.add(
            ACTIONS.index(event.action),
            event.pointer,
            event.size,
            event.time,
            event.thread,
            event.stream,
            event.source,
            event.label,
            event.device,
            event.process,
            event.site,
        )

    # -- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.actions)

    def event(self, index: int) -> TraceEvent:
        names = self.names
        return TraceEvent(
            ACTIONS[self.actions[index]],
            self.pointers[index],
            self.sizes[index],
            self.times[index],
            self.threads[index],
            self.streams[index],
            names[self.sources[index]],
            names[self.labels[index]],
            names[self.devices[index]],
            self.processes[index],
            names[self.sites[index]],
        )

    def __iter__(self) -> Iterator[TraceEvent]:
        return (self.event(index) for index in range(len(self.actions)))

    @overload
    def __getitem__(self, index: int) -> TraceEvent: ...

    @overload
    def __getitem__(self: _T, index: slice) -> _T: ...

    def __getitem__(self: _T, index: int | slice) -> TraceEvent | _T:
        if isinstance(index, slice):
            return type(self)(self.event(i) for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("trace event index out of range")
        return self.event(index)

    @property
    def events(self) -> list[TraceEvent]:
        """Every event as a TraceEvent (built on each call: iterate or use the columns on large traces)."""
        return list(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TraceColumns) and self.events == other.events

    def __repr__(self) -> str:
        return f"Trace({len(self)} events)"

    def device_names(self) -> list[str]:
        """The devices the events name, in the order they first appear."""
        if len(self.devices) >= BY_COLUMN_FROM:
            from .by_column import first_appearances  # numpy: kept out of the start-up of `devmem`

            found = first_appearances(self.devices)
            if found is not None:
                return [self.names[code] for code in found]
        seen = dict.fromkeys(self.devices)
        return [self.names[code] for code in seen]

    def peak_live_bytes(self) -> int:
        """Highest sum of requested bytes live at once: what any allocator must hold at least.
        By column with numpy for long traces (a million events in some 0.03 s rather than 0.1 s)."""
        if len(self.actions) < BY_COLUMN_FROM:
            return self._peak_live_bytes_by_event()
        from .by_column import peak_live_bytes  # numpy: kept out of the start-up of `devmem`

        peak = peak_live_bytes(self.actions, self.pointers, self.sizes)
        return self._peak_live_bytes_by_event() if peak is None else peak

    def _peak_live_bytes_by_event(self) -> int:
        live: dict[int, int] = {}
        current = peak = 0
        for action, pointer, size in zip(self.actions, self.pointers, self.sizes):
            if action == ALLOCATE_CODE:
                live[pointer] = size
                current += size
                if current > peak:
                    peak = current
            elif action == FREE_CODE:
                current -= live.pop(pointer, 0)
        return peak

    def has_sites(self) -> bool:
        """Whether any event names the line that made its buffer (its files then carry the Site column)."""
        return self.sites.count(0) != len(self.sites)  # counted in C: a million events in about a millisecond

    # -- plain data (between processes) -----------------------------------------------------

    def after(self: _T, head: Iterable[TraceEvent]) -> _T:
        """`head`'s events, then this trace's (its columns copied as they are)."""
        trace = type(self)()
        trace.names, trace._name_index = list(self.names), dict(self._name_index)
        for event in head:
            trace.append(event)
        trace.actions += self.actions
        for name in NUMBER_COLUMNS:
            getattr(trace, name).extend(getattr(self, name))
        return trace

    def to_columns(self) -> dict[str, list[object]]:
        """The columns as plain lists (JSON, or what pytest-xdist sends from a worker)."""
        return {
            "actions": list(self.actions),
            **{name: list(getattr(self, name)) for name in NUMBER_COLUMNS},
            "names": list(self.names),
        }

    @classmethod
    def from_columns(cls: type[_T], data: object) -> _T:
        """The trace `to_columns` gave; TraceFormatError for anything else (columns of unequal
        length, a name index out of range, an action that is none of ACTIONS)."""
        if not isinstance(data, dict):
            raise TraceFormatError(f"trace columns must be an object, not {type(data).__name__}")
        names = data.get("names")
        if (
            not isinstance(names, list)
            or not names
            or names[0] != ""
            or not all(isinstance(name, str) for name in names)
        ):
            raise TraceFormatError('trace columns need "names": a list of text starting with ""')
        trace = cls()
        try:
            trace.actions = bytearray(data["actions"])
            for name in NUMBER_COLUMNS:
                typecode = getattr(trace, name).typecode
                values = (  # a trace before sites has none: each event's site is ""
                    data.get(name) or bytes(array(typecode).itemsize * len(trace.actions))
                    if name == "sites"
                    else data[name]
                )
                setattr(trace, name, array(typecode, values))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise TraceFormatError(f"trace columns: {exc}") from None
        if any(len(getattr(trace, name)) != len(trace.actions) for name in NUMBER_COLUMNS):
            raise TraceFormatError("trace columns of unequal length")
        if any(action >= len(ACTIONS) for action in trace.actions) or any(
            code >= len(names) for name in NAME_COLUMNS for code in getattr(trace, name)
        ):
            raise TraceFormatError("trace columns: an action or name index out of range")
        if any(size < 0 for size in trace.sizes):
            raise TraceFormatError("trace columns: a negative size")
        trace.names = list(names)
        trace._name_index = {name: index for index, name in enumerate(names)}
        return trace

    def pairing_problem(self) -> tuple[int, int | None, str] | None:
        """The first event whose allocation or free does not pair, as each allocator (device,
        process, source) sees its pointers: (its index, the index of the allocation it meets or
        None, what is wrong, with `{other}` where that allocation's place goes). A pointer allocated
        while its allocator holds it live would be two buffers at one address; a free of a pointer not
        live frees nothing; a free gives back the size its allocation took (RMM's log and the
        captures write it so). None where every event pairs. By column with numpy on long traces."""
        indices: range | list[int] = range(len(self.actions))
        if len(self.actions) >= BY_COLUMN_FROM:
            try:
                from .by_column import first_unpaired  # numpy: kept out of the start-up of `devmem`; the tests hide it
            except ImportError:
                first_unpaired = None  # type: ignore[assignment]
            if first_unpaired is not None:
                first = first_unpaired(
                    self.actions, self.pointers, self.sizes, self.devices, self.processes, self.sources
                )
                if first is None:
                    return None
                lane = (self.devices[first], self.processes[first], self.sources[first], self.pointers[first])
                indices = [
                    i
                    for i in range(first + 1)
                    if (self.devices[i], self.processes[i], self.sources[i], self.pointers[i]) == lane
                ]
        live: dict[tuple[int, int, int, int], int] = {}
        for index in indices:
            action = self.actions[index]
            if action > FREE_CODE:
                continue
            pointer = self.pointers[index]
            key = (self.devices[index], self.processes[index], self.sources[index], pointer)
            device = self.names[self.devices[index]] or "the first device"
            held = live.pop(key, None)
            if action == ALLOCATE_CODE:
                if held is not None:
                    return (
                        index,
                        held,
                        f"Pointer {pointer:#x} allocated again on {device} while its allocation at {{other}} is live: "
                        "two buffers at one address (a free missing between them?)",
                    )
                live[key] = index
            elif held is None:
                return (
                    index,
                    None,
                    f"free of {pointer:#x}, which the trace never allocated on {device} (or freed already)",
                )
            elif self.sizes[held] != self.sizes[index]:
                return (
                    index,
                    held,
                    f"free of {pointer:#x} with Size {self.sizes[index]}, where its allocation at {{other}} has Size "
                    f"{self.sizes[held]}: a free gives back what its allocation took",
                )
        return None
