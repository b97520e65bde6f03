"""The `devmem` command: compare two sets of measurements, list baselines, replay and draw traces.

    devmem compare BASE NEW [--tolerance SPEC] [--all]   exit 1 when anything regressed
    devmem show [DIR]
    devmem replay TRACE --mode M [--fraction F] [--device D]   exit 1 when the trace does not fit
    devmem plot REPORT|TRACE -o FILE.png|FILE.html [--test ID]
    devmem history [REPORT...|DIR] [--tolerance SPEC] [-o trend.png]   exit 1 when a test moved (default: .devmem/)
    devmem --version

BASE and NEW are each a JSON report (`--devmem-report=FILE.json`), a baseline directory, or one
baseline file. Measurements are matched by (test id, regime, device class); a simulated device,
a GPU model and a CPU backend are different classes and never compared. Exit status: 0 no
regression, 1 regression, 2 bad input. This module never imports pytest or the plugin.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .gate.baseline import BaselineEntry, Comparison, compare, figure_problem, json_files, load_json, read_file
from .errors import DevmemError
from .model.pool.policy import canonical_label
from .present.autosave import AUTOSAVE_DIR
from .present.report import FORMAT as REPORT_FORMAT
from .present.report import VERSION as REPORT_VERSION
from .present.report import markdown_cell
from .gate.tolerance import DEFAULT_TOLERANCE, METRICS, TOLERANCE_HELP, format_metric, parse_tolerance

if TYPE_CHECKING:
    from .model.trace import Trace

Key = tuple[str, str, str]  # test id, regime, device class


class InputError(DevmemError, ValueError):
    """An input path that is neither a report nor baselines."""


@dataclass(frozen=True)
class Measurement:
    metrics: dict[str, float | int | None]
    versions: dict[str, str]
    reason: str = ""  # a baseline entry without figures: why (the test failed or was skipped at update)
    contributors: dict[str, int] = field(default_factory=dict)  # who held the memory at the peak


def load(path: Path) -> dict[Key, Measurement]:
    """Measurements from a JSON report, a baseline file, or a directory of baseline files."""
    if path.is_dir():
        files = json_files(path)
        if not files:
            raise InputError(f"{path}: a directory with no baseline files (*.json) in it: nothing to compare against")
        found: dict[Key, Measurement] = {}
        for file in files:
            found.update(_from_baseline(read_file(file)))
        return found
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    _, document = load_json(path)
    if isinstance(document, dict) and "records" in document and "session" in document:
        return _from_report(path, document)
    return _from_baseline(read_file(path))


def _from_baseline(entries: list[BaselineEntry]) -> dict[Key, Measurement]:
    return {(e.test_id, e.regime, e.device_class): Measurement(e.metrics, e.versions, e.reason, e.contributors) for e in entries}


def _from_report(path: Path, document: dict) -> dict[Key, Measurement]:
    if "format" in document and (document.get("format") != REPORT_FORMAT or document.get("version") != REPORT_VERSION):
        raise InputError(f"{path}: a {document.get('format')!r} version {document.get('version')!r} report; this devmem reads {REPORT_FORMAT!r} version {REPORT_VERSION}")
    records = document.get("records")
    if not isinstance(records, list):
        raise InputError(f"{path}: a pytest-devmem report needs a list of \"records\"")
    session = document.get("session")
    if not isinstance(session, dict):
        raise InputError(f"{path}: \"session\" must be an object, not {type(session).__name__}")
    versions = session.get("versions", {})
    if not isinstance(versions, dict):
        raise InputError(f"{path}: \"session\".\"versions\" must be an object")
    found = {}
    for index, record in enumerate(records):
        if not isinstance(record, dict) or not all(isinstance(record.get(name), str) for name in ("test_id", "regime", "device_class")):
            raise InputError(f"{path}: record {index} lacks test_id, regime or device_class (as text)")
        key = (record["test_id"], canonical_label(record["regime"]), record["device_class"])
        if record.get("peak_bytes_in_use") is None:
            continue  # nothing measured it; a failed test that was measured counts (the gate may be why it failed)
        metrics = {name: record.get(name) for name in METRICS}
        for name, value in metrics.items():
            problem = figure_problem(name, value)
            if problem:
                raise InputError(f"{path}: record {index} ({record['test_id']}): {problem}")
        at_peak = (record.get("trace") or {}).get("at_peak") if isinstance(record.get("trace"), dict) else None
        contributors = {str(name): size for name, size in at_peak.items() if isinstance(size, int) and not figure_problem("bytes", size)} if isinstance(at_peak, dict) else {}
        found[key] = Measurement(metrics, {str(k): str(v) for k, v in versions.items()}, contributors=contributors)
    return found


VERDICT_MARK = {"regressed": "❌ regressed", "improved": "✅ improved", "ok": "ok", "unmeasured": "n/a", "new": "🆕 new", "missing": "⚠️ not run"}


def compare_tables(base: dict[Key, Measurement], new: dict[Key, Measurement], tolerance_spec: str, show_all: bool) -> tuple[str, bool]:
    """The Markdown report of NEW against BASE, and whether anything regressed."""
    tolerance = parse_tolerance(tolerance_spec)
    rows: list[tuple[str, ...]] = []
    counts: dict[str, int] = {}
    growth: list[str] = []
    for key in sorted(set(base) | set(new)):
        test_id, regime, device_class = key
        if key not in base:
            counts["new"] = counts.get("new", 0) + 1
            rows.append((test_id, regime, device_class, "peak_bytes_in_use", "—", format_metric("peak_bytes_in_use", new[key].metrics.get("peak_bytes_in_use")), "—", VERDICT_MARK["new"]))
            continue
        if key not in new:
            counts["missing"] = counts.get("missing", 0) + 1
            rows.append((test_id, regime, device_class, "peak_bytes_in_use", format_metric("peak_bytes_in_use", base[key].metrics.get("peak_bytes_in_use")), "—", "—", VERDICT_MARK["missing"]))
            continue
        entry = BaselineEntry(test_id, regime, base[key].metrics, "", base[key].versions, Path("BASE"), reason=base[key].reason, contributors=base[key].contributors)
        comparison: Comparison = compare(entry, test_id, regime, new[key].metrics, tolerance, new[key].contributors)
        if comparison.grew:
            growth.append(f"- `{markdown_cell(test_id)}` [{regime}]: {comparison.growth_text()}")
        counts[comparison.status] = counts.get(comparison.status, 0) + 1
        if comparison.status == "not baselined":
            now = format_metric("peak_bytes_in_use", new[key].metrics.get("peak_bytes_in_use"))
            rows.append((test_id, regime, device_class, "peak_bytes_in_use", "—", now, "—", f"⚠️ not baselined: {comparison.reason}"))
            continue
        for change in comparison.changes:
            if change.verdict == "ok" and not show_all:
                continue
            rows.append((test_id, regime, device_class, change.metric, format_metric(change.metric, change.baseline), format_metric(change.metric, change.now), change.delta_text, VERDICT_MARK[change.verdict]))
    rows.sort(key=lambda row: row[-1] != VERDICT_MARK["regressed"])  # regressions first, then as sorted
    summary = ", ".join(f"{counts[status]} {status}" for status in ("regressed", "improved", "ok", "unmeasured", "new", "not baselined", "missing") if counts.get(status))
    lines = [f"### Device memory: {summary or 'nothing to compare'}", "", f"Tolerance: `{tolerance_spec}`.", ""]
    if rows:
        lines += ["| test | regime | device | metric | baseline | now | Δ | verdict |", "|---|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows]
    elif counts:
        lines.append("Every compared test is within tolerance.")
    if growth:
        lines += ["", "What grew at the peak:", *growth]
    return "\n".join(lines) + "\n", bool(counts.get("regressed"))


def show_table(measurements: dict[Key, Measurement]) -> str:
    lines = ["| test | regime | device | peak in use | peak reserved | fragmentation | versions |", "|---|---|---|---|---|---|---|"]
    for (test_id, regime, device_class), m in sorted(measurements.items()):
        versions = ", ".join(f"{name} {version}" for name, version in sorted(m.versions.items()) if name in ("jax", "tensorflow", "tensorflow-cpu", "pytest-devmem"))
        lines.append(
            f"| {markdown_cell(test_id)} | {markdown_cell(regime)} | {markdown_cell(device_class)} | {format_metric('peak_bytes_in_use', m.metrics.get('peak_bytes_in_use'))} | "
            f"{format_metric('peak_bytes_reserved', m.metrics.get('peak_bytes_reserved'))} | {format_metric('fragmentation', m.metrics.get('fragmentation'))} | {versions} |"
        )
    return "\n".join(lines) + "\n"


def replay_table(path: Path, mode: str, fraction: str | None, device_spec: str) -> tuple[str, bool]:
    """What a regime makes of a recorded trace (RMM-style CSV), as Markdown; and whether it fitted."""
    from .model.pool import Policy
    from .model.replay import replay_figures
    from .units import format_size

    policy = Policy.of(mode, fraction)
    capacity, name = _device_capacity(device_spec)
    trace = _read_trace(path)
    figures = replay_figures(trace, policy, capacity)
    rows = [
        ("events", str(figures.events), ""),
        ("peak_live_bytes (asked)", str(trace.peak_live_bytes()), format_size(trace.peak_live_bytes())),
        ("peak_bytes_in_use", str(figures.peak_bytes_in_use), format_size(figures.peak_bytes_in_use)),
        ("peak_bytes_reserved", str(figures.peak_bytes_reserved), format_size(figures.peak_bytes_reserved)),
        ("fragmentation", "n/a" if figures.fragmentation is None else f"{figures.fragmentation:.4f}", ""),
    ]
    for source, share in sorted(figures.by_source.items()):
        rows.append((f"{source}: peak live", str(share.peak_live_bytes), format_size(share.peak_live_bytes)))
    lines = [f"### Trace {path} replayed under regime {policy.label} on {name}", "", "| figure | value | readable |", "|---|---|---|"]
    lines += [f"| {figure} | {value} | {readable} |" for figure, value, readable in rows]
    if figures.out_of_memory:
        lines += ["", "Out of memory: " + figures.out_of_memory.splitlines()[0]]
    return "\n".join(lines) + "\n", figures.out_of_memory is None


def plot_input(path: Path, test: str | None, mode: str | None, fraction: str | None, device_spec: str | None) -> tuple[object, str]:
    """The timeline to draw and its title: from a trace file (with the regime and device given), or
    from a JSON report's record (its regime and device; its trace written by --devmem-traces)."""
    from .model.pool import Policy
    from .model.timeline import build_timeline

    if path.suffix.lower() == ".csv":
        policy = Policy.of(mode or "prealloc", fraction)
        capacity, name = _device_capacity(device_spec or "sim")
        trace = _read_trace(path)
        return build_timeline(trace, policy, capacity, name), f"{path.name} under {policy.label} on {name}"
    _, document = load_json(path)
    if not isinstance(document, dict) or not isinstance(document.get("records"), list) or not isinstance(document.get("session"), dict):
        raise InputError(f"{path}: not a pytest-devmem JSON report (--devmem-report=FILE.json) nor a trace (.csv)")
    records = [r for r in document["records"] if isinstance(r, dict) and isinstance(r.get("test_id"), str)]
    if test:
        records = [r for r in records if test in r["test_id"]]
    traced = [r for r in records if isinstance(r.get("trace"), dict) and isinstance(r["trace"].get("file"), str)]
    if not traced:
        which = f" matching {test!r}" if test else ""
        raise InputError(f"{path}: no record{which} has a trace file: run pytest with --devmem-traces=DIR and --devmem-report")
    record = max(traced, key=lambda r: r.get("peak_bytes_in_use") or 0)
    session = document["session"]
    capacity = session.get("device_capacity_bytes")
    if not isinstance(capacity, int) or capacity <= 0:
        raise InputError(f"{path}: the session's device_capacity_bytes is missing or not a positive number")
    trace = _read_trace(Path(record["trace"]["file"]))
    policy = Policy.from_label(str(record.get("regime", "prealloc")))
    device_name = str(session.get("device", "device"))
    return build_timeline(trace, policy, capacity, device_name), f"{record['test_id']} under {policy.label} on {device_name}"


def _device_capacity(spec: str) -> tuple[int, str]:
    """The capacity and name of the device a spec names; a real GPU is let go at once."""
    from .model.device import open_device

    device = open_device(spec)
    try:
        return device.capacity, device.name
    finally:
        close = getattr(device, "close", None)
        if close is not None:
            close()


def _read_trace(path: Path) -> Trace:
    from .model.trace import Trace

    try:
        return Trace.read_csv(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None


def history_command(inputs: Sequence[Path], tolerance_spec: str, output: Path | None) -> int:
    from .present import history

    tolerance = parse_tolerance(tolerance_spec)
    frame = history.load_frame(history.report_files(inputs))
    table = history.pivot(frame)
    moved = history.steps(table, tolerance)
    sys.stdout.write(history.markdown(table, moved, tolerance, classes=history.device_classes(frame)))
    if output is not None:
        history.draw_trend(table, moved, output)
        print(f"\nwrote {output}")
    return 1 if moved else 0


def main(argv: Sequence[str] | None = None) -> int:
    from . import __version__

    parser = argparse.ArgumentParser(prog="devmem", description="Compare and list pytest-devmem measurements.")
    parser.add_argument("--version", action="version", version=f"%(prog)s (pytest-devmem) {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    compare_parser = commands.add_parser("compare", help="Compare NEW against BASE; exit 1 on regression")
    compare_parser.add_argument("base", type=Path, help="Baseline directory, baseline file or JSON report")
    compare_parser.add_argument("new", type=Path, help="Baseline directory, baseline file or JSON report")
    compare_parser.add_argument("--tolerance", default=DEFAULT_TOLERANCE, help=f"Allowed change ({TOLERANCE_HELP.replace('%', '%%')}); default {DEFAULT_TOLERANCE.replace('%', '%%')}")
    compare_parser.add_argument("--all", action="store_true", help="Also list metrics within tolerance")
    show_parser = commands.add_parser("show", help="List stored baselines")
    show_parser.add_argument("directory", type=Path, nargs="?", default=Path("baselines"), help="Baseline directory (default: baselines)")
    replay_parser = commands.add_parser("replay", help="Replay a recorded trace (--devmem-traces) under a regime; exit 1 if it does not fit")
    replay_parser.add_argument("trace", type=Path, help="Trace file (RMM-style CSV)")
    replay_parser.add_argument("--mode", required=True, help="prealloc, fraction, ondemand (platform) or growth")
    replay_parser.add_argument("--fraction", default=None, help="Fraction of the device, in (0, 1]")
    replay_parser.add_argument("--device", default="sim", help="Device whose capacity to use: sim, sim:SIZE, cuda:N (default: sim, 16 GiB)")
    plot_parser = commands.add_parser("plot", help="Draw a test's memory over its events and the pool's map at its peak, as PNG or HTML")
    plot_parser.add_argument("input", type=Path, help="A JSON report with traces (--devmem-report and --devmem-traces), or one trace (.csv)")
    plot_parser.add_argument("-o", "--output", type=Path, required=True, help="FILE.png (needs matplotlib) or FILE.html (self-contained)")
    plot_parser.add_argument("--test", default=None, help="Part of the test id to draw (default: the record with the largest peak)")
    plot_parser.add_argument("--mode", default=None, help="For a trace: the regime (default prealloc)")
    plot_parser.add_argument("--fraction", default=None, help="For a trace: the fraction, in (0, 1]")
    plot_parser.add_argument("--device", default=None, help="For a trace: the device whose capacity to use (default sim, 16 GiB)")
    history_parser = commands.add_parser("history", help="Line up reports of many commits: tests x commits, and the steps where a peak moved")
    history_parser.add_argument("inputs", type=Path, nargs="*", help=f"JSON reports, or directories holding them (default: {AUTOSAVE_DIR}/, where --devmem-autosave keeps every run's report)")
    history_parser.add_argument("--tolerance", default=DEFAULT_TOLERANCE, help=f"What counts as a move ({TOLERANCE_HELP.replace('%', '%%')}); default {DEFAULT_TOLERANCE.replace('%', '%%')}")
    history_parser.add_argument("-o", "--output", type=Path, default=None, help="Also draw the tests that moved to FILE.png (needs matplotlib)")
    args = parser.parse_args(argv)
    try:
        if args.command == "history":
            return history_command(args.inputs, args.tolerance, args.output)
        if args.command == "plot":
            from .present.plot import write_plot

            timeline, title = plot_input(args.input, args.test, args.mode, args.fraction, args.device)
            write_plot(timeline, args.output, title)  # type: ignore[arg-type]
            print(f"wrote {args.output}")
            return 0
        if args.command == "replay":
            text, fitted = replay_table(args.trace, args.mode, args.fraction, args.device)
            sys.stdout.write(text)
            return 0 if fitted else 1
        if args.command == "compare":
            parse_tolerance(args.tolerance)  # a bad tolerance is reported before any file is read
            text, regressed = compare_tables(load(args.base), load(args.new), args.tolerance, args.all)
            sys.stdout.write(text)
            return 1 if regressed else 0
        sys.stdout.write(show_table(load(args.directory)))
        return 0
    except (DevmemError, ValueError) as exc:
        print(f"devmem: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
