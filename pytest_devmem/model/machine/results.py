"""What the model of the machine makes of a trace, as plain data: the machine it ran on, each device's
and allocator's figures, the pools' maps, the out-of-memory result, the timeline. `replay.py` makes
them; the plugin, the gate and the pictures read them. No pytest, no frameworks here."""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...json_fields import attributes
from ..device import DEFAULT_COMPUTE_CAPABILITY
from ..frameworks import context_bytes_for

KIND_TEXT = {
    "capacity": "capacity: the live data does not fit the device",
    "fragmentation": "fragmentation: enough bytes free in its pool, but no block that large",
    "limit": "its regime's limit is too low",
    "tenant": "another tenant: another framework or process, or the CUDA context, holds the rest of the device",
}
"""What each kind of out-of-memory means, in a few words."""
FRAGMENTATION_STEP = 0.01
"""A device's map at its most fragmented is taken again only when its fragmentation rose by this much
since the last one: the map is then within 0.01 of the worst moment, and a trace costs at most 100."""
DEFAULT_SOURCE = "pool"
"""The allocator of events that name none (an RMM log, say): the regime's own pool."""


def allocator_name(source: str, process: int) -> str:
    """An allocator as every figure, map and picture names it: its source, with its process where
    that is not the test's own (0)."""
    return source if not process else f"{source} (process {process})"


@dataclass(frozen=True)
class MachineSpec:
    """The machine a trace is replayed on: every device has `capacity` bytes."""

    capacity: int
    name: str = ""
    compute_capability: int = DEFAULT_COMPUTE_CAPABILITY[0]
    context_bytes: int | None = None  # per process and device; None: the default for the capacity
    default_device: str = "cpu:0"  # the device of events that name none
    environ: Mapping[str, str] = field(default_factory=dict)  # TensorFlow's reserve override, if any

    @property
    def context(self) -> int:
        return context_bytes_for(self.capacity, self.context_bytes)

    @classmethod
    def of_device(
        cls,
        capacity: int,
        name: str,
        compute_capability: int | None = None,
        *,
        platform: str = "cpu",
        context_bytes: int | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> MachineSpec:
        """The machine of a device on `platform` (`gpu`, `tpu` or `cpu`, where the frameworks' CPU
        devices stand in): events that name no device are that platform's device 0, and a TPU chip
        has no CUDA context. The plugin and the devmem command build their machines here alike."""
        return cls(
            capacity,
            name,
            compute_capability or DEFAULT_COMPUTE_CAPABILITY[0],
            context_bytes=0 if platform == "tpu" else context_bytes,
            default_device=f"{platform}:0",
            environ=dict(environ or {}),
        )


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllocatorFigures:
    """One framework's allocator on one device."""

    source: str
    process: int
    setup: str  # its settings, as a user writes them
    limit: int  # the most it may hold
    asked: int  # its first region: what it tried to take at once (0: it grows)
    took: int  # what it held after its first region (less than asked where it backed off)
    peak_bytes_in_use: int
    peak_bytes_reserved: int
    moved_bytes: int = 0  # a compacting allocator's: bytes it moved to defragment
    compactions: int = 0

    @property
    def name(self) -> str:
        return allocator_name(self.source, self.process)

    def to_json(self) -> dict[str, object]:
        data = {
            "allocator": self.name,
            **attributes(self, "setup limit asked took peak_bytes_in_use peak_bytes_reserved"),
        }
        if self.compactions:
            data.update(moved_bytes=self.moved_bytes, compactions=self.compactions)
        return data


@dataclass(frozen=True)
class DeviceFigures:
    """What one device held over the test."""

    device: str
    capacity: int
    context_bytes: int
    peak_bytes_in_use: (
        int  # what the allocators count in use (XLA's bytes_in_use): chunks handed out, whole where not split
    )
    peak_bytes_reserved: int
    peak_bytes_requested: int  # live data, each request rounded to 256 bytes as XLA rounds it
    fragmentation: float | None  # at this device's peak of live data; None when nothing was allocated
    worst_fragmentation: float | None  # the highest over the test, and after which event
    worst_fragmentation_event: int | None
    allocators: tuple[AllocatorFigures, ...]
    at_peak: dict[str, int]  # who held the memory at this device's peak of live data (bytes asked), largest first
    peak_event: int  # the event after which its live data peaked
    # per holder at the peak: the bytes each user's line made ("" where not known), largest first;
    # empty where the trace names no line
    lines_at_peak: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            **attributes(self, "device peak_bytes_in_use peak_bytes_reserved peak_bytes_requested"),
            "peak_chunk_bytes": self.peak_bytes_in_use,  # the same figure, under the name reports gave it first
            **attributes(self, "fragmentation worst_fragmentation worst_fragmentation_event context_bytes"),
            "allocators": [a.to_json() for a in self.allocators],
            "at_peak": self.at_peak,
        }


@dataclass(frozen=True)
class PoolMap:
    """One allocator's memory at a moment: its regions (sizes, in the order taken) and their chunks
    as (region, offset, size, event index of the allocation that holds it, or -1 when free)."""

    source: str
    process: int
    regions: tuple[int, ...]
    chunks: tuple[tuple[int, int, int, int], ...]

    @classmethod
    def on_demand(cls, source: str, process: int, buffers: list[tuple[int, int]]) -> PoolMap:
        """An on-demand pool's map: each buffer, (size, event) in `buffers`, a region of its own."""
        ordered = sorted(buffers)
        return cls(
            source,
            process,
            tuple(size for size, _ in ordered),
            tuple((i, 0, *buffer) for i, buffer in enumerate(ordered)),
        )


@dataclass(frozen=True)
class MapSnapshot:
    """A device's allocators as they were right after event `event`."""

    device: str
    event: int
    pools: tuple[PoolMap, ...]


@dataclass(frozen=True)
class OutOfMemory:
    """The allocation the machine could not serve, and who held what on its device then.

    `kind` says why, on the model: "capacity" (the live data and the contexts need more than the
    device), "fragmentation" (its pool had the bytes free, but no block that large), "limit" (its
    regime's limit is below what it needs), "tenant" (another framework or process, or the CUDA context
    beside a pool that preallocated what was left, holds the rest).
    """

    event: int
    device: str
    source: str
    process: int
    label: str
    requested: int
    rounded: int
    in_use: int  # the failing allocator's bytes in use
    pool_bytes: int  # what its pool held
    largest_free_block: int
    limit: int
    device_free: int
    capacity: int
    device_in_use: int  # every allocator on the device
    held_by_others: dict[str, int]  # the other allocators and the contexts on that device
    kind: str
    fragmentation: float  # of the failing allocator's pool, then
    kept_before: int = 0  # live data on that device from before the trace (a shared fixture's), not in `device_in_use`

    @property
    def allocator(self) -> str:
        return allocator_name(self.source, self.process)

    @property
    def pool_free(self) -> int:
        return self.pool_bytes - self.in_use

    def to_json(self) -> dict[str, object]:
        data = attributes(
            self,
            "kind event device allocator label requested rounded in_use pool_bytes largest_free_block limit "
            "device_free capacity device_in_use held_by_others fragmentation",
        )
        if self.kept_before:
            data["kept_before"] = self.kept_before
        return data


@dataclass(frozen=True)
class SourceFigures:
    """One source's share of a trace (bytes as asked, before the pools round them)."""

    allocations: int
    peak_live_bytes: int

    def to_json(self) -> dict[str, int]:
        return {"allocations": self.allocations, "peak_live_bytes": self.peak_live_bytes}


@dataclass
class Timeline:
    """After every replayed event: the device it touched, and that device's bytes in use, held
    and fragmentation then. Per device, the values hold until its next event."""

    device_names: list[str]
    devices: array = field(default_factory=lambda: array("H"))
    in_use: array = field(default_factory=lambda: array("q"))
    reserved: array = field(default_factory=lambda: array("q"))
    fragmentation: array = field(default_factory=lambda: array("f"))

    def __len__(self) -> int:
        return len(self.devices)

    def series(self, device: str) -> tuple[list[int], list[int], list[int], list[float]]:
        """(event indexes, in use, reserved, fragmentation) of the events that touched `device`."""
        code = self.device_names.index(device)
        picked = [i for i, d in enumerate(self.devices) if d == code]
        return (
            picked,
            [self.in_use[i] for i in picked],
            [self.reserved[i] for i in picked],
            [float(self.fragmentation[i]) for i in picked],
        )


@dataclass
class MachineRun:
    """What the machine made of a trace."""

    spec: MachineSpec
    events: int
    devices: list[DeviceFigures]
    order: list[str]  # allocators in the order they started
    oom: OutOfMemory | None = None
    by_source: dict[str, SourceFigures] = field(default_factory=dict)
    timeline: Timeline | None = None
    snapshots: dict[str, MapSnapshot] = field(default_factory=dict)  # each device's pools at its peak
    failure: MapSnapshot | None = None  # the failing device's pools when its allocation failed
    events_replayed: int = 0
    fragmented: dict[str, MapSnapshot] = field(
        default_factory=dict
    )  # each device's pools at (about) its most fragmented

    @property
    def fits(self) -> bool:
        return self.oom is None

    @property
    def headline(self) -> DeviceFigures | None:
        """The device with the highest peak in use (the first such, in device order)."""
        return max(self.devices, key=lambda d: d.peak_bytes_in_use) if self.devices else None

    def device(self, name: str) -> DeviceFigures | None:
        return next((d for d in self.devices if d.device == name), None)
