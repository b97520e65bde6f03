"""The session's closing section in the terminal: what a reviewer needs first (failures, regressions,
the largest tests, counts), then where things went. It takes the session's facts as plain data and
writes lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..compile_store import StoreUpdate
from ..gate.record import TestRecord, kept_cpu_sizes
from ..gate.targets import TargetTable
from ..model.explain import oom_lines, oom_summary
from ..model.side_by_side import SideBySide
from ..model.whatif import min_fraction_text
from ..units import format_size
from .report import capped, rows_for_review, terminal_table
from .targets import aligned, other_regime_notes, pivot_rows, reasons, target_lines, verdict_counts
from .text import terminal


@dataclass
class SummaryFacts:
    """What the summary shows: the records and what the session did with them."""

    device: str
    simulated: bool
    records: list[TestRecord]
    baselines_directory: str
    updating: bool = False
    strict: bool = False
    find_min_fraction: bool = False
    what_if: int | None = None
    isolated: dict[str, int] = field(default_factory=dict)  # regime label -> child processes started
    xdist_note: str = ""
    side_by_side: SideBySide | None = None
    baselines_written: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    stale_removed: list[str] = field(default_factory=list)  # by --devmem-update
    # by --devmem-update: (test id, regime, why)
    not_refreshed: list[tuple[str, str, str]] = field(default_factory=list)
    write_problems: list[str] = field(default_factory=list)
    report: str | None = None  # where the report was written
    autosaved: str | None = None
    compile_note: str = ""  # whose compile sized JAX's executables, where it is not the device's own
    tensorflow_problem: str | None = None
    targets: TargetTable | None = None  # --devmem-targets: every measured test on each target
    # the GPU or TPU sizer's: compiled, seconds, from_store, from_cache (None: no sizer sized anything)
    compile_counts: dict[str, float | int] | None = None
    compiler_store: str = ""  # where the compilers' entries are stored beside the baselines
    compile_caches: str = "pytest's cache"  # the disk caches the sizers read: pytest's, --devmem-cache-dir
    store_update: StoreUpdate | None = None  # what --devmem-update did to that store
    gated: tuple[str, ...] = ("peak_bytes_in_use",)  # the metrics the session's tolerance compares


PROBLEMS_SHOWN = 10
"""Files that could not be written, listed one a line without -v."""


class SessionSummary:
    """Writes the `device memory (pytest-devmem)` section once, at the end of the session."""

    def __init__(self, facts: SummaryFacts, terminalreporter: Any, everything: bool) -> None:
        self.facts = facts
        self.terminal = terminalreporter
        self.everything = everything  # -v: every row and every name

    def line(self, text: str, **markup: bool) -> None:
        """Every line of the section goes out here, escaped: test ids, trace labels and baseline
        fields cannot move the cursor, recolour or retitle the terminal, or start a line."""
        self.terminal.write_line(terminal(text), **markup)

    def write(self) -> None:
        facts = self.facts
        self.terminal.section("device memory (pytest-devmem)")
        self.line(f"device {facts.device}; {len(facts.records)} measured test(s)")
        shown, hidden = rows_for_review(facts.records, self.everything)
        for row in terminal_table(shown):
            self.line(row)
        if hidden:
            self.line(
                f"... and {hidden} more measured test(s), none failed, regressed or improved (-v or the report lists them all)"
            )
        self.sources()
        if facts.compile_note:
            self.line(f"JAX sizes: {facts.compile_note}")
            counts = facts.compile_counts
            if counts is not None:
                self.line(
                    f"JAX sizes: {counts.get('compiled', 0)} program(s) compiled for the target in "
                    f"{float(counts.get('seconds', 0)):.2f} s; {counts.get('from_store', 0)} from the compiler entries "
                    f"stored in {facts.compiler_store}, {counts.get('from_cache', 0)} from {facts.compile_caches}"
                )
            kept = [r.test_id for r in facts.records if kept_cpu_sizes(r)]
            if kept:
                self.line(
                    f"JAX sizes: {len(kept)} test(s) ran executables that kept the CPU compile's sizes "
                    f"(the report's trace notes say which and why): {capped(kept, self.everything)}",
                    yellow=True,
                )
        if facts.isolated:
            self.line(
                f"isolated regimes: {', '.join(facts.isolated)} ({sum(facts.isolated.values())} child process(es))"
            )
        self.analysis()
        self.targets()
        if facts.xdist_note:
            self.line(f"xdist: {facts.xdist_note}")
        self.side_by_side()
        self.baselines()
        memory = [r.test_id for r in facts.records if r.failed_by_devmem]
        if memory:
            self.line(
                f"MEMORY PROBLEMS: {len(memory)} test(s) failed by pytest-devmem's checks alone: "
                + capped(memory, self.everything),
                red=True,
                bold=True,
            )
        problems = facts.write_problems
        for problem in problems if self.everything else problems[:PROBLEMS_SHOWN]:
            self.line(f"pytest-devmem: {problem}", red=True, bold=True)
        if len(problems) > PROBLEMS_SHOWN and not self.everything:
            self.line(
                f"pytest-devmem: and {len(problems) - PROBLEMS_SHOWN} more problems (-v lists them all)",
                red=True,
                bold=True,
            )
        if facts.report is not None:
            self.line(f"report written to {facts.report}")
        if facts.autosaved is not None:
            self.line(f"report autosaved to {facts.autosaved} (devmem history reads that folder)")
        if facts.tensorflow_problem:
            self.line(f"pytest-devmem: {facts.tensorflow_problem}", yellow=True)

    def side_by_side(self) -> None:
        """Whether the suite's largest tests fit on one device at once, as the xdist workers sharing it may run them."""
        check = self.facts.side_by_side
        if check is None:
            return
        run = check.run
        count = len(check.tests)
        where = f"{self.facts.device}, each worker under {check.regime}"
        if check.fits:
            top = run.headline
            peak = (
                f": {format_size(top.peak_bytes_in_use)} in use at most, {format_size(top.peak_bytes_reserved)} held, of {format_size(top.capacity)}"
                if top is not None
                else ""
            )
            self.line(
                f"xdist: the {count} largest tests fit side by side on {where} (each at its peak at once){peak}: "
                + capped(check.tests, self.everything)
            )
            return
        self.line(
            f"xdist: the {count} largest tests do not fit side by side on {where}, as {count} workers sharing it may run them "
            f"(each at its peak at once); failing the session. At most {check.at_most} of them fit at once: run with -n {check.at_most}, "
            "or keep the largest tests on one worker (pytest-xdist's --dist loadgroup and xdist_group marks)",
            red=True,
            bold=True,
        )
        for process, index in sorted(check.owner.items()):
            self.line(f"  process {process}: {check.tests[index]}", red=True)
        oom = run.oom
        assert oom is not None
        for line in oom_lines(oom.to_json(), [d.to_json() for d in run.devices], check.regime, self.facts.device):
            self.line(f"  {line}", red=True)

    def targets(self) -> None:
        """--devmem-targets: a test per row (its session's regime), a target per column, and where each fits."""
        table = self.facts.targets
        if table is None:
            return
        reruns = sum(1 for target in table.targets if not target.session)
        self.line(
            f"on several targets (--devmem-targets; each measured test run again on {reruns} target(s), {table.children} child process(es)):"
        )
        for line in target_lines(table):
            self.line(f"  {line}")
        if table.skipped:
            self.line(f"  {table.skipped}", yellow=True)
        if table.results:
            rows, hidden = pivot_rows(table, self.everything)
            for row in aligned(rows):
                self.line(f"  {row}")
            if hidden:
                self.line(f"  ... and {hidden} more test(s) that fit everywhere (-v or the report lists them all)")
            for line in other_regime_notes(table):
                self.line(f"  {line}")
        for line in verdict_counts(table):
            self.line(f"  {line}")
        notes = reasons(table)
        if notes:
            self.line("  notes: " + capped(notes, self.everything, separator="; "))

    def sources(self) -> None:
        facts = self.facts
        notes = sorted(
            {
                f"{name}: {reading.note}"
                for r in facts.records
                for name, reading in r.sources.items()
                if not reading.available and not reading.unused and reading.note
            }
        )
        if facts.simulated:
            notes.append("nvml: not used, the device is simulated")
        if notes:
            self.line("sources not measuring here: " + "; ".join(notes))

    def analysis(self) -> None:
        facts, records = self.facts, self.facts.records
        failed = [r for r in records if r.oom]
        if failed:
            kinds = capped([f"{r.test_id} ({oom_summary(r.oom)})" for r in failed], self.everything)
            memory = "device or host" if any(r.oom.get("host") for r in failed) else "device"  # type: ignore[union-attr]
            self.line(f"out of {memory} memory: {len(failed)} test(s): {kinds}", red=True)
        if facts.find_min_fraction:
            self.line(f"smallest prealloc fraction that passes (traces replayed on {facts.device}):")
            for r in records:
                if r.analysis is not None and r.analysis.min_fraction is not None:
                    self.line(f"  {r.test_id} [{r.regime}]: " + min_fraction_text(r.analysis.min_fraction.value))
        if facts.what_if is not None:
            size = format_size(facts.what_if)
            answers = [(r, r.analysis.what_if) for r in records if r.analysis is not None and r.analysis.what_if]
            failing = [(r, answer) for r, answer in answers if not answer.ok]
            self.line(
                f"what if the device had {size}: {len(failing)} of {len(answers)} replayed test(s) would run out of memory"
            )
            for r, answer in failing:
                self.line(f"  {r.test_id} [{r.regime}]: {answer.message}")

    def baselines(self) -> None:
        facts, everything = self.facts, self.everything
        updating = facts.updating
        statuses: dict[str, list[str]] = {}
        for record in facts.records:
            if record.baseline is not None:
                statuses.setdefault(str(record.baseline["status"]), []).append(f"{record.test_id} [{record.regime}]")
        counts = ", ".join(f"{len(ids)} {status}" for status, ids in sorted(statuses.items()))
        self.line(f"baselines ({facts.baselines_directory}): {counts or 'none compared'}")
        if statuses and "peak_bytes_in_use" not in facts.gated:  # a spec gates exactly what it names
            self.line(
                f"compared: {', '.join(facts.gated)} only, as --devmem-tolerance names; "
                "peak_bytes_in_use is not compared (name it too to gate it)"
            )
        if statuses.get("improved") and not updating:
            self.line(
                "improved beyond tolerance (refresh with --devmem-update): "
                + capped(sorted(statuses["improved"]), everything)
            )
        if statuses.get("new") and not updating:
            self.line(
                "new, no baseline yet (record with --devmem-update): " + capped(sorted(statuses["new"]), everything)
            )
        reasons = [
            f"{r.test_id} [{r.regime}]: {r.baseline.get('reason')}"
            for r in facts.records
            if r.baseline is not None and r.baseline.get("status") == "not baselined"
        ]
        if reasons and not updating:
            self.line(
                "not baselined, and why (record with --devmem-update once they pass): "
                + capped(sorted(reasons), everything, separator="; ")
            )
        if facts.baselines_written:
            self.line(
                f"baselines written: {len(facts.baselines_written)} file(s): "
                + capped(facts.baselines_written, everything)
            )
        if facts.not_refreshed:
            self.line(
                "not refreshed (each keeps the baseline it had, or is stored with why it has none): "
                + capped(
                    [f"{test_id} [{regime}]: {why}" for test_id, regime, why in facts.not_refreshed],
                    everything,
                    separator="; ",
                )
            )
        update = facts.store_update
        if update is not None and (update.written or update.removed or update.kept):
            self.line(
                f"compiler entries stored in {facts.compiler_store}: {len(update.written)} written, "
                f"{len(update.removed)} removed (no stored baseline names them), {update.kept} in all"
            )
        if facts.stale_removed:
            self.line(
                "stale baselines removed, for tests that no longer exist: " + capped(facts.stale_removed, everything)
            )
        if facts.stale:
            verdict = (
                "failing the session (--devmem-strict)"
                if facts.strict
                else "--devmem-update removes them; --devmem-strict fails the session"
            )
            self.line(
                f"stale baselines, for tests that no longer exist ({verdict}): " + capped(facts.stale, everything)
            )
