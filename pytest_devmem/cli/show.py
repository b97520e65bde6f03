"""`devmem show [DIR]`: the stored baselines as a table."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..gate.compare import Key, Measured
from ..gate.tolerance import format_metric
from ..options import OPTION
from ..present.buffers import markdown_table
from ..present.text import markdown
from .common import load, print_text

HELP = "List stored baselines"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default = OPTION["baselines"].default
    parser.add_argument(
        "directory",
        type=Path,
        nargs="?",
        default=Path(str(default)),
        help=f"Baseline directory (default: {default})",
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    print_text(show_table(load(args.directory)))
    return 0


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
    tables = [
        markdown_table(f"{test_id} [{regime}, {device_class}]", m.buffers)
        for (test_id, regime, device_class), m in sorted(measurements.items())
        if any(program.buffers for program in m.buffers.values())
    ]
    return "\n".join(lines) + "\n" + "".join(tables)
