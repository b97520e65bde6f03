"""What several of the devmem command's subcommands share: the input error (exit 2), the output
formats' flags (`--format`, `--json`, `--csv`), reading measurements (`compare`, `show`), reading a
trace and the machine to replay it on (`replay`, `plot`), and printing through the terminal's escaping."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..files import read_json
from ..gate.baseline_files import read_directory, read_file
from ..gate.compare import Key, Measured
from ..gate.record import BaselineEntry
from ..gate.tolerance import METRICS
from ..hardware.devices import open_device
from ..model.buffers import ProgramBuffers, lines_from_json
from ..model.frameworks import AllocatorSetup, setups_for
from ..model.machine import MachineSpec
from ..model.pool import Policy
from ..model.pool.policy import canonical_label
from ..model.regime import tpu_replay_policy
from ..model.tpu_devices import as_tpu_chips
from ..model.tpu_targets import tpu_spec
from ..model.trace import Trace, csv_columns
from ..options import OPTION, add_option
from ..present.report import ReportFile, read_report
from ..present.shard_merge import merge_reports, missing_shards, oom_kind, unique_records
from ..present.text import terminal, terminal_lines

# -- output ------------------------------------------------------------------------------------------------------


def print_text(text: str) -> None:
    """Everything the command prints goes out here: no control character from a test id, a trace
    or a file reaches the terminal as itself (the renderers escape each value; this is the net)."""
    sys.stdout.write(terminal_lines(text))


def warn(message: str) -> None:
    print(f"devmem: warning: {terminal_lines(message)}", file=sys.stderr)


def error(message: str) -> None:
    print(f"devmem: error: {terminal_lines(message)}", file=sys.stderr)


# -- output formats: Markdown for people, JSON and CSV for tools ---------------------------------------------------

FORMATS = ("markdown", "json", "csv")

SLOW_READ_BYTES = 16 * 2**20
"""A trace larger than this, read row by row (no pyarrow), gets a note on how to read it faster."""


def add_format_arguments(parser: argparse.ArgumentParser, help: str) -> None:
    """`--format markdown|json|csv`, with `--json` and `--csv` as its short forms: the same flags on
    every command that prints a table (`compare`, `show`, `history`, `replay`)."""
    parser.add_argument("--format", choices=FORMATS, default=None, help=help)
    parser.add_argument("--json", action="store_true", help="Same as --format=json")
    parser.add_argument("--csv", action="store_true", help="Same as --format=csv")


def add_setting(
    parser: argparse.ArgumentParser, name: str, sentence: str, *, defaulted: bool = False, **more: object
) -> None:
    """The plugin's setting `name` (options.OPTION) as this command's `--NAME`, with the metavar,
    kind and check of `--devmem-NAME`, around the command's own sentence, in which `{values}` stands
    for what the setting allows and `{default}` for its default; `defaulted`: the setting's default
    is the flag's too; `more` (default=, type=) goes to argparse."""
    option = OPTION[name]
    if defaulted:
        more["default"] = option.default
    add_option(
        parser.add_argument,
        option,
        prefix="",
        help=sentence.format(values=option.values, default=option.default),
        **more,
    )


def add_replay_settings(
    parser: argparse.ArgumentParser, mode_default: str, lead: str = "", device_default: str | None = None
) -> None:
    """`--mode`, `--fraction` and `--device`: the regime and the device a trace is replayed on
    (`replay`, `plot`); `lead` opens each sentence ("For a trace: ")."""
    for name, sentence, default in (
        ("mode", f"the regime, {{values}} (default: {mode_default})", None),
        ("fraction", "the fraction of the device, {values}", None),
        ("device", "the device whose capacity to use, {values} (default: sim, 16 GiB)", device_default),
    ):
        text = lead + sentence
        add_setting(parser, name, text[:1].upper() + text[1:], default=default)


def output_format(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The one output asked for; a usage error (exit 2) when the flags ask for two."""
    asked = {
        name for name in (args.format, "json" if args.json else None, "csv" if args.csv else None) if name is not None
    }
    if len(asked) > 1:
        parser.error(
            f"--format, --json and --csv ask for {' and '.join(sorted(asked))} output at once: give one, not both"
        )
    return asked.pop() if asked else "markdown"


def json_text(document: object) -> str:
    """A command's JSON output."""
    return json.dumps(document, indent=2) + "\n"


# -- measurements: reports and baselines -------------------------------------------------------------------------


def load(path: Path) -> dict[Key, Measured]:
    """Measurements from a JSON report, a baseline file, or a directory of baseline files."""
    if path.is_dir():
        entries = read_directory(path)
        if not entries:
            raise InputError(f"{path}: a directory with no baseline files (*.json) in it: nothing to compare against")
        return _from_baseline(entries)
    if not os.path.lexists(path):
        raise InputError(f"{path}: no such file or directory")
    if is_report(path):
        return from_report(read_report(path))
    return _from_baseline(read_file(path))


def is_report(path: Path) -> bool:
    """Whether a JSON file is a report (`--devmem-report`), not a baseline file."""
    _, document = read_json(path, "report or baseline file")
    return isinstance(document, dict) and "records" in document and "session" in document


def _from_baseline(entries: list[BaselineEntry]) -> dict[Key, Measured]:
    return {
        (e.test_id, e.regime, e.device_class): Measured(
            e.metrics, e.versions, e.reason, e.contributors, e.devices, buffers=e.buffers, lines=e.lines
        )
        for e in entries
    }


def merged(paths: Sequence[Path], shown: str, same_run: bool = False, partial: bool = False) -> dict[str, object]:
    """Several JSON reports (CI shards) merged into one report's document (present/shard_merge.py),
    each warning said; an InputError where the set is part of a split suite without all its groups
    and `partial` does not say so (the other groups' tests would pass as merely "missing").
    `shown` names the set in that error."""
    notes: list[str] = []
    document = merge_reports(paths, notes, same_run)
    for note in notes:
        warn(note)
    problem = None if partial else missing_shards(ReportFile(Path(shown), document["session"], document["records"]))  # type: ignore[arg-type]
    if problem:
        raise InputError(problem)
    return document


def from_report(report: ReportFile) -> dict[Key, Measured]:
    """One Measured per record of a report (read and checked by read_report)."""
    if not report.records:
        raise InputError(f"{report.path}: a report with no records (no test was measured): nothing to compare")
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
        tolerance = record.get("tolerance")
        found[key] = Measured(
            metrics,
            {str(k): str(v) for k, v in versions.items()},
            contributors=contributors,
            devices=_report_devices(record.get("devices")),
            oom=oom_kind(record),
            tolerance=tolerance if isinstance(tolerance, str) else None,
            buffers=_report_buffers(trace),
            lines=_report_lines(trace),
        )
    device_class = str(report.session.get("device_class", ""))
    for entry in report.unrecorded if device_class else ():
        # a test the session measured that ran and left no figures (skipped, xfailed): its reason, not "not run"
        key = (str(entry["test_id"]), canonical_label(str(entry["regime"])), device_class)
        found.setdefault(key, Measured({}, {str(k): str(v) for k, v in versions.items()}, reason=str(entry["reason"])))
    return found


def _report_lines(trace: object) -> dict[str, dict[str, int]]:
    """Per holder at the peak of a report's record, the bytes each user's line made (none where unreadable)."""
    try:
        return lines_from_json(trace.get("lines_at_peak", {}) if isinstance(trace, dict) else {})
    except ValueError:
        return {}


def _report_buffers(trace: object) -> dict[str, ProgramBuffers]:
    """Each program's buffers at its peak in a report's record; a program whose entry is unreadable
    (or says they are not known) is left out."""
    found = trace.get("buffers") if isinstance(trace, dict) else None
    programs: dict[str, ProgramBuffers] = {}
    for name, entry in found.items() if isinstance(found, dict) else ():
        try:
            programs[str(name)] = ProgramBuffers.from_json(entry)
        except ValueError:
            continue
    return programs


def _report_devices(devices: object) -> dict[str, dict[str, float | int | None]]:
    """Each device's gated figures of a report's record (checked by read_report), for a test on several devices."""
    if not isinstance(devices, list) or len(devices) < 2:
        return {}
    return {str(device["device"]): {name: device.get(name) for name in METRICS} for device in devices}


# -- traces and the machine they are replayed on -----------------------------------------------------------------

TRACE_REGIME = re.compile(
    r"\[(?:fraction=(?P<fraction>[0-9.]+)|(?P<mode>[a-z]+)(?:_fraction=(?P<limit>[0-9.]+)_)?)\](?:--[0-9a-f]+)?$"
)
"""The regime at the end of a trace's name as the plugin writes it (`test_x.py__test_a[growth].csv`,
`...[fraction=0.5]--1a2b3c4d5e6f.csv`; `growth(fraction=0.5)` becomes `growth_fraction=0.5_`)."""


def regime_of_trace(path: Path, mode: str | None, fraction: str | None) -> tuple[Policy, str]:
    """The regime to replay a trace under: the one given, else the one its file name carries (the
    plugin names each trace `<test>[<regime>].csv`); and a note saying where it came from."""
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


def read_trace(path: Path) -> Trace:
    """A trace file, or an InputError naming it; a note on stderr where a large one is read row by
    row (no pyarrow), above `SLOW_READ_BYTES`."""
    try:
        if (
            not csv_columns.available()
            and path.suffix.lower() == ".csv"
            and path.is_file()
            and path.stat().st_size > SLOW_READ_BYTES
        ):
            print(
                f"devmem: note: reading {terminal(str(path))} row by row, since pyarrow is not installed; "
                "pip install 'pytest-devmem[fast-traces]' reads traces by column, some 30 times faster",
                file=sys.stderr,
            )
        trace = Trace.read(path)
        trace.check_pairs(path)  # before any replay: its own error would name an event, not the file's line
        return trace
    except OSError as exc:
        raise InputError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None


def unnamed_device(trace: Trace) -> str:
    """Where the events that name no device (the devmem fixture's pool, an RMM log) were: device 0 of
    the platform the trace's other events name, as the plugin records it (`gpu:0` beside a GPU's
    events, `tpu:0` beside a TPU preset's chips, else `cpu:0`), whatever machine replays it."""
    names = trace.device_names()
    for platform in ("gpu", "tpu"):
        if any(name.startswith(f"{platform}:") for name in names):
            return f"{platform}:0"
    return "cpu:0"


def machine(device_spec: str, policy: Policy, default_device: str) -> tuple[MachineSpec, dict[str, AllocatorSetup]]:
    """The machine a device spec names (every device of its capacity; a real GPU is let go at
    once) and each framework's allocator under `policy`."""
    device = open_device(device_spec)
    try:
        return machine_of(
            device.capacity,
            device.name,
            device.compute_capability[0],
            policy,
            default_device,
            tpu=device.tpu is not None,
        )
    finally:
        device.close()


def machine_of(
    capacity: int,
    name: str,
    compute_capability: int | None,
    policy: Policy,
    default_device: str = "cpu:0",
    *,
    tpu: bool = False,
) -> tuple[MachineSpec, dict[str, AllocatorSetup]]:
    """The machine of a device's capacity, name and compute capability (a report's session names
    them). A TPU preset's chips have no CUDA context, and what names no device is chip 0's, as the
    plugin's replay has them (plugin/recording.py `machine_spec`)."""
    platform = "tpu" if tpu else default_device.partition(":")[0]
    return MachineSpec.of_device(capacity, name, compute_capability, platform=platform), setups_for(
        policy, capacity, tpu=tpu
    )


def on_chips(trace: Trace, device_spec: str | None) -> Trace:
    """`trace` with its CPU devices named as the chips they stand for where `device_spec` is a TPU
    preset (model/tpu_devices.py: TensorFlow's events stay on the host); else as it is."""
    return as_tpu_chips(trace) if tpu_spec(device_spec) is not None else trace


@dataclass(frozen=True)
class TraceOnMachine:
    """A trace file ready to replay: its regime (and a note on where it came from), its events (on a
    TPU preset's chips), the machine and each framework's allocator there."""

    policy: Policy
    origin: str
    trace: Trace
    spec: MachineSpec
    setups: dict[str, AllocatorSetup]


def trace_on_machine(
    path: Path, mode: str | None, fraction: str | None, device_spec: str | None, fallback_mode: str | None = None
) -> TraceOnMachine:
    """What `replay` and `plot` replay: the trace at `path` under the regime given, else the one its
    name carries, else a TPU's own (compact: a TPU has one regime), else `fallback_mode` (None: an
    InputError asking for --mode); on the device `device_spec` names (None: sim)."""
    if mode is None and fraction is None and not TRACE_REGIME.search(path.stem):
        mode = "compact" if tpu_spec(device_spec) is not None else fallback_mode
    policy, origin = regime_of_trace(path, mode, fraction)
    policy = tpu_replay_policy(device_spec, policy, mode, fraction)
    trace = on_chips(read_trace(path), device_spec)
    spec, setups = machine(device_spec or "sim", policy, unnamed_device(trace))
    return TraceOnMachine(policy, origin, trace, spec, setups)
