"""The per-test measurement record and its JSON form (what reports and baselines are made of)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.trace import Trace
from ..model.pool.policy import canonical_label
from ..model.replay import ReplayFigures
from ..capture.sources.base import Reading


@dataclass
class TestRecord:
    """What one test used under one regime on one device.

    The three figures come from the test's allocation trace replayed under its regime
    (`replay.py`): `peak_bytes_in_use` is the pool's peak of chunks in use, `peak_bytes_reserved`
    what the pool held from the device at most, `fragmentation` XLA's measure at the peak. They
    are None only when nothing could be traced (`trace` then says why). `sources` keep what each
    raw source measured beside them (NVML and the frameworks' counters), to validate the replay.
    """

    __test__ = False  # not a pytest test class, despite the name

    test_id: str
    regime: str
    device: str
    device_class: str
    peak_bytes_in_use: int | None
    peak_bytes_reserved: int | None
    fragmentation: float | None
    oom: bool
    outcome: str
    sources: dict[str, Reading] = field(default_factory=dict)
    limit_bytes: int | None = None
    duration_s: float = 0.0
    baseline: dict[str, object] | None = None  # the comparison with the stored baseline, when made
    sharing: dict[str, object] | None = None  # frameworks on one device (shared.SharingVerdict), when modelled
    analysis: dict[str, object] | None = None  # min_fraction / what_if from the test's trace, when asked
    trace: dict[str, object] | None = None  # the replay: events, per-source figures, notes
    failed_by_devmem: bool = False  # the test passed, and pytest-devmem's checks failed it
    compiles: int | None = None  # executables JAX compiled during the test (None: JAX not traced)
    leaked_bytes: int | None = None  # what the frameworks still hold of the test's own memory (None: not checked)
    trace_events: Trace | None = field(default=None, repr=False, compare=False)  # in memory only

    @classmethod
    def from_replay(
        cls,
        test_id: str,
        regime: str,
        device: str,
        device_class: str,
        figures: ReplayFigures | None,
        readings: list[Reading],
        *,
        notes: list[str],
        oom: bool,
        outcome: str,
        limit_bytes: int | None = None,
        duration_s: float = 0.0,
    ) -> TestRecord:
        """A record whose figures are the replay's; with `figures` None (nothing traced) they are None too."""
        trace: dict[str, object] = figures.to_json() if figures is not None else {"events": None}
        trace["notes"] = notes
        return cls(
            test_id=test_id,
            regime=regime,
            device=device,
            device_class=device_class,
            peak_bytes_in_use=figures.peak_bytes_in_use if figures is not None else None,
            peak_bytes_reserved=figures.peak_bytes_reserved if figures is not None else None,
            fragmentation=figures.fragmentation if figures is not None else None,
            oom=oom,
            outcome=outcome,
            sources={reading.source: reading for reading in readings},
            limit_bytes=limit_bytes,
            duration_s=duration_s,
            trace=trace,
        )

    @property
    def measured_by(self) -> list[str]:
        """Names of the sources that measured something."""
        return [name for name, reading in self.sources.items() if reading.available]

    def to_json(self) -> dict[str, object]:
        """Plain JSON data with a stable key order."""
        return {
            "test_id": self.test_id,
            "regime": self.regime,
            "device": self.device,
            "device_class": self.device_class,
            "peak_bytes_in_use": self.peak_bytes_in_use,
            "peak_bytes_reserved": self.peak_bytes_reserved,
            "fragmentation": self.fragmentation,
            "oom": self.oom,
            "outcome": self.outcome,
            "limit_bytes": self.limit_bytes,
            "duration_s": round(self.duration_s, 6),
            "baseline": self.baseline,
            "sharing": self.sharing,
            "analysis": self.analysis,
            "trace": self.trace,
            "failed_by_devmem": self.failed_by_devmem,
            "compiles": self.compiles,
            "leaked_bytes": self.leaked_bytes,
            "sources": {name: reading.to_json() for name, reading in sorted(self.sources.items())},
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> TestRecord:
        sources: dict[str, dict[str, object]] = dict(data.get("sources") or {})  # type: ignore[call-overload]
        return cls(
            test_id=str(data["test_id"]),
            regime=canonical_label(str(data["regime"])),  # an older report's "default" is prealloc
            device=str(data["device"]),
            device_class=str(data["device_class"]),
            peak_bytes_in_use=data.get("peak_bytes_in_use"),  # type: ignore[arg-type]
            peak_bytes_reserved=data.get("peak_bytes_reserved"),  # type: ignore[arg-type]
            fragmentation=data.get("fragmentation"),  # type: ignore[arg-type]
            oom=bool(data.get("oom")),
            outcome=str(data.get("outcome", "")),
            sources={name: Reading.from_json(name, reading) for name, reading in sources.items()},
            limit_bytes=data.get("limit_bytes"),  # type: ignore[arg-type]
            duration_s=float(data.get("duration_s", 0.0)),  # type: ignore[arg-type]
            baseline=data.get("baseline"),  # type: ignore[arg-type]
            sharing=data.get("sharing"),  # type: ignore[arg-type]
            analysis=data.get("analysis"),  # type: ignore[arg-type]
            trace=data.get("trace"),  # type: ignore[arg-type]
            failed_by_devmem=bool(data.get("failed_by_devmem", False)),
            compiles=data.get("compiles"),  # type: ignore[arg-type]
            leaked_bytes=data.get("leaked_bytes"),  # type: ignore[arg-type]
        )
