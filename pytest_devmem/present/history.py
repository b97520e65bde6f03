"""Memory over many commits: reports lined up by git's ancestry (else by time), tests x commits, and the steps where a
test's peak moved beyond the tolerance. pandas (imported here only) does the table work;
matplotlib (only for `-o trend.png`) draws the tests that moved. No pytest here.

A test is lined up only with itself under the same regime on the same device class: figures of a
simulated 16 GiB device and of an H100 are different series, never one step of +3900%."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..gate.record import headline_peak
from ..gate.tolerance import Tolerance, format_metric, format_metrics_apart
from ..model.explain import oom_summary
from ..model.pool.policy import canonical_label
from ..spreadsheet import csv_table
from .autosave import AUTOSAVE_DIR
from .plot import pyplot, save_png
from .report import ReportFile, read_report
from .shard_merge import merge_reports, shard_run, unique_records
from .text import markdown_code, markdown_rows, matplotlib_text

METRIC = "peak_bytes_in_use"
OOM = "out_of_memory"


@dataclass(frozen=True)
class Step:
    """A test whose peak moved between two consecutive reports beyond the tolerance."""

    test: str
    before_commit: str
    commit: str
    before: float
    now: float
    oom_before: str = ""  # the run before ran out of memory: its kind (`oom_summary`); "" where it did not
    oom_now: str = ""

    @property
    def text(self) -> str:
        if self.oom_before or self.oom_now:  # a peak cut short by an out-of-memory is no figure to step from or to
            before, now = format_metrics_apart(METRIC, self.before, self.now)
            before = f"out of memory: {self.oom_before}" if self.oom_before else before
            now = f"out of memory: {self.oom_now}" if self.oom_now else now
            return f"{before} → {now} at {self.commit}"
        change = self.now - self.before
        percent = f" ({change / self.before:+.1%})" if self.before else ""
        before, now = format_metrics_apart(METRIC, self.before, self.now)
        return f"{before} → {now}{percent} at {self.commit}"


def report_files(inputs: Sequence[Path]) -> list[Path]:
    """The JSON reports named, or found (recursively) in the directories named; with none named,
    those --devmem-autosave kept in .devmem/ here."""
    if not inputs:
        if not Path(AUTOSAVE_DIR).is_dir():
            raise InputError(
                f"no reports: name JSON reports (--devmem-report=FILE.json) or directories that hold them, or run pytest with --devmem-autosave to keep every run's report in {AUTOSAVE_DIR}/"
            )
        inputs = [Path(AUTOSAVE_DIR)]
    files: list[Path] = []
    for path in inputs:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.json") if p.is_file())
        elif os.path.lexists(path):
            files.append(path)  # read_report says what is wrong with it, if anything
        else:
            raise InputError(f"{path}: no such file or directory")
    if not files:
        raise InputError("no reports: name JSON reports (--devmem-report=FILE.json) or directories that hold them")
    return files


def runs(files: Sequence[Path]) -> list[tuple[Path, ReportFile]]:
    """Each run's report, in the order given: the reports of one sharded run (shards of one
    commit and CI run, as their sessions say) merged into one, as `devmem merge` does (refusing
    shards that disagree), so a commit's column holds the whole suite."""
    found: list[tuple[Path, ReportFile | None, object]] = []
    shards: dict[object, list[Path]] = {}
    for path in files:
        report = read_report(path)
        key: object = shard_run(report.session)
        if key is None:
            records = list(unique_records(report).values())  # a test twice: the rule compare and merge follow
            found.append((path, ReportFile(report.path, report.session, records), None))
            continue
        if key not in shards:
            shards[key] = []
            found.append((path, None, key))
        shards[key].append(path)
    result = []
    for path, read, key in found:
        if read is None:
            merged = merge_reports(shards[key])
            read = ReportFile(path, merged["session"], merged["records"])  # type: ignore[arg-type]
        result.append((path, read))
    return result


def load_frame(files: Sequence[Path]) -> Any:
    """One row per (report, measured test): commit, time, test (id and regime), device class, peak."""
    try:
        import pandas as pd  # the history extra, optional
    except ImportError:
        raise InputError("devmem history needs pandas (pip install 'pytest-devmem[history]')") from None

    rows = []
    for index, (path, report) in enumerate(runs(files)):
        session = report.session
        commit = str(session.get("commit") or path.stem)[:12] + (" (dirty)" if session.get("dirty") else "")
        time = str(session.get("time") or "")
        for record in report.records:
            peak = headline_peak(record)
            if peak is None:
                continue
            rows.append(
                {
                    "order": index,
                    "time": time,
                    "commit": commit,
                    "sha": str(session.get("commit") or ""),
                    "device_class": str(record.get("device_class", "")),
                    "test": f"{record['test_id']} [{canonical_label(str(record.get('regime', 'prealloc')))}]",
                    METRIC: float(peak),
                    OOM: oom_summary(oom) if isinstance(oom := record.get("oom"), dict) and oom else "",
                }
            )
    if not rows:
        raise InputError("the reports hold no measured test")
    frame = pd.DataFrame(rows)
    if frame["device_class"].nunique() > 1:  # one series per device class: never a step from one to another
        frame["test"] = frame["test"] + " on " + frame["device_class"]
    placed = git_order(list(dict.fromkeys(frame["sha"])))
    frame["place"] = frame["sha"].map(placed) if isinstance(placed, dict) else 0
    frame = frame.sort_values(["place", "time", "order"], kind="stable")
    frame.attrs["order"] = GIT_ORDER if isinstance(placed, dict) else placed
    return frame


GIT_ORDER = "git"
"""The frame's `order` where git placed every commit; else `run time: WHY`."""


def git_order(commits: Sequence[str]) -> dict[str, int] | str:
    """Each commit's place in git's ancestry here, parents first; else why run time orders them."""
    if "" in commits:
        return "run time: a report carries no commit"
    try:
        known = subprocess.run(
            ["git", "cat-file", "--batch-check"], input="\n".join(commits), capture_output=True, text=True, timeout=60
        )
        missing = [line.split()[0] for line in known.stdout.splitlines() if line.endswith(" missing")]
        if known.returncode or missing:
            why = f"does not know commit {missing[0][:12]}" if missing else f"says {known.stderr.strip()[:200]}"
            return f"run time: git {why} here (run devmem history in the clone that holds the commits)"
        listed = subprocess.run(
            ["git", "rev-list", "--topo-order", "--reverse", *commits, "--"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"run time: git could not be run ({exc})"
    places = {sha: place for place, sha in enumerate(listed.stdout.split())}
    return (
        {commit: places[commit] for commit in commits}
        if all(c in places for c in commits)
        else "run time: git could not order the commits"
    )


def device_classes(frame: Any) -> list[str]:
    """The device classes the reports measured on, sorted."""
    return sorted(str(name) for name in frame["device_class"].unique())


def pivot(frame: Any, values: str = METRIC) -> Any:
    """Tests x commits (in the frame's order), the peak in each cell (or, with `values=OOM`, the kind of
    out-of-memory the run ended in, "" where none)."""
    commits = list(dict.fromkeys(frame["commit"]))
    table = frame.pivot_table(index="test", columns="commit", values=values, aggfunc="last")
    return table.reindex(columns=commits)


def steps(table: Any, tolerance: Tolerance, ooms: Any = None) -> list[Step]:
    """Each move of a test's peak between consecutive commits where it was measured, beyond the
    tolerance, and each run into or out of an out-of-memory (`ooms`, `pivot(frame, OOM)`)."""
    allowance = tolerance.allowances.get(METRIC)
    found = []
    for test, row in table.iterrows():
        measured = row.dropna()
        kinds = ooms.loc[test] if ooms is not None else {}
        for (before_commit, before), (commit, now) in zip(measured.items(), list(measured.items())[1:]):
            room = allowance.allowed(before) if allowance is not None else 0.0
            oom_before, oom_now = (
                kind if isinstance(kind := kinds.get(c), str) else "" for c in (before_commit, commit)
            )
            if abs(now - before) > room or oom_before != oom_now:
                found.append(
                    Step(str(test), str(before_commit), str(commit), float(before), float(now), oom_before, oom_now)
                )
    return found


def markdown(
    table: Any,
    moved: list[Step],
    tolerance: Tolerance,
    last: int = 8,
    classes: Sequence[str] = (),
    order: str = GIT_ORDER,
) -> str:
    """For a job summary: what moved, then the peaks of the tests that moved over the last commits."""
    commits = list(table.columns)
    lines = [
        f"### Device memory history: {len(commits)} commit(s), {len(table)} test(s), {len({s.test for s in moved})} moved",
        "",
        f"Tolerance: `{tolerance.spec}`.",
        "Commits in git's order (each after its parents)."
        if order == GIT_ORDER
        else f"Commits in run-time order, not git's: {order.removeprefix('run time: ')}.",
    ]
    if len(classes) == 1:
        lines.append(f"Device class: {markdown_code(classes[0])}.")
    elif classes:
        lines.append(
            "Device classes: "
            + ", ".join(markdown_code(name) for name in classes)
            + " (each test is lined up within its own class)."
        )
    lines.append("")
    if not moved:
        lines.append("No test's peak moved beyond the tolerance.")
        return "\n".join(lines) + "\n"
    lines += markdown_rows(("test", "step"), [(step.test, step.text) for step in moved])
    shown = commits[-last:]
    ooms = {(s.test, s.before_commit): s.oom_before for s in moved} | {(s.test, s.commit): s.oom_now for s in moved}
    peaks = []
    for test in dict.fromkeys(step.test for step in moved):
        row = table.loc[test]
        cells = [
            "—"  # NaN: not measured there
            if row[c] != row[c]
            else ("out of memory" if ooms.get((test, c)) else format_metric(METRIC, row[c]))
            for c in shown
        ]
        peaks.append((test, *cells))
    lines += ["", *markdown_rows(("test", *map(str, shown)), peaks)]
    return "\n".join(lines) + "\n"


def history_json(
    table: Any, moved: list[Step], tolerance: Tolerance, classes: Sequence[str] = (), order: str = GIT_ORDER
) -> str:
    """For tools: the commits in order (`order`: git's, or run time and why), each test's peak per commit (None where it was not
    measured), and the steps that moved beyond the tolerance."""
    commits = [str(c) for c in table.columns]
    document = {
        "format": "pytest-devmem-history",
        "version": 1,
        "metric": METRIC,
        "tolerance": tolerance.spec,
        "device_classes": list(classes),
        "order": order,
        "commits": commits,
        "tests": {
            str(test): {c: (None if row[c] != row[c] else row[c]) for c in table.columns}  # NaN: not measured there
            for test, row in table.iterrows()
        },
        "moved": [
            {
                "test": s.test,
                "before_commit": s.before_commit,
                "commit": s.commit,
                "before": s.before,
                "now": s.now,
                **({"oom_before": s.oom_before} if s.oom_before else {}),
                **({"oom_now": s.oom_now} if s.oom_now else {}),
            }
            for s in moved
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def history_csv(table: Any, moved: list[Step]) -> str:
    """For spreadsheets and pandas: one line per test and commit where it was measured, its peak, and
    whether it moved beyond the tolerance at that commit."""
    steps = {(s.test, s.commit) for s in moved}
    rows = [
        [str(test), str(commit), row[commit], (str(test), str(commit)) in steps]
        for test, row in table.iterrows()
        for commit in table.columns
        if row[commit] == row[commit]
    ]
    return csv_table(["test", "commit", METRIC, "moved"], rows)


def check_trend_path(path: str | os.PathLike[str]) -> None:
    """InputError, before any work, when `path` cannot take the trend picture."""
    if Path(path).suffix.lower() != ".png":
        raise InputError(f"cannot draw {os.fspath(path)!r}: the trend picture is a .png")
    if os.path.isdir(path):
        raise InputError(f"cannot draw {os.fspath(path)!r}: it is a directory")


def draw_trend(table: Any, moved: list[Step], path: str | os.PathLike[str]) -> None:
    """The tests that moved, their peaks over the commits, as a PNG."""
    try:
        plt = pyplot()
    except ValueError:
        raise InputError("a trend picture needs matplotlib (pip install 'pytest-devmem[plot]')") from None
    check_trend_path(path)

    figure, axes = plt.subplots(figsize=(10, 5))
    tests = list(dict.fromkeys(step.test for step in moved)) or list(table.index[:5])
    commits = [matplotlib_text(str(commit)) for commit in table.columns]
    for test in tests:
        axes.plot(commits, [value / 2**20 for value in table.loc[test]], marker="o", label=matplotlib_text(str(test)))
    axes.set_ylabel("peak in use (MiB)")
    axes.set_xlabel("commit")
    axes.set_title("Tests whose peak moved" if moved else "No test moved: the first tests")
    axes.legend(fontsize=7)
    figure.autofmt_xdate()
    figure.tight_layout()
    save_png(figure, path, dpi=100)
