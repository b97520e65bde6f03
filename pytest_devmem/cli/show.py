"""`devmem show [DIR] [--format markdown|json|csv]`: the stored baselines as a table (Markdown),
or as JSON or CSV for tools."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..gate.changes import REQUESTED
from ..gate.compare import Key, Measured
from ..gate.tolerance import METRICS, format_metric
from ..options import OPTION
from ..present.buffers import Hidden, markdown_lines_table, markdown_table, worth_reading
from ..present.text import markdown_rows
from ..spreadsheet import csv_table
from .common import add_format_arguments, json_text, load, output_format, print_text

HELP = "List stored baselines"

SHOWN_VERSIONS = ("jax", "tensorflow", "tensorflow-cpu", "pytest-devmem")
"""The versions the Markdown table names (JSON and CSV keep every one)."""
SHOWN_METRICS = ("peak_bytes_in_use", "peak_bytes_reserved", "fragmentation")
"""The figures the Markdown table shows (JSON and CSV keep every one)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default = OPTION["baselines"].default
    parser.add_argument(
        "directory",
        type=Path,
        nargs="?",
        default=Path(str(default)),
        help=f"Baseline directory (default: {default})",
    )
    parser.add_argument(
        "--all", action="store_true", help="Also list JAX's own programs and rows under 1%% of a test's peak"
    )
    add_format_arguments(parser, "A Markdown table (default), or JSON / CSV for tools")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    output = output_format(parser, args)  # before any work
    measurements = load(args.directory)
    if output in ("json", "csv"):
        print_text({"json": show_json, "csv": show_csv}[output](measurements))
    else:
        print_text(show_table(measurements, everything=args.all))
    return 0


def show_table(measurements: dict[Key, Measured], everything: bool = False) -> str:
    """The baselines' figures, then each test's buffers and held lines worth reading (all with `everything`)."""
    header = ("test", "regime", "device", "peak in use", "peak reserved", "fragmentation", "versions")
    rows = [
        (
            test_id,
            regime,
            device_class,
            *(format_metric(name, m.metrics.get(name)) for name in SHOWN_METRICS),
            ", ".join(f"{name} {version}" for name, version in sorted(m.versions.items()) if name in SHOWN_VERSIONS),
        )
        for (test_id, regime, device_class), m in sorted(measurements.items())
    ]
    lines = markdown_rows(header, rows)
    tables, hidden = [], Hidden()
    for (test_id, regime, device_class), m in sorted(measurements.items()):
        programs, held = (m.buffers, m.lines) if everything else worth_reading(m.buffers, m.lines, peak(m), hidden)
        title = f"{test_id} [{regime}, {device_class}]"
        if any(program.buffers for program in programs.values()):
            tables.append(markdown_table(title, programs))
        if held:
            tables.append(markdown_lines_table(title, held))
    return "\n".join(lines) + "\n" + "".join(tables) + ("\n" + hidden.text() if hidden.text() else "")


def peak(m: Measured) -> float | None:
    return m.metrics.get("peak_bytes_in_use") or m.metrics.get(REQUESTED)


def show_json(measurements: dict[Key, Measured]) -> str:
    """Every stored entry: its key, raw figures (None where none is stored), why it has none, versions."""
    return json_text(
        {
            "format": "pytest-devmem-baselines-list",
            "version": 1,
            "baselines": [
                {
                    "test_id": test_id,
                    "regime": regime,
                    "device_class": device_class,
                    "metrics": {name: m.metrics.get(name) for name in METRICS},
                    "reason": m.reason or None,
                    "versions": dict(sorted(m.versions.items())),
                }
                for (test_id, regime, device_class), m in sorted(measurements.items())
            ],
        }
    )


def show_csv(measurements: dict[Key, Measured]) -> str:
    """One line per stored entry, raw figures (empty where none is stored), for spreadsheets and pandas."""
    return csv_table(
        ["test", "regime", "device_class", *METRICS, "reason", *SHOWN_VERSIONS],
        (
            [test_id, regime, device_class, *(m.metrics.get(name) for name in METRICS), m.reason or None]
            + [m.versions.get(name) for name in SHOWN_VERSIONS]
            for (test_id, regime, device_class), m in sorted(measurements.items())
        ),
    )
