"""Each measured test on each target of `--devmem-targets`: whether it fits there, out of memory (of
what kind), or was not measured (and why), with its peak, the target's capacity and the compile that
sized JAX's executables. A what-if view beside the session's own records: it never gates, and no
baseline is read or written for it. A row is a test under the regime the session ran it under; a
target whose regime differs (a TPU's runtime has one) fills that row's cell with its own regime's
result, and says so. Plain data that crosses processes as JSON (a child, an xdist
worker), combined in one order whatever order it arrived in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ..json_fields import attributes, text, whole
from .record import TestRecord, kept_cpu_sizes

FITS, OOM, FAILED, NOT_MEASURED = "fits", "oom", "failed", "not measured"
STATUSES = (FITS, OOM, FAILED, NOT_MEASURED)
"""A test fits a target only where it passed there (or failed by pytest-devmem's own checks, a
marker's limit say, which say nothing of the device); one that failed there otherwise is `failed`,
with the figure it reached and why."""


@dataclass(frozen=True)
class Target:
    """One column of the table: a device, its capacity per device, and whether it is the session's own."""

    name: str
    capacity_bytes: int
    session: bool = False  # the run's own device: its figures are the session's records, not a rerun

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "capacity_bytes": self.capacity_bytes, "session": self.session}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Target:
        return cls(str(data["name"]), int(data["capacity_bytes"]), bool(data.get("session", False)))  # type: ignore[call-overload]


RESULT_FIELDS = "test_id target regime status peak_bytes_in_use peak_bytes_reserved capacity_bytes peak_device devices oom_kind sized_by outcome reason"
"""A TargetResult's fields its JSON form holds as they are, in order (then its row's regime)."""


@dataclass(frozen=True)
class TargetResult:
    """One test on one target. `status` is fits, oom, failed or not measured; a test not measured
    has no figure (never 0 B) and a `reason`; one that failed has the figure it reached and why."""

    test_id: str
    target: str
    regime: str
    status: str
    capacity_bytes: int
    peak_bytes_in_use: int | None = None
    peak_bytes_reserved: int | None = None
    peak_device: str | None = None
    devices: int = 0
    oom_kind: str | None = None  # capacity, limit, tenant, fragmentation, or real (the test's own error)
    sized_by: str | None = None  # whose compile sized JAX's executables: cpu, a GPU or TPU preset; None: no JAX
    outcome: str | None = None  # the test's own outcome on that target
    reason: str | None = None  # why not measured; or what else to know (executables that kept the CPU's sizes)
    session_regime: str | None = (
        None  # the regime the session ran the test under (its row); None: `regime` (an older report)
    )

    @property
    def row_regime(self) -> str:
        """The regime of the table's row this result belongs to: the test's own in the session."""
        return self.session_regime or self.regime

    @property
    def other_regime(self) -> bool:
        """Whether the test ran under another regime on this target than its row's (a TPU's own)."""
        return self.regime != self.row_regime

    @classmethod
    def from_record(
        cls, record: TestRecord, target: str, capacity: int, why: str | None = None, session_regime: str | None = None
    ) -> TargetResult:
        """What a test's record on `target` says: out of memory (in the replay or for real), fits, or
        not measured: skipped part-way, or nothing traced (in the capture's words). `why`: what the
        test's reports there say, for a test skipped or failed there. `session_regime`: the regime
        the session ran it under (the record's own for the session's device)."""
        notes = list(record.trace.notes) if record.trace is not None else []
        kept_cpu = kept_cpu_sizes(record)
        common = {
            "test_id": record.test_id,
            "target": target,
            "regime": record.regime,
            "capacity_bytes": capacity,
            "sized_by": record.compile_target,
            "outcome": record.outcome,
            "devices": record.device_count,
            "session_regime": session_regime or record.regime,
        }
        if record.outcome == "skipped":
            return cls(status=NOT_MEASURED, reason=why or "skipped while it ran", **common)  # type: ignore[arg-type]
        if record.peak_bytes_in_use is None and record.oom is None:
            why = "; ".join(notes) or "nothing was traced"
            return cls(status=NOT_MEASURED, reason=why, **common)  # type: ignore[arg-type]
        oom = record.oom
        kind = None
        if oom is not None:
            kind = str(oom.get("kind") or ("real" if oom.get("real") else "capacity"))
        failed = record.outcome == "failed" and oom is None and not record.failed_by_devmem
        return cls(
            status=OOM if oom is not None else FAILED if failed else FITS,
            peak_bytes_in_use=record.peak_bytes_in_use,
            peak_bytes_reserved=record.peak_bytes_reserved,
            peak_device=record.peak_device,
            oom_kind=kind,
            reason="; ".join(
                ([why or "the test failed"] if record.outcome == "failed" and oom is None else []) + kept_cpu
            )
            or None,  # an OOM's failure is the OOM
            **common,  # type: ignore[arg-type]
        )

    @classmethod
    def not_measured(
        cls,
        test_id: str,
        target: str,
        regime: str,
        capacity: int,
        reason: str,
        outcome: str | None = None,
        session_regime: str | None = None,
    ) -> TargetResult:
        return cls(
            test_id,
            target,
            regime,
            NOT_MEASURED,
            capacity,
            reason=reason,
            outcome=outcome,
            session_regime=session_regime or regime,
        )

    @property
    def share(self) -> float | None:
        """The peak in use as a share of the target's capacity (per device)."""
        if self.peak_bytes_in_use is None or self.capacity_bytes <= 0:
            return None
        return self.peak_bytes_in_use / self.capacity_bytes

    def to_json(self) -> dict[str, object]:
        return {**attributes(self, RESULT_FIELDS), "session_regime": self.row_regime}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> TargetResult:
        status = str(data["status"])
        if status not in STATUSES:
            raise ValueError(f"invalid target status {status!r}: allowed are {', '.join(STATUSES)}")
        return cls(
            test_id=str(data["test_id"]),
            target=str(data["target"]),
            regime=str(data["regime"]),
            status=status,
            capacity_bytes=whole(data, "capacity_bytes") or 0,
            peak_bytes_in_use=whole(data, "peak_bytes_in_use"),
            peak_bytes_reserved=whole(data, "peak_bytes_reserved"),
            peak_device=text(data, "peak_device"),
            devices=whole(data, "devices") or 0,
            oom_kind=text(data, "oom_kind"),
            sized_by=text(data, "sized_by"),
            outcome=text(data, "outcome"),
            reason=text(data, "reason"),
            session_regime=text(data, "session_regime"),
        )


@dataclass
class TargetTable:
    """The targets (the session's device first) and every result, in one order: by test, the
    test's regime in the session (its row), then the targets' order."""

    targets: list[Target] = field(default_factory=list)
    results: list[TargetResult] = field(default_factory=list)
    children: int = 0  # child processes started for the reruns, over all workers
    skipped: str = ""  # why the tests were not run again on the targets, when they were not
    _index: dict[tuple[str, str, str], TargetResult] | None = field(default=None, repr=False, compare=False)
    _indexed: int = field(default=0, repr=False, compare=False)

    def add(self, results: Iterable[TargetResult]) -> None:
        self.results.extend(results)
        self._index = None

    def sort(self) -> None:
        order = {target.name: index for index, target in enumerate(self.targets)}
        unique = {(r.test_id, r.row_regime, r.target): r for r in self.results}  # one per row and target
        self.results = sorted(
            unique.values(), key=lambda r: (r.test_id, r.row_regime, order.get(r.target, len(order)), r.target)
        )
        self._index = None

    def tests(self) -> list[tuple[str, str]]:
        """(test id, the test's regime in the session) of every row, in order."""
        return list(dict.fromkeys((r.test_id, r.row_regime) for r in self.results))

    def cell(self, test_id: str, regime: str, target: str) -> TargetResult | None:
        """One test's cell on one target, by its row (the regime the session ran it under), whatever
        regime the target ran it under (looked up in a dict built once per set of results)."""
        if self._index is None or self._indexed != len(self.results):
            self._index = {(r.test_id, r.row_regime, r.target): r for r in self.results}
            self._indexed = len(self.results)
        return self._index.get((test_id, regime, target))

    def rows(self) -> list[tuple[str, str, dict[str, TargetResult]]]:
        """Per (test id, the test's regime in the session): its result on each target, by target name."""
        found: dict[tuple[str, str], dict[str, TargetResult]] = {}
        for result in self.results:
            found.setdefault((result.test_id, result.row_regime), {})[result.target] = result
        return [(test_id, regime, cells) for (test_id, regime), cells in found.items()]

    def to_json(self) -> dict[str, object]:
        return {
            "targets": [t.to_json() for t in self.targets],
            "children": self.children,
            "skipped": self.skipped or None,
            "results": [r.to_json() for r in self.results],
        }

    @classmethod
    def from_json(cls, data: object) -> TargetTable:
        """A report's `targets` object; ValueError naming what is wrong."""
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("targets"), list)
            or not isinstance(data.get("results"), list)
        ):
            raise ValueError('"targets" must be an object with a list of "targets" and a list of "results"')
        try:
            table = cls(
                [Target.from_json(t) for t in data["targets"]],
                [TargetResult.from_json(r) for r in data["results"]],
                int(data.get("children") or 0),
                str(data.get("skipped") or ""),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f'"targets": an entry cannot be read: {exc}') from None
        if any(r.session_regime is None for r in table.results):
            table.results = table.rows_of_older_results()
            table.sort()
        return table

    def fill_missing(self, reason: str) -> None:
        """A `not measured` result, saying `reason`, for each test on each target run again where its
        row has none (an xdist worker that crashed sent none of its tests' reruns): every target's
        count covers every row."""
        present = {(r.test_id, r.row_regime, r.target) for r in self.results}
        missing = [
            TargetResult.not_measured(test_id, target.name, regime, target.capacity_bytes, reason)
            for test_id, regime in self.tests()
            for target in self.targets
            if not target.session and (test_id, regime, target.name) not in present
        ]
        if missing:
            self.add(missing)
            self.sort()

    def rows_of_older_results(self) -> list[TargetResult]:
        """The results, those from a report written before `session_regime` was recorded given the
        regime of the session's own record of the test where it had one (a TPU target's result then
        joins its test's row); the others as they are."""
        session = {target.name for target in self.targets if target.session}
        own: dict[str, set[str]] = {}
        for r in self.results:
            if r.target in session:
                own.setdefault(r.test_id, set()).add(r.regime)
        results = []
        for r in self.results:
            regimes = own.get(r.test_id, set())
            if r.session_regime is None and len(regimes) == 1:
                r = replace(r, session_regime=next(iter(regimes)))
            results.append(r)
        return results
