"""The `devmem` command: compare two sets of measurements, list baselines, replay and draw traces.

    devmem compare BASE NEW... [--tolerance SPEC] [--all] [--partial] [--device-class C | --all-classes] [--sort KEY] [--columns A,B]   exit 1 when anything regressed
    devmem merge REPORT... -o MERGED.json [--baselines DIR] [--same-run] [--partial]   one report from CI shards' reports
    devmem show [DIR]
    devmem replay TRACE [--mode M] [--fraction F] [--device D]   exit 1 when the trace does not fit
    devmem plot REPORT|TRACE -o FILE.png|FILE.html [--test ID]
    devmem plot REPORT --targets -o FILE.png|FILE.html [--test ID]   every test on every target
    devmem history [REPORT...|DIR] [--tolerance SPEC] [-o trend.png]   exit 1 when a test moved (default: .devmem/)
    devmem --version

BASE and NEW are each a JSON report (`--devmem-report=FILE.json`), a baseline directory, or one
baseline file; several NEW reports (CI shards) are merged first, as `devmem merge` does. Measurements are matched by (test id, regime, device class); a simulated device,
a GPU model and a CPU backend are different classes and never compared. Exit status: 0 no
regression, 1 regression, 2 bad input. This module never imports pytest or the plugin.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import DevmemError
from .files import read_json
from .gate.baseline import BaselineEntry, read_directory, read_file
from .gate.compare import Key, Measured, verdicts
from .gate.tolerance import DEFAULT_TOLERANCE, METRICS, TOLERANCE_HELP, format_metric, parse_tolerance
from .present.autosave import AUTOSAVE_DIR
from .present.comparison import (
    COLUMNS,
    SORT_KEYS,
    compare_csv,
    compare_json,
    compare_markdown,
    parse_columns,
    sort_verdicts,
)
from .present.report import ReportFile, read_report
from .present.text import markdown, terminal, terminal_lines

if TYPE_CHECKING:
    from .model.frameworks import AllocatorSetup
    from .model.machine import MachineSpec
    from .model.pool import Policy
    from .model.trace import Trace


class InputError(DevmemError, ValueError):
    """An input path that is neither a report nor baselines."""


def load(path: Path) -> dict[Key, Measured]:
    """Measurements from a JSON report, a baseline file, or a directory of baseline files."""
    if path.is_dir():
        entries = read_directory(path)
        if not entries:
            raise InputError(f"{path}: a directory with no baseline files (*.json) in it: nothing to compare against")
        return _from_baseline(entries)
    if not os.path.lexists(path):
        raise InputError(f"{path}: no such file or directory")
    _, document = read_json(path, "report or baseline file")
    if isinstance(document, dict) and "records" in document and "session" in document:
        return _from_report(read_report(path))
    return _from_baseline(read_file(path))


def _from_baseline(entries: list[BaselineEntry]) -> dict[Key, Measured]:
    return {
        (e.test_id, e.regime, e.device_class): Measured(e.metrics, e.versions, e.reason, e.contributors, e.devices)
        for e in entries
    }


def _from_report(report: ReportFile) -> dict[Key, Measured]:
    """One Measured per record of a report (read and checked by read_report)."""
    if not report.records:
        raise InputError(f"{report.path}: a report with no records (no test was measured): nothing to compare")
    from .present.merge import unique_records

    versions = report.session.get("versions", {})
    assert isinstance(versions, dict)  # read_report checked it
    for index, record in enumerate(report.records):
        if "regime" not in record or "device_class" not in record:
            raise InputError(
                f"{report.path}: record {index} ({str(record['test_id'])[:200]!r}) lacks its regime or device_class: nothing to match it by"
            )
    found = {}
    for key, record in unique_records(report).items():  # a test twice: kept once, or an error naming it, as merge does
        metrics: dict[str, float | int | None] = {name: record.get(name) for name in METRICS}  # type: ignore[misc]
        trace = record.get("trace")
        at_peak = trace.get("at_peak") if isinstance(trace, dict) else None
        contributors = (
            {
                str(name): size
                for name, size in at_peak.items()
                if isinstance(size, int) and not isinstance(size, bool) and 0 <= size
            }
            if isinstance(at_peak, dict)
            else {}
        )
        oom = record.get("oom")
        kind = (
            str(oom.get("kind") or ("real" if oom.get("real") else "yes"))
            if isinstance(oom, dict)
            else "real"
            if oom is True
            else None
        )
        tolerance = record.get("tolerance")
        found[key] = Measured(
            metrics,
            {str(k): str(v) for k, v in versions.items()},
            contributors=contributors,
            devices=_report_devices(record.get("devices")),
            oom=kind,
            tolerance=tolerance if isinstance(tolerance, str) else None,
        )
    return found


def _report_devices(devices: object) -> dict[str, dict[str, float | int | None]]:
    """Each device's gated figures of a report's record (checked by read_report), for a test on several devices."""
    if not isinstance(devices, list) or len(devices) < 2:
        return {}
    return {str(device["device"]): {name: device.get(name) for name in METRICS} for device in devices}


def select_classes(
    base: dict[Key, Measured], new: dict[Key, Measured], wanted: Sequence[str] | None, all_classes: bool
) -> tuple[dict[Key, Measured], dict[Key, Measured], dict[str, int]]:
    """The measurements to compare: by default only the device classes NEW measured (a CPU-only run
    says nothing about the GPU runner's `cuda-*` baselines, nor a second preset's); `wanted` names
    classes instead, `all_classes` keeps every one. Also how many of BASE's entries were left out,
    per class, so the table can say so."""
    if wanted:
        known = {key[2] for key in base} | {key[2] for key in new}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise InputError(
                f"--device-class {unknown[0]!r}: neither BASE nor NEW holds it; they hold {', '.join(sorted(known)) or 'nothing'}"
            )
        keep = set(wanted)
    elif all_classes:
        return base, new, {}
    else:
        keep = {key[2] for key in new}
    left_out: dict[str, int] = {}
    for key in base:
        if key[2] not in keep:
            left_out[key[2]] = left_out.get(key[2], 0) + 1
    return (
        {k: v for k, v in base.items() if k[2] in keep},
        {k: v for k, v in new.items() if k[2] in keep},
        dict(sorted(left_out.items())),
    )


def show_table(measurements: dict[Key, Measured]) -> str:
    lines = [
        "| test | regime | device | peak in use | peak reserved | fragmentation | versions |",
        "|---|---|---|---|---|---|---|",
    ]
    for (test_id, regime, device_class), m in sorted(measurements.items()):
        versions = ", ".join(
            f"{name} {version}"
            for name, version in sorted(m.versions.items())
            if name in ("jax", "tensorflow", "tensorflow-cpu", "pytest-devmem")
        )
        lines.append(
            f"| {markdown(test_id)} | {markdown(regime)} | {markdown(device_class)} | {format_metric('peak_bytes_in_use', m.metrics.get('peak_bytes_in_use'))} | "
            f"{format_metric('peak_bytes_reserved', m.metrics.get('peak_bytes_reserved'))} | {format_metric('fragmentation', m.metrics.get('fragmentation'))} | {markdown(versions)} |"
        )
    return "\n".join(lines) + "\n"


TRACE_REGIME = re.compile(
    r"\[(?:fraction=(?P<fraction>[0-9.]+)|(?P<mode>[a-z]+)(?:_fraction=(?P<limit>[0-9.]+)_)?)\](?:--[0-9a-f]+)?$"
)
"""The regime at the end of a trace's name as the plugin writes it (`test_x.py__test_a[growth].csv`,
`...[fraction=0.5]--1a2b3c4d5e6f.csv`; `growth(fraction=0.5)` becomes `growth_fraction=0.5_`)."""


def regime_of_trace(path: Path, mode: str | None, fraction: str | None) -> tuple[Policy, str]:
    """The regime to replay a trace under: the one given, else the one its file name carries (the
    plugin names each trace `<test>[<regime>].csv`); and a note saying where it came from."""
    from .model.pool import Policy

    if mode is not None or fraction is not None:
        return Policy.of(mode or "fraction", fraction), ""
    found = TRACE_REGIME.search(path.stem)
    if found is None:
        raise InputError(
            f"{path}: its name does not say its regime (the plugin names traces <test>[<regime>].csv): give --mode (prealloc, fraction, ondemand, growth or compact)"
        )
    if found["fraction"]:
        return Policy.of("fraction", found["fraction"]), " (from the trace's name)"
    return Policy.of(found["mode"], found["limit"]), " (from the trace's name)"


def replay_table(path: Path, mode: str | None, fraction: str | None, device_spec: str) -> tuple[str, bool]:
    """What a regime makes of a recorded trace (RMM-style CSV) on the model of the machine, as
    Markdown; and whether it fitted. The same replay as the plugin's and `devmem plot`'s."""
    from .model.explain import oom_lines
    from .model.machine import run_machine
    from .model.regime import jax_fraction_variable
    from .model.whatif import proven_fixes
    from .units import format_size

    policy, origin = regime_of_trace(path, mode, fraction)
    trace = _read_trace(path)
    spec, setups = _machine(device_spec, policy, unnamed_device(trace))
    run = run_machine(trace, setups, spec)
    asked = "peak_live_bytes (asked" + (", all devices together)" if len(run.devices) > 1 else ")")
    peak_live = trace.peak_live_bytes()
    rows = [("events", str(run.events), ""), (asked, str(peak_live), format_size(peak_live))]
    for figures in run.devices:
        where = f" on {figures.device}" if len(run.devices) > 1 else ""
        rows += [
            (f"peak_bytes_in_use{where}", str(figures.peak_bytes_in_use), format_size(figures.peak_bytes_in_use)),
            (f"peak_bytes_reserved{where}", str(figures.peak_bytes_reserved), format_size(figures.peak_bytes_reserved)),
            (f"fragmentation{where}", "n/a" if figures.fragmentation is None else f"{figures.fragmentation:.4f}", ""),
        ]
        for allocator in figures.allocators:
            rows.append(
                (
                    f"{allocator.name}{where}: peak in use, held",
                    f"{allocator.peak_bytes_in_use}, {allocator.peak_bytes_reserved}",
                    f"{format_size(allocator.peak_bytes_in_use)}, {format_size(allocator.peak_bytes_reserved)}",
                )
            )
    for source, share in sorted(run.by_source.items()):
        rows.append((f"{source}: peak live", str(share.peak_live_bytes), format_size(share.peak_live_bytes)))
    lines = [
        f"### Trace {markdown(str(path))} replayed under regime {markdown(policy.label)}{origin} on {markdown(spec.name)}",
        "",
        "| figure | value | readable |",
        "|---|---|---|",
    ]
    lines += [f"| {markdown(figure)} | {value} | {readable} |" for figure, value, readable in rows]
    if run.oom is not None:
        oom = run.oom.to_json()
        proven_fixes(trace, setups, spec, run, jax_fraction_variable()).record(oom)
        lines += [
            "",
            "```",
            *(terminal(line) for line in oom_lines(oom, [d.to_json() for d in run.devices], policy.label, spec.name)),
            "```",
        ]
    return "\n".join(lines) + "\n", run.oom is None


def plot_input(
    path: Path, test: str | None, mode: str | None, fraction: str | None, device_spec: str | None
) -> tuple[object, str]:
    """The picture to draw and its title: from a trace file (with the regime and device given), or
    from a JSON report's record (its regime and device; its trace written by --devmem-traces)."""
    from .model.machine import run_machine
    from .model.pool import Policy
    from .model.timeline import build_view

    if path.suffix.lower() == ".csv":
        policy = (
            regime_of_trace(path, mode, fraction)[0]
            if mode or fraction or TRACE_REGIME.search(path.stem)
            else Policy.of("prealloc")
        )
        trace = _read_trace(path)
        spec, setups = _machine(device_spec or "sim", policy, unnamed_device(trace))
        return build_view(
            run_machine(trace, setups, spec, timeline=True), trace, policy.label, setups
        ), f"{path.name} under {policy.label} on {spec.name}"
    given = [
        name
        for name, value in (("--mode", mode), ("--fraction", fraction), ("--device", device_spec))
        if value is not None
    ]
    if given:
        raise InputError(
            f"{path}: {', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only to a trace file (.csv); a report's record is drawn under its own regime and device"
        )
    report = read_report(path)
    records = [r for r in report.records if test is None or test in str(r["test_id"])]
    if not records:
        raise InputError(f"{path}: no record's test id contains {test!r}")
    traced = [r for r in records if isinstance(r.get("trace"), dict) and isinstance(r["trace"].get("file"), str)]  # type: ignore[attr-defined]
    if not traced:
        which = f" matching {test!r}" if test else ""
        raise InputError(
            f"{path}: no record{which} has a trace file: run pytest with --devmem-traces=DIR and --devmem-report"
        )
    record = max(traced, key=_peak_of)  # several match: the largest, as without --test
    session = report.session
    capacity = session.get("device_capacity_bytes")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
        raise InputError(f"{path}: the session's device_capacity_bytes is missing or not a positive number")
    trace = _read_trace(Path(record["trace"]["file"]))  # type: ignore[index]
    policy = Policy.from_label(str(record.get("regime", "prealloc")))
    device_name = str(session.get("device", "device"))
    capability = session.get("device_compute_capability")
    spec, setups = _machine_of(
        capacity,
        device_name,
        capability[0]
        if isinstance(capability, list)
        and capability
        and isinstance(capability[0], int)
        and not isinstance(capability[0], bool)
        else None,
        policy,
        unnamed_device(trace),
    )
    return build_view(
        run_machine(trace, setups, spec, timeline=True), trace, policy.label, setups
    ), f"{record['test_id']} under {policy.label} on {device_name}"


def plot_targets(
    path: Path, output: Path, test: str | None, mode: str | None, fraction: str | None, device_spec: str | None
) -> int:
    """`devmem plot REPORT --targets`: the report's targets table as a picture."""
    from .present.targets_plot import write_targets_plot

    given = [
        name
        for name, value in (("--mode", mode), ("--fraction", fraction), ("--device", device_spec))
        if value is not None
    ]
    if given:
        raise InputError(
            f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only to a trace file (.csv), not to --targets: each target's figures are the report's"
        )
    if path.suffix.lower() == ".csv":
        raise InputError(
            f"{path}: --targets draws a JSON report's targets table (pytest --devmem-targets=... --devmem-report=FILE.json), not a trace"
        )
    report = read_report(path)
    if report.targets is None:
        raise InputError(
            f"{path}: the report has no targets table: run pytest with --devmem-targets=sim:H100-80GB,sim:T4 (say) and --devmem-report=FILE.json"
        )
    session = report.session
    write_targets_plot(
        report.targets,
        output,
        f"Peak device memory per test on each target (regime {session.get('regime') or 'per test'}, {len(report.targets.targets)} targets)",
        test,
    )
    _print(f"wrote {output}\n")
    return 0


def _peak_of(record: dict[str, object]) -> int:
    peak = record.get("peak_bytes_in_use")
    return peak if isinstance(peak, int) else 0


def unnamed_device(trace: Trace) -> str:
    """Where the events that name no device (the devmem fixture's pool, an RMM log) were: device 0 of
    the platform the trace's other events name, as the plugin records it (`gpu:0` beside a GPU's
    events, else `cpu:0`), whatever machine replays it."""
    return "gpu:0" if any(name.startswith("gpu:") for name in trace.device_names()) else "cpu:0"


def _machine(device_spec: str, policy: Policy, default_device: str) -> tuple[MachineSpec, dict[str, AllocatorSetup]]:
    """The machine a device spec names (every device of its capacity; a real GPU is let go at
    once) and each framework's allocator under `policy`."""
    from .hardware.devices import open_device

    device = open_device(device_spec)
    try:
        return _machine_of(
            device.capacity, device.name, getattr(device, "compute_capability", (None,))[0], policy, default_device
        )
    finally:
        close = getattr(device, "close", None)
        if close is not None:
            close()


def _machine_of(
    capacity: int, name: str, compute_capability: int | None, policy: Policy, default_device: str = "cpu:0"
) -> tuple[MachineSpec, dict[str, AllocatorSetup]]:
    from .model.device import DEFAULT_COMPUTE_CAPABILITY
    from .model.frameworks import setups_for
    from .model.machine import MachineSpec

    spec = MachineSpec(
        capacity, name, compute_capability or DEFAULT_COMPUTE_CAPABILITY[0], default_device=default_device
    )
    return spec, setups_for(policy, capacity)


SLOW_READ_BYTES = 16 * 2**20
"""A trace larger than this, read row by row (no pyarrow), gets a note on how to read it faster."""


def _read_trace(path: Path) -> Trace:
    from .model import trace_arrow
    from .model.trace import Trace

    try:
        if not trace_arrow.available() and path.is_file() and path.stat().st_size > SLOW_READ_BYTES:
            print(
                f"devmem: note: reading {terminal(str(path))} row by row, since pyarrow is not installed; "
                "pip install 'pytest-devmem[fast-traces]' reads traces by column, some 30 times faster",
                file=sys.stderr,
            )
        return Trace.read_csv(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None


def load_new(paths: Sequence[Path], partial: bool = False) -> dict[Key, Measured]:
    """NEW's measurements: one input as `load` reads it, or several JSON reports merged into one.
    A report that is part of a split suite without all its groups is an InputError unless
    `partial` says so (the other groups' tests would pass as merely "missing")."""
    from .present.merge import merge_reports, missing_shards

    if len(paths) == 1:
        found = load(paths[0])
        if not partial and not paths[0].is_dir() and _is_report(paths[0]):
            problem = missing_shards(read_report(paths[0]))
            if problem:
                raise InputError(problem)
        return found
    notes: list[str] = []
    merged = merge_reports(paths, notes)
    for note in notes:
        _warn(note)
    shown = Path(
        f"{len(paths)} merged reports ({', '.join(str(p) for p in paths[:3])}{', ...' if len(paths) > 3 else ''})"
    )
    report = ReportFile(shown, merged["session"], merged["records"])  # type: ignore[arg-type]
    problem = None if partial else missing_shards(report)
    if problem:
        raise InputError(problem)
    return _from_report(report)


def _is_report(path: Path) -> bool:
    _, document = read_json(path, "report or baseline file")
    return isinstance(document, dict) and "records" in document and "session" in document


def merge_command(
    reports: Sequence[Path], output: Path | None, baselines: Path | None, same_run: bool = False, partial: bool = False
) -> int:
    """`devmem merge`: one report from several; with `baselines`, those files refreshed from it as
    one `--devmem-update` of the whole suite would write them. Everything is checked before
    anything is written."""
    from .files import write_atomic
    from .present.merge import merge_reports

    if output is None and baselines is None:
        raise InputError("nothing to write: give -o MERGED.json, --baselines DIR, or both")
    if output is not None and output.suffix.lower() != ".json":
        raise InputError(f"{output}: the merged report is a .json file")
    if baselines is not None and os.path.lexists(baselines) and not baselines.is_dir():
        raise InputError(
            f"{baselines}: not a directory: --baselines names the directory of baseline files to refresh (such as baselines/; made when missing)"
        )
    notes: list[str] = []
    document = merge_reports(reports, notes, same_run)
    for note in notes:
        _warn(note)
    if not partial:  # a set with a group missing would refresh or gate only part of the suite
        from .present.merge import missing_shards

        shown = Path(f"the merged set of {len(reports)} report(s)")
        problem = missing_shards(ReportFile(shown, document["session"], document["records"]))  # type: ignore[arg-type]
        if problem:
            raise InputError(problem)
    records = document["records"]
    assert isinstance(records, list)
    shards = document["session"]["merged_from"]  # type: ignore[index]
    print(f"merged {len(shards)} report(s): {len(records)} record(s)")
    refresh = (
        prepare_baselines(document, baselines) if baselines is not None else None
    )  # its checks, and the stored files read, before anything is written
    if output is not None:
        try:
            write_atomic(output, json.dumps(document, indent=2) + "\n")
        except OSError as exc:
            raise InputError(f"{output}: cannot write the merged report: {exc.strerror or exc}") from None
        print(f"wrote {output}")
    if refresh is not None:
        before = _file_bytes(baselines)  # type: ignore[arg-type]  # refresh is made only with baselines
        written, problems = refresh()
        for path in written:
            print(f"baseline {'unchanged' if before.get(path) == _read_bytes(path) else 'written'}: {path}")
        for problem in problems:
            print(f"devmem: baseline not written: {problem}", file=sys.stderr)
        if problems:
            return 2
    return 0


def _file_bytes(directory: Path) -> dict[Path, bytes | None]:
    """Every baseline file's bytes before a refresh, so that the refresh can say which it changed."""
    if not directory.is_dir():
        return {}
    return {path: _read_bytes(path) for path in directory.rglob("*.json") if path.is_file() and not path.is_symlink()}


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def baselines_from_report(document: dict[str, object], directory: Path) -> tuple[list[Path], list[str]]:
    """Baseline files under `directory` refreshed from a (merged) report's records, by the same
    rule and into the same bytes as `--devmem-update` on the session that wrote the report."""
    return prepare_baselines(document, directory)()


def prepare_baselines(document: dict[str, object], directory: Path) -> Callable[[], tuple[list[Path], list[str]]]:
    """The refresh `baselines_from_report` makes, checked and with the stored files read (an
    InputError or BaselineFormatError now, before anything is written); calling it writes."""
    from .gate.baseline import BaselineStore
    from .gate.record import TestRecord
    from .gate.refresh import refresh_baselines

    session = document["session"]
    assert isinstance(session, dict)
    device_class, versions = session.get("device_class"), session.get("versions")
    if not isinstance(device_class, str) or not device_class or not isinstance(versions, dict):
        raise InputError("the report's session lacks its device_class or versions: baselines cannot be written from it")
    try:
        records = [TestRecord.from_json(record) for record in document["records"]]  # type: ignore[attr-defined]
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"a record of the report cannot be stored as a baseline: {exc!r}") from None
    unrecorded = {
        (str(e["test_id"]), str(e["regime"])): (str(e["device"]), str(e["reason"]))
        for e in document.get("unrecorded") or []  # type: ignore[attr-defined]
    }
    store = BaselineStore(directory, device_class).load()
    return lambda: refresh_baselines(store, records, {str(k): str(v) for k, v in versions.items()}, unrecorded)


def history_command(inputs: Sequence[Path], tolerance_spec: str, output: Path | None) -> int:
    from .present import history

    tolerance = parse_tolerance(tolerance_spec)
    if output is not None:
        history.check_trend_path(output)  # before any work or output
    frame = history.load_frame(history.report_files(inputs))
    table = history.pivot(frame)
    moved = history.steps(table, tolerance)
    _print(history.markdown(table, moved, tolerance, classes=history.device_classes(frame)))
    if output is not None:
        history.draw_trend(table, moved, output)
        _print(f"\nwrote {output}\n")
    return 1 if moved else 0


def build_parser() -> argparse.ArgumentParser:
    """The `devmem` command's parser: its subcommands and their options (the documentation's CLI
    reference is generated from it)."""
    from . import __version__

    parser = argparse.ArgumentParser(prog="devmem", description="Compare and list pytest-devmem measurements.")
    parser.add_argument("--version", action="version", version=f"%(prog)s (pytest-devmem) {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    compare_parser = commands.add_parser(
        "compare", help="Compare NEW against BASE; exit 1 when a test regressed or ran out of memory"
    )
    compare_parser.add_argument("base", type=Path, help="Baseline directory, baseline file or JSON report")
    compare_parser.add_argument(
        "new",
        type=Path,
        nargs="+",
        help="Baseline directory, baseline file or JSON report; or several JSON reports (CI shards), merged first",
    )
    compare_parser.add_argument(
        "--tolerance",
        default=DEFAULT_TOLERANCE,
        help=f"Allowed change ({TOLERANCE_HELP.replace('%', '%%')}); default {DEFAULT_TOLERANCE.replace('%', '%%')}",
    )
    compare_parser.add_argument("--all", action="store_true", help="Also list metrics within tolerance")
    compare_parser.add_argument(
        "--device-class",
        action="append",
        default=None,
        metavar="CLASS",
        help="Compare only this device class (e.g. sim-16GiB, cuda-NVIDIA-H100-80GB-HBM3); repeat for several. Default: the classes NEW measured",
    )
    compare_parser.add_argument(
        "--all-classes",
        action="store_true",
        help="Compare every device class in BASE and NEW, listing BASE's other classes as not run",
    )
    compare_parser.add_argument(
        "--sort",
        choices=SORT_KEYS,
        default="status",
        help="Row order: status (failures first, the default), test, delta (largest growth first), percent, now or baseline (largest first)",
    )
    compare_parser.add_argument(
        "--columns",
        default=None,
        help=f"Comma-separated columns of the Markdown table, in order (default: all): {', '.join(COLUMNS)}",
    )
    compare_parser.add_argument(
        "--format",
        choices=("markdown", "json", "csv"),
        default=None,
        help="Markdown for a pull-request comment (default), or JSON / CSV for tools",
    )
    compare_parser.add_argument("--json", action="store_true", help="Same as --format=json")
    compare_parser.add_argument("--csv", action="store_true", help="Same as --format=csv")
    compare_parser.add_argument(
        "--partial",
        action="store_true",
        help="NEW is part of a split suite on purpose (some groups' reports left out): compare it without them",
    )
    merge_parser = commands.add_parser(
        "merge", help="Merge JSON reports of CI shards into one; refresh baselines from them (--baselines)"
    )
    merge_parser.add_argument(
        "reports", type=Path, nargs="+", help="JSON reports (--devmem-report=FILE.json), one per shard"
    )
    merge_parser.add_argument("-o", "--output", type=Path, default=None, help="Write the merged report to FILE.json")
    merge_parser.add_argument(
        "--baselines",
        type=Path,
        default=None,
        help="Also refresh the baseline files under DIR from the merged report, as one --devmem-update of the whole suite would",
    )
    merge_parser.add_argument(
        "--same-run",
        action="store_true",
        help="Refuse reports of different commits, CI runs or versions (by default a warning)",
    )
    merge_parser.add_argument(
        "--partial",
        action="store_true",
        help="The reports are part of a split suite on purpose (some groups left out): merge them without the others",
    )
    show_parser = commands.add_parser("show", help="List stored baselines")
    show_parser.add_argument(
        "directory", type=Path, nargs="?", default=Path("baselines"), help="Baseline directory (default: baselines)"
    )
    replay_parser = commands.add_parser(
        "replay", help="Replay a recorded trace (--devmem-traces) under a regime; exit 1 if it does not fit"
    )
    replay_parser.add_argument("trace", type=Path, help="Trace file (RMM-style CSV)")
    replay_parser.add_argument(
        "--mode",
        default=None,
        help="prealloc, fraction, ondemand (platform), growth or compact (default: the regime the trace's name carries, as --devmem-traces names it)",
    )
    replay_parser.add_argument("--fraction", default=None, help="Fraction of the device, in (0, 1]")
    replay_parser.add_argument(
        "--device", default="sim", help="Device whose capacity to use: sim, sim:SIZE, cuda:N (default: sim, 16 GiB)"
    )
    plot_parser = commands.add_parser(
        "plot", help="Draw a test's memory over its events and the pool's map at its peak, as PNG or HTML"
    )
    plot_parser.add_argument(
        "input", type=Path, help="A JSON report with traces (--devmem-report and --devmem-traces), or one trace (.csv)"
    )
    plot_parser.add_argument(
        "-o", "--output", type=Path, required=True, help="FILE.png (needs matplotlib) or FILE.html (self-contained)"
    )
    plot_parser.add_argument(
        "--test", default=None, help="Part of the test id to draw (default: the record with the largest peak)"
    )
    plot_parser.add_argument(
        "--mode", default=None, help="For a trace: the regime (default: the one its name carries, else prealloc)"
    )
    plot_parser.add_argument("--fraction", default=None, help="For a trace: the fraction, in (0, 1]")
    plot_parser.add_argument(
        "--device", default=None, help="For a trace: the device whose capacity to use (default sim, 16 GiB)"
    )
    plot_parser.add_argument(
        "--targets",
        action="store_true",
        help="Draw the report's targets table (--devmem-targets): each test's peak on each target against its capacity, and where it does not fit",
    )
    history_parser = commands.add_parser(
        "history", help="Line up reports of many commits: tests x commits, and the steps where a peak moved"
    )
    history_parser.add_argument(
        "inputs",
        type=Path,
        nargs="*",
        help=f"JSON reports, or directories holding them (default: {AUTOSAVE_DIR}/, where --devmem-autosave keeps every run's report)",
    )
    history_parser.add_argument(
        "--tolerance",
        default=DEFAULT_TOLERANCE,
        help=f"What counts as a move ({TOLERANCE_HELP.replace('%', '%%')}); default {DEFAULT_TOLERANCE.replace('%', '%%')}",
    )
    history_parser.add_argument(
        "-o", "--output", type=Path, default=None, help="Also draw the tests that moved to FILE.png (needs matplotlib)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "compare":
        args.format = _output_format(parser, args)
    try:
        return _run(args)
    except (DevmemError, ValueError) as exc:
        _error(str(exc))
    except OSError as exc:  # an output that cannot be written: a directory in the way, no room, no permission
        where = f"{exc.filename}: " if exc.filename else ""
        _error(f"cannot write {where}{exc.strerror or exc}")
    return 2


def _output_format(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The one output `devmem compare` was asked for; a usage error (exit 2) when its flags ask for two."""
    asked = {
        name for name in (args.format, "json" if args.json else None, "csv" if args.csv else None) if name is not None
    }
    if len(asked) > 1:
        parser.error(
            f"--format, --json and --csv ask for {' and '.join(sorted(asked))} output at once: give one, not both"
        )
    return asked.pop() if asked else "markdown"


def _run(args: argparse.Namespace) -> int:
    if args.command == "merge":
        return merge_command(args.reports, args.output, args.baselines, args.same_run, args.partial)
    if args.command == "history":
        return history_command(args.inputs, args.tolerance, args.output)
    if args.command == "plot":
        from .present.plot import check_picture_path, write_plot

        check_picture_path(args.output)  # before any work: a wrong extension, a directory in the way
        if args.targets:
            return plot_targets(args.input, args.output, args.test, args.mode, args.fraction, args.device)
        timeline, title = plot_input(args.input, args.test, args.mode, args.fraction, args.device)
        write_plot(timeline, args.output, title)  # type: ignore[arg-type]
        _print(f"wrote {args.output}\n")
        return 0
    if args.command == "replay":
        text, fitted = replay_table(args.trace, args.mode, args.fraction, args.device)
        _print(text)
        return 0 if fitted else 1
    if args.command == "compare":
        parse_tolerance(args.tolerance)  # a bad tolerance is reported before any file is read
        columns = parse_columns(args.columns)
        base, new = load(args.base), load_new(args.new, args.partial)
        base, new, left_out = select_classes(base, new, args.device_class, args.all_classes)
        found = verdicts(base, new, args.tolerance)
        if args.sort != "status":  # the tables put failures first themselves
            found = sort_verdicts(found, args.sort)
        if args.format == "json":
            _print(compare_json(found, args.tolerance, left_out))
        elif args.format == "csv":
            _print(compare_csv(found, sort=args.sort))
        else:
            _print(
                compare_markdown(found, args.tolerance, args.all, left_out=left_out, columns=columns, sort=args.sort)
            )
        return 1 if any(v.failing for v in found) else 0
    _print(show_table(load(args.directory)))
    return 0


def _print(text: str) -> None:
    """Everything the command prints goes out here: no control character from a test id, a trace
    or a file reaches the terminal as itself (the renderers escape each value; this is the net)."""
    sys.stdout.write(terminal_lines(text))


def _warn(message: str) -> None:
    print(f"devmem: warning: {terminal_lines(message)}", file=sys.stderr)


def _error(message: str) -> None:
    print(f"devmem: error: {terminal_lines(message)}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
