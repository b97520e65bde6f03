"""The per-test measurement record and its JSON form (what reports and baselines are made of)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..capture.sources.base import Reading
from ..compile_store import is_key
from ..json_fields import attributes, counts, mapping, mappings, number, text, texts, whole
from ..model.buffers import ProgramBuffers, lines_from_json
from ..model.pool.policy import canonical_label
from ..model.whatif import WhatIf

if TYPE_CHECKING:
    from ..model.machine import MachineRun
    from ..model.trace import Trace


KEPT_CPU_SIZES = "kept the CPU compile's sizes"
"""Words of the trace note that says which executables a GPU or TPU compile could not size."""


def kept_cpu_sizes(record: TestRecord) -> list[str]:
    """The record's trace notes that say some of its executables kept the CPU compile's sizes."""
    return [note for note in record.trace.notes if KEPT_CPU_SIZES in note] if record.trace is not None else []


OUTCOMES = ("passed", "failed", "skipped")
"""A record's outcome: its test's call as pytest reported it (an xfail is skipped, an xpass passed),
or failed by pytest-devmem's checks."""

DEVICE_METRICS = ("peak_bytes_in_use", "peak_bytes_reserved", "fragmentation", "peak_bytes_requested")
"""A device's figures a baseline keeps, in the order they are written."""


def headline_peak(figures: Mapping[str, object]) -> int | None:
    """A record's or baseline's peak for a trend or a "measured?" question: what the allocator
    counted, or, in a file written before it was kept (`requested_peak_only`), the requested bytes."""
    for name in ("peak_bytes_in_use", "peak_bytes_requested"):
        value = whole(figures, name)
        if value is not None:
            return value
    return None


def requested_peak_only(figures: dict[str, object]) -> dict[str, object]:
    """Figures written before `peak_bytes_in_use` was the allocator's count (baseline format 1, report
    format 2 and earlier), as they read now: their `peak_bytes_in_use` was the live data's peak, each
    request rounded to 256 bytes, so it is `peak_bytes_requested`, and the allocator's count, never
    written, is None. The gate compares such a figure with the requested bytes (`changes.compare`)."""
    migrated = dict(figures)
    if "peak_bytes_in_use" in migrated and "peak_bytes_requested" not in migrated:
        migrated["peak_bytes_requested"] = migrated.pop("peak_bytes_in_use")
        migrated["peak_bytes_in_use"] = None
    return migrated


def compiler_keys(value: object) -> list[str]:
    """The compiler entries' keys in a record's or baseline's `compiler_entries`, sorted; anything
    that is not a key is left out (a damaged list names no entry, so the store keeps none for it)."""
    return sorted({key for key in value if is_key(key)}) if isinstance(value, list) else []


@dataclass(frozen=True)
class BaselineEntry:
    """One stored record: the metrics of one test under one regime on one device class."""

    test_id: str
    regime: str
    metrics: dict[str, float | int | None]
    device: str
    versions: dict[str, str]
    path: Path
    device_class: str = ""
    reason: str = ""  # why it holds no figures: the test failed or was skipped when baselines were updated
    contributors: dict[str, int] = field(default_factory=dict)  # who held the memory at the peak
    devices: dict[str, dict[str, float | int | None]] = field(default_factory=dict)  # per device, for tests on several
    # its memory over its events, in a few points (model/profile.py)
    profile: dict[str, object] = field(default_factory=dict)
    # per program that held memory at the peak: the buffers at its own peak (model/buffers.py)
    buffers: dict[str, ProgramBuffers] = field(default_factory=dict)
    # the keys of the target compiler's entries its test's sizes came from (compile_store.py)
    compiler_entries: tuple[str, ...] = ()
    # per holder at the peak: the bytes each user's line made (model/buffers.py, lines_from_json)
    lines: dict[str, dict[str, int]] = field(default_factory=dict)


def _lines(value: object) -> dict[str, dict[str, int]] | None:
    """Lines at the peak as a report holds them, checked (model/buffers.lines_from_json); None where unreadable."""
    try:
        return lines_from_json(value) if value is not None else None
    except ValueError:
        return None


TRACE_FIELDS = (
    "events by_source order at_peak lines_at_peak notes profile kept executables buffers compiled needed functions file"
)
"""A TraceFacts' fields in its JSON form (the record's "trace"), in order; `events` and `notes` always, the
others where the record has them."""


@dataclass
class TraceFacts:
    """What a record keeps of its replayed trace beside its figures: the report's "trace". Fields
    are filled as the test's record is made (plugin/recording.py) and None where it has none."""

    events: int | None = None  # the events replayed; None: nothing was traced
    by_source: Mapping[str, object] | None = None  # per source: allocations, peak of live data
    order: list[str] | None = None  # the allocators in the order they started
    at_peak: dict[str, int] | None = None  # who held the peak device's memory at its peak
    lines_at_peak: dict[str, dict[str, int]] | None = None  # per holder, the bytes each user's line made
    notes: list[str] = field(default_factory=list)  # what the capture could not see, in words
    profile: Mapping[str, object] | None = None  # its memory over its events, in a few points (model/profile.py)
    kept: dict[str, int] | None = None  # what the frameworks still hold of the test's memory
    executables: Mapping[str, object] | None = None  # per executable: allocated per run, as sized
    buffers: Mapping[str, object] | None = None  # per program: its buffers at its peak (model/buffers.py's JSON form)
    compiled: list[str] | None = None  # the executables JAX compiled during the test
    needed: dict[str, int] | None = None  # per function, the executables it needed, compiled or cached
    functions: Mapping[str, object] | None = None  # per function run: its executables' shapes, where it is defined
    file: str | None = None  # where --devmem-traces wrote the trace
    earlier: dict[str, object] = field(default_factory=dict)  # an older report's other keys, kept as read

    def to_json(self) -> dict[str, object]:
        data = attributes(self, TRACE_FIELDS)
        return {name: value for name, value in data.items() if value is not None or name == "events"} | self.earlier

    @classmethod
    def from_json(cls, data: dict[str, object]) -> TraceFacts:
        """A report's "trace": each field of the type kept, else None; keys no longer written kept as read."""
        found = cls(
            events=whole(data, "events"),
            by_source=mapping(data, "by_source"),
            order=texts(data, "order"),
            at_peak=counts(data, "at_peak"),
            lines_at_peak=_lines(data.get("lines_at_peak")),
            notes=texts(data, "notes") or [],
            profile=mapping(data, "profile"),
            kept=counts(data, "kept"),
            executables=mapping(data, "executables"),
            buffers=mapping(data, "buffers"),
            compiled=texts(data, "compiled"),
            needed=counts(data, "needed"),
            functions=mapping(data, "functions"),
            file=text(data, "file"),
        )
        found.earlier = {name: value for name, value in data.items() if name not in TRACE_FIELDS.split()}
        return found


@dataclass(frozen=True)
class MinFraction:
    """The smallest prealloc fraction the test's trace fits in (model/whatif.find_min_fraction)."""

    value: float | None  # None: it does not fit even on the whole device
    at_floor: bool | None = None  # the search stopped at its floor (None: a report older than the field)


@dataclass(frozen=True)
class Analysis:
    """The test's trace replayed again, when asked (--devmem-find-min-fraction, --devmem-what-if):
    the report's "analysis"."""

    trace_events: int | None
    peak_live_bytes: int | None
    min_fraction: MinFraction | None = None  # None: not asked
    what_if: WhatIf | None = None  # on a device of the asked size; None: not asked

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"trace_events": self.trace_events, "peak_live_bytes": self.peak_live_bytes}
        if self.min_fraction is not None:
            data["min_fraction"] = self.min_fraction.value
            if self.min_fraction.at_floor is not None:
                data["min_fraction_at_floor"] = self.min_fraction.at_floor
        if self.what_if is not None:
            data["what_if"] = attributes(self.what_if, "capacity ok message")
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Analysis:
        """A report's "analysis": each part of the type kept, else not kept."""
        floor = data.get("min_fraction_at_floor")
        asked = mapping(data, "what_if") or {}
        capacity, ok = whole(asked, "capacity"), asked.get("ok", True)
        return cls(
            trace_events=whole(data, "trace_events"),
            peak_live_bytes=whole(data, "peak_live_bytes"),
            min_fraction=(
                MinFraction(number(data, "min_fraction"), floor if isinstance(floor, bool) else None)
                if "min_fraction" in data
                else None
            ),
            what_if=(
                WhatIf(capacity, ok, text(asked, "message") or "")
                if capacity is not None and isinstance(ok, bool)
                else None
            ),
        )


RECORD_FIELDS = "test_id regime device device_class peak_bytes_in_use peak_bytes_reserved peak_bytes_requested fragmentation peak_device worst_fragmentation devices oom tolerance compile_target tpu outcome limit_bytes duration_s baseline sharing analysis trace failed_by_devmem failed_check compiles compiler_entries leaked_bytes sources"
"""A TestRecord's fields in its JSON form, in order."""


@dataclass
class TestRecord:
    """What one test used under one regime on one machine.

    The figures come from the test's allocation trace replayed on the model of the machine
    (`model/machine/`): `devices` holds each device's figures and allocators, and the headline
    `peak_bytes_in_use` / `peak_bytes_reserved` / `fragmentation` are those of the device with the
    highest peak (`peak_device`). They are None only when nothing could be traced (`trace` then
    says why): a test that measured nothing has no figure, never 0. `oom` says which allocation ran
    out of memory, where, of what kind and who held what (the replay's, or a real error the test
    raised: `real`). `sources` keep what each raw source measured beside them (NVML and the
    frameworks' counters), to validate the replay.
    """

    __test__ = False  # not a pytest test class, despite the name

    test_id: str
    regime: str
    device: str
    device_class: str
    peak_bytes_in_use: int | None
    peak_bytes_reserved: int | None
    fragmentation: float | None
    oom: dict[str, object] | None
    outcome: str
    sources: dict[str, Reading] = field(default_factory=dict)
    limit_bytes: int | None = None
    duration_s: float = 0.0
    baseline: dict[str, object] | None = None  # the comparison with the stored baseline, when made
    sharing: dict[str, object] | None = None  # reports before per-device figures: frameworks on one device
    analysis: Analysis | None = None  # the test's trace replayed again, when asked
    trace: TraceFacts | None = None  # what the record keeps of its replayed trace
    failed_by_devmem: bool = False  # the test passed, and pytest-devmem's checks failed it
    # the first of pytest-devmem's checks that failed (gate/verdicts.CHECKS), whether or not the test failed by
    # itself too; None when every check passed (or a report older than the field)
    failed_check: str | None = None
    compiles: int | None = (
        None  # executables the test needed, compiled during it or found in a cache: the same in any order (None: JAX not traced)
    )
    leaked_bytes: int | None = None  # what the frameworks still hold of the test's own memory (None: not checked)
    devices: list[dict[str, object]] | None = None  # per device: figures and allocators
    peak_device: str | None = None  # the device the headline figures are from
    worst_fragmentation: float | None = None  # the highest fragmentation on any device over the test
    tolerance: str | None = None  # the tolerance its baseline comparison used (the marker's, or the session's)
    compile_target: str | None = None  # whose compile sized JAX's executables: "cpu", "native", or a GPU
    tpu: dict[str, object] | None = None  # on a TPU preset: the generation, who sized it, bytes defragmentation moved
    # the peak device's most live data at once, each request rounded to 256 bytes (`peak_bytes_in_use`
    # counts whole chunks, as the allocator does); None where nothing was traced or in older reports
    peak_bytes_requested: int | None = None
    # the keys of the target compiler's entries its sizes came from (compile_store.py): what its baseline names
    compiler_entries: list[str] = field(default_factory=list)
    trace_events: Trace | None = field(default=None, repr=False, compare=False)  # in memory only
    run: MachineRun | None = field(default=None, repr=False, compare=False)  # in memory only

    @classmethod
    def from_run(
        cls,
        test_id: str,
        regime: str,
        device: str,
        device_class: str,
        run: MachineRun | None,
        readings: list[Reading],
        *,
        notes: list[str],
        outcome: str,
        real_oom: str | None = None,
        limit_bytes: int | None = None,
        duration_s: float = 0.0,
    ) -> TestRecord:
        """A record whose figures are the machine's; with `run` None (nothing traced) they are None.
        `real_oom` is the out-of-memory error the test itself raised, if any."""
        trace = TraceFacts(notes=notes)
        oom: dict[str, object] | None = None
        devices = peak_device = headline = worst = None
        if run is not None:
            trace.events, trace.order = run.events, run.order
            trace.by_source = {name: figures.to_json() for name, figures in sorted(run.by_source.items())}
            top = run.headline
            if top is not None:
                headline, peak_device = top, top.device
                trace.at_peak = top.at_peak
                trace.lines_at_peak = top.lines_at_peak or None
            devices = [d.to_json() for d in run.devices]
            worsts = [d.worst_fragmentation for d in run.devices if d.worst_fragmentation is not None]
            worst = max(worsts) if worsts else None
            if run.oom is not None:
                oom = run.oom.to_json()
        if real_oom:
            oom = {**(oom or {}), "real": True, "error": real_oom}
        nothing = 0 if run is not None else None  # a replay that served nothing: 0 B; no replay: no figure
        return cls(
            test_id=test_id,
            regime=regime,
            device=device,
            device_class=device_class,
            peak_bytes_in_use=headline.peak_bytes_in_use if headline is not None else nothing,
            peak_bytes_reserved=headline.peak_bytes_reserved if headline is not None else nothing,
            fragmentation=headline.fragmentation if headline is not None else None,
            peak_bytes_requested=headline.peak_bytes_requested if headline is not None else nothing,
            oom=oom,
            outcome=outcome,
            sources={reading.source: reading for reading in readings},
            limit_bytes=limit_bytes,
            duration_s=duration_s,
            trace=trace,
            devices=devices,
            peak_device=peak_device,
            worst_fragmentation=worst,
            run=run,
        )

    @property
    def measured_by(self) -> list[str]:
        """Names of the sources that measured something."""
        return [name for name, reading in self.sources.items() if reading.available]

    @property
    def chip_peak_bytes_in_use(self) -> int | None:
        """The peak a limit judges: under a TPU preset the chips' highest, None where no chip held
        any (TensorFlow's CPU allocator is the host's); elsewhere the headline."""
        if self.tpu is None:
            return self.peak_bytes_in_use
        chips = [d.get("peak_bytes_in_use") for d in self.devices or () if not str(d.get("device")).startswith("cpu:")]
        return max((int(peak) for peak in chips if isinstance(peak, int)), default=None)

    @property
    def host_peak(self) -> bool:
        """The headline is the host's: TensorFlow's CPU allocator under a TPU preset, never a chip's."""
        return self.tpu is not None and str(self.peak_device or "").startswith("cpu:")

    @property
    def out_of_memory(self) -> bool:
        """It ran out of memory: in the replay on the model, or for real."""
        return self.oom is not None

    @property
    def device_count(self) -> int:
        return len(self.devices or [])

    def device_metrics(self) -> dict[str, dict[str, float | int | None]]:
        """Each device's gated figures, by device name (empty for a one-device test: the headline is its figures)."""
        if not self.devices or len(self.devices) < 2:
            return {}
        return {str(d.get("device")): {name: number(d, name) for name in DEVICE_METRICS} for d in self.devices}

    def to_json(self) -> dict[str, object]:
        """Plain JSON data with a stable key order."""
        data = attributes(self, RECORD_FIELDS)
        data.update(
            analysis=self.analysis.to_json() if self.analysis is not None else None,
            trace=self.trace.to_json() if self.trace is not None else None,
            duration_s=round(self.duration_s, 6),
            compiler_entries=list(self.compiler_entries),
            sources={name: reading.to_json() for name, reading in sorted(self.sources.items())},
        )
        if self.tpu is None:  # a TPU's figures, and the compiler's entries, only where there are some
            del data["tpu"]
        if not self.compiler_entries:
            del data["compiler_entries"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> TestRecord:
        """The record a report holds (checked against the report's schema before it is read): each
        field of the type the record keeps, or its absence (None) where the report has another."""
        sources = mapping(data, "sources") or {}
        oom, analysis, trace = data.get("oom"), data.get("analysis"), data.get("trace")
        if isinstance(oom, bool):  # reports before per-device figures said only yes or no
            oom = {"real": True} if oom else None
        return cls(
            test_id=str(data["test_id"]),
            regime=canonical_label(str(data["regime"])),  # an older report's "default" is prealloc
            device=str(data["device"]),
            device_class=str(data["device_class"]),
            peak_bytes_in_use=whole(data, "peak_bytes_in_use"),
            peak_bytes_reserved=whole(data, "peak_bytes_reserved"),
            fragmentation=number(data, "fragmentation"),
            oom=oom if isinstance(oom, dict) else None,
            outcome=str(data.get("outcome", "")),
            sources={
                name: Reading.from_json(name, dict(reading))
                for name, reading in sources.items()
                if isinstance(reading, dict)
            },
            limit_bytes=whole(data, "limit_bytes"),
            duration_s=number(data, "duration_s") or 0.0,
            baseline=mapping(data, "baseline"),
            sharing=mapping(data, "sharing"),
            analysis=Analysis.from_json(analysis) if isinstance(analysis, dict) else None,
            trace=TraceFacts.from_json(trace) if isinstance(trace, dict) else None,
            failed_by_devmem=bool(data.get("failed_by_devmem", False)),
            failed_check=text(data, "failed_check"),
            compiles=whole(data, "compiles"),
            leaked_bytes=whole(data, "leaked_bytes"),
            devices=mappings(data, "devices"),
            peak_device=text(data, "peak_device"),
            worst_fragmentation=number(data, "worst_fragmentation"),
            tolerance=text(data, "tolerance"),
            compile_target=text(data, "compile_target"),
            tpu=mapping(data, "tpu"),
            peak_bytes_requested=whole(data, "peak_bytes_requested"),
            compiler_entries=compiler_keys(data.get("compiler_entries")),
        )
