"""`devmem plot REPORT|TRACE -o FILE.png|FILE.html [--test ID] [--baselines DIR]`: a test's memory over
its events and the pools' map at its peak, its baseline over it in HTML as a failure's artifact has
it; with `--targets`, a report's targets table (every test on every target)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError
from ..gate.baseline import BaselineStore
from ..gate.record import headline_peak
from ..json_fields import whole
from ..model.machine import run_machine
from ..model.pool import Policy
from ..model.timeline import TimelineView, build_view
from ..model.tpu_targets import tpu_spec
from ..model.trace import TRACE_SUFFIXES
from ..present.plot import check_picture_path, write_plot
from ..present.plot_parts import BaselineSide, oom_caption
from ..present.report import read_report
from ..present.targets_plot import write_targets_plot
from .common import (
    add_replay_settings,
    machine_of,
    on_chips,
    print_text,
    read_trace,
    trace_on_machine,
    unnamed_device,
)

HELP = "Draw a test's memory over its events and the pool's map at its peak, as PNG or HTML"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "input",
        type=Path,
        help="A JSON report with traces (--devmem-report and --devmem-traces), or one trace (.csv, or its Arrow file .arrow)",
    )
    parser.add_argument(
        "-o", "--output", type=Path, required=True, help="FILE.png (needs matplotlib) or FILE.html (self-contained)"
    )
    parser.add_argument(
        "--test",
        default=None,
        help="The test id to draw, or part of it (default: the record with the largest peak; where several contain it and none is it, the largest of them, and it says so)",
    )
    parser.add_argument(
        "--baselines",
        type=Path,
        default=None,
        metavar="DIR",
        help="For a report drawn as HTML: draw the test's baseline from this directory over its run, as a failure's artifact does",
    )
    add_replay_settings(parser, "the one its name carries, else prealloc", lead="For a trace: ")
    parser.add_argument(
        "--targets",
        action="store_true",
        help="Draw the report's targets table (--devmem-targets): each test's peak on each target against its capacity, and where it does not fit",
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check_picture_path(args.output)  # before any work: a wrong extension, a directory in the way
    if args.targets:
        return plot_targets(args.input, args.output, args.test, args.mode, args.fraction, args.device)
    timeline, title, chosen, record = plot_input(args.input, args.test, args.mode, args.fraction, args.device)
    write_plot(timeline, args.output, title, baseline_of(record, args.baselines, args.output))
    print_text(f"wrote {args.output}: {title}{f' ({chosen})' if chosen else ''}\n")
    if timeline.oom:  # said in words too, as the picture says it: a picture is not opened by a CI log
        print_text(f"{oom_caption(timeline)}\n")
    return 0


def baseline_of(record: dict[str, object] | None, directory: Path | None, output: Path) -> BaselineSide | None:
    """The drawn record's baseline in `directory` (`--baselines`), as a failure's artifact shows it."""
    if directory is None:
        return None
    if record is None or output.suffix.lower() == ".png":
        raise InputError("--baselines draws a report's record as HTML (-o FILE.html), not a trace or a PNG")
    if not record.get("device_class"):
        raise InputError(f"the record of {record.get('test_id')} names no device class: its baseline cannot be found")
    store = BaselineStore(directory, str(record["device_class"])).load()
    entry = store.get(str(record["test_id"]), str(record["regime"]))
    if entry is None:
        raise InputError(
            f"no baseline of {record['test_id']} under regime {record['regime']} in {store.directory}: record one with --devmem-update"
        )
    return BaselineSide.of(str(entry.path), entry.metrics, entry.contributors, entry.profile)


def plot_input(
    path: Path, test: str | None, mode: str | None, fraction: str | None, device_spec: str | None
) -> tuple[TimelineView, str, str, dict[str, object] | None]:
    """The picture to draw, its title, why that record where several could be drawn, and the record
    (None for a trace): from a trace
    file (with the regime and device given), or from a JSON report's record (its regime and device;
    its trace written by --devmem-traces)."""
    if path.suffix.lower() in TRACE_SUFFIXES:  # a trace's CSV or Arrow file; else a JSON report
        replay = trace_on_machine(path, mode, fraction, device_spec, fallback_mode="prealloc")
        title = f"{path.name} under {replay.policy.label} on {replay.spec.name}"
        return (
            build_view(
                run_machine(replay.trace, replay.setups, replay.spec, timeline=True),
                replay.trace,
                replay.policy.label,
                replay.setups,
            ),
            title,
            "",
            None,
        )
    given = trace_only_flags(mode, fraction, device_spec)
    if given:
        raise InputError(
            f"{path}: {given} only to a trace file (.csv, .arrow); a report's record is drawn under its own regime and device"
        )
    report = read_report(path)
    if not report.records:
        raise InputError(f"{path}: a report with no records (no test was measured): nothing to draw")
    records = [r for r in report.records if test is None or test in str(r["test_id"])]
    records = [r for r in records if str(r["test_id"]) == test] or records  # a whole id draws that test's
    if not records:
        raise InputError(f"{path}: no record's test id contains {test!r}")
    traced = [r for r in records if isinstance(r.get("trace"), dict) and isinstance(r["trace"].get("file"), str)]  # type: ignore[attr-defined]
    if not traced:
        which = f" matching {test!r}" if test else ""
        raise InputError(
            f"{path}: no record{which} has a trace file: run pytest with --devmem-traces=DIR and --devmem-report"
        )
    record = max(traced, key=lambda r: headline_peak(r) or 0)  # several match: the largest, as without --test
    session = report.session
    capacity = whole(session, "device_capacity_bytes")
    if capacity is None or capacity <= 0:
        raise InputError(f"{path}: the session's device_capacity_bytes is missing or not a positive number")
    device_name = str(session.get("device", "device"))
    trace = on_chips(read_trace(Path(record["trace"]["file"])), device_name)  # type: ignore[index]
    policy = Policy.from_label(str(record.get("regime", "prealloc")))
    capability = session.get("device_compute_capability")
    major = capability[0] if isinstance(capability, list) and capability else None
    if isinstance(major, bool) or not isinstance(major, int):
        major = None
    spec, setups = machine_of(
        capacity, device_name, major, policy, unnamed_device(trace), tpu=tpu_spec(device_name) is not None
    )
    chosen = ""
    if len(traced) > 1:
        which = f"whose test id contains {test!r}" if test else "with a trace"
        chosen = f"the largest peak of {len(traced)} records {which}; --test with more of an id draws another"
    return (
        build_view(run_machine(trace, setups, spec, timeline=True), trace, policy.label, setups),
        f"{record['test_id']} under {policy.label} on {device_name}",
        chosen,
        record,
    )


def trace_only_flags(mode: str | None, fraction: str | None, device_spec: str | None) -> str:
    """The flags given that replay a trace (`--mode`, `--fraction`, `--device`), with the verb that
    says they apply ("--mode applies", "--mode, --device apply"); empty where none was given."""
    given = [
        name
        for name, value in (("--mode", mode), ("--fraction", fraction), ("--device", device_spec))
        if value is not None
    ]
    if not given:
        return ""
    return f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'}"


def plot_targets(
    path: Path, output: Path, test: str | None, mode: str | None, fraction: str | None, device_spec: str | None
) -> int:
    """`devmem plot REPORT --targets`: the report's targets table as a picture."""
    given = trace_only_flags(mode, fraction, device_spec)
    if given:
        raise InputError(
            f"{given} only to a trace file (.csv, .arrow), not to --targets: each target's figures are the report's"
        )
    if path.suffix.lower() in TRACE_SUFFIXES:
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
    print_text(f"wrote {output}\n")
    return 0
