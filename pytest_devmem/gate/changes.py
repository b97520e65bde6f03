"""A measurement set against its baseline entry: each gated figure ok, regressed or improved within
its tolerance, on the headline and on each device, and what grew at the peak. No pytest here."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.buffers import SMALL_SHARE, ProgramBuffers, describe_growth, describe_lines, programs_from_json
from ..model.executables import TEMP_SUFFIX
from ..model.machine.maps import TOP_CONTRIBUTORS
from ..units import format_size
from .record import BaselineEntry, TestRecord
from .tolerance import Tolerance, format_metric, format_metrics_apart

REQUESTED = "peak_bytes_requested"
"""The live data's peak: what a baseline stored before it kept the allocator's count (format 1)."""


@dataclass(frozen=True)
class MetricChange:
    metric: str
    baseline: float | None
    now: float | None
    allowed: str
    verdict: str  # "regressed", "improved", "ok" or "unmeasured"
    device: str | None = None  # one device's figure, for a test on several; None: the headline

    @property
    def name(self) -> str:
        """`peak_bytes_in_use`, or `peak_bytes_in_use on cpu:2` for one device's figure."""
        return self.metric if self.device is None else f"{self.metric} on {self.device}"

    @property
    def delta(self) -> float | None:
        return None if self.baseline is None or self.now is None else self.now - self.baseline

    @property
    def percent(self) -> float | None:
        if self.delta is None or not self.baseline:
            return None
        return self.delta / self.baseline * 100

    @property
    def delta_text(self) -> str:
        """`+8.00 MiB (+100.0%)`, `-0.0500`, or `n/a`."""
        delta = self.delta
        if delta is None:
            return "n/a"
        percent = "" if self.percent is None else f" ({self.percent:+.1f}%)"
        return ("+" if delta >= 0 else "-") + format_metric(self.metric, abs(delta)) + percent

    def describe(self) -> str:
        baseline, now = format_metrics_apart(self.metric, self.baseline, self.now)
        delta = self.delta_text
        if (
            self.delta is not None
            and "bytes" in self.metric
            and format_metric(self.metric, abs(self.delta)) in self.allowed
        ):
            # rounded, the delta reads as the allowance it is just past (+1.00 MiB against 1.00 MiB)
            delta += f", {'+' if self.delta >= 0 else '-'}{abs(int(self.delta)):,} B"
        return f"{self.name}: baseline {baseline}, now {now}, delta {delta}, allowed ±{self.allowed}"


@dataclass
class Comparison:
    """A record set against its baseline."""

    test_id: str
    regime: str
    status: str  # "new", "not baselined", "ok", "regressed", "improved", "unmeasured", "out of memory"
    changes: list[MetricChange] = field(default_factory=list)
    baseline_file: str | None = None
    reason: str = ""  # with "not baselined": why the stored entry holds no figures
    grew: list[tuple[str, int | None, int]] = field(default_factory=list)  # (who, bytes at the baseline's peak, now)
    baseline_named_contributors: bool = True  # False: `grew` lists the largest now, with nothing to compare
    grew_hidden: int = 0  # holders that grew by less than SMALL_SHARE of the peak, left out of `grew`
    # of the programs whose temp grew: the buffers at their peak, now and at the baseline's
    buffers: dict[str, ProgramBuffers] = field(default_factory=dict)
    baseline_buffers: dict[str, ProgramBuffers] = field(default_factory=dict)
    # of the holders that grew: the bytes each user's line made, now and at the baseline's peak
    lines: dict[str, dict[str, int]] = field(default_factory=dict)
    baseline_lines: dict[str, dict[str, int]] = field(default_factory=dict)

    def growth_text(self) -> str:
        """`jit(layer) temp 2.00 MiB -> 32.00 MiB: f32[4096,512] sort at model.py:6 (new, 8.00 MiB), ...`:
        what held more at the peak than at the baseline's, and in a program's temp, which buffers."""
        smaller = (
            f", and {self.grew_hidden} that grew by less than {SMALL_SHARE:.0%} of the peak" if self.grew_hidden else ""
        )
        if not self.baseline_named_contributors:
            return (
                "(the baseline names no one to compare with) largest now: "
                + ", ".join(f"{name} {format_size(now)}{self._inside(name)}" for name, _, now in self.grew)
                + smaller
            )
        return (
            ", ".join(f"{self._paired(name, before, now)}{self._inside(name)}" for name, before, now in self.grew)
            + smaller
        )

    def _paired(self, name: str, before: int | None, now: int) -> str:
        """`jit(step) temp 8.00 MiB → 40.00 MiB`; not paired where the holder's lines now share none
        with the baseline's (one name, another call: two different matmuls)."""
        was, made = set(self.baseline_lines.get(name, ())) - {""}, set(self.lines.get(name, ())) - {""}
        if before is not None and was and made and not was & made:
            return (
                f"{name} {format_size(now)}, not the baseline's {format_size(before)} made at {', '.join(sorted(was))}"
            )
        return f"{name} {format_size(before) if before is not None else _NOT_LISTED} → {format_size(now)}"

    def _inside(self, name: str) -> str:
        """`: f32[4096,512] sort at model.py:6 (new, 8.00 MiB)` for a program's temp; for arrays,
        `: made at model.py:12 (new, 8.00 MiB)`, the lines that made them; "" where neither is known."""
        program = program_of_temp(name)
        text = ""
        if program is not None:
            text = describe_growth(program, self.baseline_buffers.get(program), self.buffers.get(program))
        if not text:
            text = describe_lines(self.baseline_lines.get(name), self.lines.get(name))
        return f": {text}" if text else ""

    def failure_message(self) -> str:
        broken = [change for change in self.changes if change.verdict == "regressed"]
        lines = [f"device memory regression against {self.baseline_file} (regime {self.regime}):"]
        lines += [f"  {change.describe()}" for change in broken]
        if any(change.metric == REQUESTED and change.verdict == "regressed" for change in broken):
            lines.append(f"  ({LEGACY_NOTE})")
        if self.grew:
            lines.append(f"  what grew at the peak: {self.growth_text()}")
        lines.append("  if the increase is intended, refresh the baseline with --devmem-update")
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        def change(c: MetricChange) -> dict[str, object]:
            return {
                "baseline": c.baseline,
                "now": c.now,
                "delta": c.delta,
                "percent": c.percent,
                "allowed": c.allowed,
                "verdict": c.verdict,
            }

        devices: dict[str, dict[str, object]] = {}
        for c in self.changes:
            if c.device is not None:
                devices.setdefault(c.device, {})[c.metric] = change(c)
        return {
            **({"buffers": _buffers_json(self.buffers, self.baseline_buffers)} if self.buffers else {}),
            **({"lines": {"now": self.lines, "baseline": self.baseline_lines}} if self.lines else {}),
            "status": self.status,
            "file": self.baseline_file,
            **({"reason": self.reason} if self.reason else {}),
            **(
                {"grew": [{"name": name, "baseline": before, "now": now} for name, before, now in self.grew]}
                if self.grew
                else {}
            ),
            "metrics": {c.metric: change(c) for c in self.changes if c.device is None},
            **({"devices": devices} if devices else {}),
        }


LEGACY_NOTE = (
    "the baseline stores no allocator's count (written by an earlier pytest-devmem, or from its report), so its peak is "
    "compared as requested bytes; --devmem-update stores what the allocator counts"
)


def metrics_of(record: TestRecord) -> dict[str, float | int | None]:
    return {
        "peak_bytes_in_use": record.peak_bytes_in_use,
        "peak_bytes_reserved": record.peak_bytes_reserved,
        "fragmentation": record.fragmentation,
        "peak_bytes_requested": record.peak_bytes_requested,
    }


def compare(
    entry: BaselineEntry | None,
    test_id: str,
    regime: str,
    now: dict[str, float | int | None],
    tolerance: Tolerance,
    contributors: dict[str, int] | None = None,
    now_devices: dict[str, dict[str, float | int | None]] | None = None,
    *,
    out_of_memory: bool = False,
    buffers: dict[str, ProgramBuffers] | None = None,
    lines: dict[str, dict[str, int]] | None = None,
) -> Comparison:
    """Set `now` against `entry` under `tolerance`: each gated metric is ok, regressed or improved,
    on the headline and on each device both have figures for (a test on several devices). A test
    that ran out of memory is "out of memory" whatever its figures: never ok, never improved. With
    `contributors` (who held the memory at the peak now), a regression says what grew; with `buffers`
    (each program's buffers at its peak now), in a program's temp, which buffers grew and on what line;
    with `lines` (per holder at the peak now, the bytes each user's line made), which lines made what grew."""
    path = str(entry.path) if entry is not None else None
    if entry is None:
        return Comparison(test_id, regime, "out of memory" if out_of_memory else "new")
    if entry.reason and all(value is None for value in entry.metrics.values()):
        return Comparison(
            test_id,
            regime,
            "out of memory" if out_of_memory else "not baselined",
            baseline_file=path,
            reason=entry.reason,
        )
    changes = _changes(entry.metrics, now, tolerance, None)
    for device, stored in sorted(entry.devices.items()):
        if now_devices and device in now_devices:
            changes += _changes(stored, now_devices[device], tolerance, device)
    verdicts = {change.verdict for change in changes}
    if out_of_memory:
        return Comparison(test_id, regime, "out of memory", changes, path)
    if "regressed" in verdicts:
        status = "regressed"
    elif "improved" in verdicts:
        status = "improved"
    elif verdicts <= {"unmeasured"}:
        status = "unmeasured"
    else:
        status = "ok"
    listed = entry.contributors
    held = {f"{name}{TEMP_SUFFIX}": 0 for name, program in entry.buffers.items() if not program.peak_bytes}
    held.update(listed)  # with each temp the baseline's buffers say was 0 B
    smallest = min(listed.values()) if len(listed) >= TOP_CONTRIBUTORS else None  # None: it listed every holder
    grew, grew_hidden = what_grew(held, contributors or {}, smallest=smallest) if status == "regressed" else ([], 0)
    grown = {program_of_temp(name) for name, _, _ in grew} - {None}
    names_grown = {name for name, _, _ in grew}
    return Comparison(
        test_id,
        regime,
        status,
        changes,
        str(entry.path),
        grew=grew,
        grew_hidden=grew_hidden,
        baseline_named_contributors=bool(entry.contributors),
        buffers={name: found for name, found in (buffers or {}).items() if name in grown},
        baseline_buffers={name: found for name, found in entry.buffers.items() if name in grown},
        lines={name: found for name, found in (lines or {}).items() if name in names_grown},
        baseline_lines={name: found for name, found in entry.lines.items() if name in names_grown},
    )


def _changes(
    stored: dict[str, float | int | None], now: dict[str, float | int | None], tolerance: Tolerance, device: str | None
) -> list[MetricChange]:
    changes = []
    for gated, allowance in tolerance.allowances.items():
        metric = gated
        if gated == "peak_bytes_in_use" and stored.get(gated) is None and stored.get(REQUESTED) is not None:
            metric = REQUESTED  # a baseline from before the allocator's count was stored: like for like
        baseline, current = stored.get(metric), now.get(metric)
        if baseline is None or current is None:
            changes.append(MetricChange(metric, baseline, current, allowance.describe(metric), "unmeasured", device))
            continue
        room = allowance.allowed(baseline)
        verdict = "regressed" if current - baseline > room else "improved" if baseline - current > room else "ok"
        changes.append(MetricChange(metric, baseline, current, allowance.describe(metric), verdict, device))
    return changes


def what_grew(
    before: dict[str, int], now: dict[str, int], top: int = 3, smallest: int | None = None
) -> tuple[list[tuple[str, int | None, int]], int]:
    """The contributors at the peak that hold more now than at the baseline's peak, most growth first,
    and how many more grew by less than SMALL_SHARE of the peak now (left out). One the baseline does
    not list held 0 B there where it listed every holder (`smallest` None), else at most `smallest`,
    the least it lists (its bytes there not known): it grew only if it holds more."""
    grown = [
        (name, before.get(name, None if smallest is not None else 0), size)
        for name, size in now.items()
        if size > before.get(name, smallest or 0)
    ]
    grown.sort(key=lambda item: (-(item[2] - (item[1] or 0)), item[0]))
    floor = SMALL_SHARE * sum(now.values())
    large = [item for item in grown if item[2] - (item[1] or 0) >= floor] or grown[:1]
    return large[:top], len(grown) - len(large)


def contributors_of(record: TestRecord) -> dict[str, int]:
    """Who held the memory at the record's peak (from its replayed trace)."""
    return dict(record.trace.at_peak or {}) if record.trace is not None else {}


def lines_of(record: TestRecord) -> dict[str, dict[str, int]]:
    """Per holder at the record's peak, the bytes each user's line made (an unreadable entry: none)."""
    return dict(record.trace.lines_at_peak or {}) if record.trace is not None else {}


_NOT_LISTED = "not among the baseline's largest"
"""What a contributor absent from the baseline's stored contributors held there: it may have held
less than the smallest of them, never "none" (which reads as "did not exist")."""


def program_of_temp(name: str) -> str | None:
    """The program whose temp a contributor is (`jit(step)` of `jit(step) temp`), or None."""
    return name[: -len(TEMP_SUFFIX)] if name.endswith(TEMP_SUFFIX) else None


def buffers_of(record: TestRecord) -> dict[str, ProgramBuffers]:
    """Each program's buffers at its peak, as the record holds them (an unreadable entry is left out)."""
    found = record.trace.buffers if record.trace is not None else None
    if found is None:
        return {}
    programs = {}
    for name, entry in found.items():
        try:
            programs.update(programs_from_json({name: entry}))
        except ValueError:
            continue  # `{"unknown": why}`: the program's buffers are not known
    return programs


def buffers_at_peak_of(record: TestRecord) -> dict[str, ProgramBuffers]:
    """The buffers of the programs whose temp or outputs held memory at the record's peak: what its
    baseline keeps."""
    holders = contributors_of(record)
    return {
        name: program
        for name, program in buffers_of(record).items()
        if name in holders or f"{name}{TEMP_SUFFIX}" in holders
    }


def _buffers_json(now: dict[str, ProgramBuffers], before: dict[str, ProgramBuffers]) -> dict[str, object]:
    return {
        name: {"now": program.to_json(), "baseline": before[name].to_json() if name in before else None}
        for name, program in sorted(now.items())
    }
