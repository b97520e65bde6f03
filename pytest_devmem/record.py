"""The per-test measurement record and its JSON form (what reports and baselines are made of)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .sources.base import Reading

ALLOCATOR_SOURCES = ("pool", "jax", "tensorflow")
"""Sources that each see one allocator's memory; their peaks add up to the test's device use."""


@dataclass
class TestRecord:
    """What one test used under one regime on one device.

    `peak_bytes_in_use` is NVML's process figure where a GPU is present (it sees every allocator);
    elsewhere the sum of the allocator sources' peaks (pool, JAX, TensorFlow), an upper bound of the
    test's combined peak. `fragmentation` is the pool's at its peak, else JAX's where it reports one.
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

    @classmethod
    def from_readings(
        cls,
        test_id: str,
        regime: str,
        device: str,
        device_class: str,
        readings: list[Reading],
        *,
        oom: bool,
        outcome: str,
        limit_bytes: int | None = None,
        duration_s: float = 0.0,
    ) -> TestRecord:
        by_name = {reading.source: reading for reading in readings}
        nvml = by_name.get("nvml")
        allocators = [by_name[name] for name in ALLOCATOR_SOURCES if name in by_name and by_name[name].available]
        if nvml is not None and nvml.available:
            peak, reserved = nvml.peak_bytes_in_use, nvml.peak_bytes_reserved
        elif allocators:
            peak = sum(r.peak_bytes_in_use or 0 for r in allocators)
            reserved = sum((r.peak_bytes_reserved if r.peak_bytes_reserved is not None else r.peak_bytes_in_use) or 0 for r in allocators)
        else:
            peak = reserved = None
        fragmentation = next((r.fragmentation for r in allocators if r.fragmentation is not None), None)
        return cls(
            test_id=test_id,
            regime=regime,
            device=device,
            device_class=device_class,
            peak_bytes_in_use=peak,
            peak_bytes_reserved=reserved,
            fragmentation=fragmentation,
            oom=oom,
            outcome=outcome,
            sources=by_name,
            limit_bytes=limit_bytes,
            duration_s=duration_s,
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
            "sources": {name: reading.to_json() for name, reading in sorted(self.sources.items())},
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> TestRecord:
        sources: dict[str, dict[str, object]] = dict(data.get("sources") or {})  # type: ignore[call-overload]
        return cls(
            test_id=str(data["test_id"]),
            regime=str(data["regime"]),
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
        )
