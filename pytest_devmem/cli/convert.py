"""`devmem convert TRACE OUTPUT`: a trace's CSV as its Arrow IPC file (read some ten times faster), or back."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..model.trace import convert_trace
from .common import print_text

HELP = "Write a trace's CSV as its Arrow IPC file (read some ten times faster), or back"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, help="Trace file (RMM-style CSV, or its Arrow IPC file)")
    parser.add_argument("output", type=Path, help="File to write: .arrow or .feather (the Arrow file), .csv")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    print_text(convert_trace(args.trace, args.output) + "\n")
    return 0
