"""`devmem compare BASE NEW...`: NEW's measurements against BASE's, as a Markdown table for a pull
request (or JSON, CSV); exit 1 when a test regressed or ran out of memory."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ..errors import InputError
from ..gate.compare import Key, Measured, verdicts
from ..options import OPTION
from ..present.comparison import (
    COLUMNS,
    SORT_KEYS,
    compare_csv,
    compare_json,
    compare_markdown,
    parse_columns,
    sort_verdicts,
)
from ..present.report import ReportFile, read_report
from ..present.shard_merge import missing_shards
from .common import (
    add_format_arguments,
    add_setting,
    from_report,
    is_report,
    load,
    merged,
    output_format,
    print_text,
)

HELP = "Compare NEW against BASE; exit 1 when a test regressed or ran out of memory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", type=Path, help="Baseline directory, baseline file or JSON report")
    parser.add_argument(
        "new",
        type=Path,
        nargs="+",
        help="Baseline directory, baseline file or JSON report; or several JSON reports (CI shards), merged first",
    )
    add_setting(parser, "tolerance", "Allowed change ({values}); default {default}", defaulted=True)
    parser.add_argument("--all", action="store_true", help="Also list metrics within tolerance")
    parser.add_argument(
        "--device-class",
        action="append",
        default=None,
        metavar="CLASS",
        help="Compare only this device class (e.g. sim-16GiB, cuda-NVIDIA-H100-80GB-HBM3); repeat for several. Default: the classes NEW measured",
    )
    parser.add_argument(
        "--all-classes",
        action="store_true",
        help="Compare every device class in BASE and NEW, listing BASE's other classes as not run",
    )
    parser.add_argument(
        "--sort",
        choices=SORT_KEYS,
        default="status",
        help="Row order: status (failures first, the default), test, delta (largest growth first), percent, now or baseline (largest first)",
    )
    parser.add_argument(
        "--columns",
        default=None,
        help=f"Comma-separated columns of the Markdown table, in order (default: all): {', '.join(COLUMNS)}",
    )
    add_format_arguments(parser, "Markdown for a pull-request comment (default), or JSON / CSV for tools")
    parser.add_argument(
        "--partial",
        action="store_true",
        help="NEW is part of a split suite on purpose (some groups' reports left out): compare it without them",
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    output = output_format(parser, args)  # before any work
    if args.device_class and args.all_classes:
        parser.error("--device-class picks device classes and --all-classes keeps every one: give one, not both")
    if args.columns is not None and output != "markdown":
        parser.error(
            f"--columns chooses the Markdown table's columns; {output.upper()} output has every column: drop --columns or --{output}"
        )
    OPTION["tolerance"].parsed(args.tolerance)  # a bad tolerance is reported before any file is read
    columns = parse_columns(args.columns)
    base, new = load(args.base), load_new(args.new, args.partial)
    base, new, left_out = select_classes(base, new, args.device_class, args.all_classes)
    found = verdicts(base, new, args.tolerance)
    if args.sort != "status":  # the tables put failures first themselves
        found = sort_verdicts(found, args.sort)
    if output == "json":
        print_text(compare_json(found, args.tolerance, left_out))
    elif output == "csv":
        print_text(compare_csv(found, sort=args.sort))
    else:
        print_text(
            compare_markdown(
                found,
                args.tolerance,
                args.all,
                left_out=left_out,
                columns=columns,
                sort=args.sort,
                picked=bool(args.device_class),
            )
        )
    return 1 if any(v.failing for v in found) else 0


def load_new(paths: Sequence[Path], partial: bool = False) -> dict[Key, Measured]:
    """NEW's measurements: one input as `load` reads it, or several JSON reports merged into one.
    A report that is part of a split suite without all its groups is an InputError unless
    `partial` says so (the other groups' tests would pass as merely "missing")."""
    if len(paths) == 1:
        found = load(paths[0])
        if not paths[0].is_dir() and is_report(paths[0]):
            problem = missing_shards(read_report(paths[0]))  # (a shard that cannot be true, even partial)
            if problem and not partial:
                raise InputError(problem)
        return found
    shown = f"{len(paths)} merged reports ({', '.join(str(p) for p in paths[:3])}{', ...' if len(paths) > 3 else ''})"
    document = merged(paths, shown, partial=partial)
    return from_report(
        ReportFile(Path(shown), document["session"], document["records"], unrecorded=document["unrecorded"])  # type: ignore[arg-type]
    )


def select_classes(
    base: dict[Key, Measured], new: dict[Key, Measured], wanted: Sequence[str] | None, all_classes: bool
) -> tuple[dict[Key, Measured], dict[Key, Measured], dict[str, int]]:
    """The measurements to compare: by default only the device classes NEW measured (a CPU-only run
    says nothing about the GPU runner's `cuda-*` baselines, nor a second preset's); `wanted` names
    classes instead, `all_classes` keeps every one. Also how many of BASE's entries were left out,
    per class, so the table can say so."""
    if wanted:
        measured = {key[2] for key in new}
        unknown = [name for name in wanted if name not in measured]
        if unknown:  # its baselines would all pass as "not run"
            raise InputError(
                f"--device-class {unknown[0]!r}: NEW measured nothing of it; NEW holds {', '.join(sorted(measured)) or 'nothing'}"
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
