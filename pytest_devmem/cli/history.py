"""`devmem history [REPORT...|DIR] [--tolerance SPEC] [-o trend.png] [--format markdown|json|csv]`:
reports of many commits lined up by git's ancestry, tests x commits, and the steps where a peak
moved; exit 1 on a move only with --fail-on-move."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..gate.tolerance import parse_tolerance
from ..present import history
from ..present.autosave import AUTOSAVE_DIR
from .common import add_format_arguments, add_setting, output_format, print_text

HELP = "Line up reports of many commits: tests x commits, and the steps where a peak moved"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs",
        type=Path,
        nargs="*",
        help=f"JSON reports, or directories holding them (default: {AUTOSAVE_DIR}/, where --devmem-autosave keeps every run's report)",
    )
    add_setting(parser, "tolerance", "What counts as a move ({values}); default {default}", defaulted=True)
    parser.add_argument(
        "-o", "--output", type=Path, default=None, help="Also draw the tests that moved to FILE.png (needs matplotlib)"
    )
    parser.add_argument("--fail-on-move", action="store_true", help="Exit 1 when a test's peak moved (default: 0)")
    add_format_arguments(parser, "Markdown for a job summary (default), or JSON / CSV for tools")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    shown, output = output_format(parser, args), args.output
    tolerance = parse_tolerance(args.tolerance)  # the --tolerance option's own parser (options.py)
    if output is not None:
        history.check_trend_path(output)  # before any work or output
    frame = history.load_frame(history.report_files(args.inputs))
    table = history.pivot(frame)
    moved = history.steps(table, tolerance, history.pivot(frame, history.OOM))
    classes, order = history.device_classes(frame), frame.attrs["order"]
    if shown == "json":
        print_text(history.history_json(table, moved, tolerance, classes, order))
    elif shown == "csv":
        print_text(history.history_csv(table, moved))
        if order != history.GIT_ORDER:
            print(f"devmem history: commits in {order}", file=sys.stderr)
    else:
        print_text(history.markdown(table, moved, tolerance, classes=classes, order=order))
    if output is not None:
        history.draw_trend(table, moved, output)
        if shown == "markdown":
            print_text(f"\nwrote {output}\n")
        else:  # stdout holds the JSON or CSV alone
            print(f"wrote {output}", file=sys.stderr)
    return 1 if moved and args.fail_on_move else 0
