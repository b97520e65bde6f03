"""The `devmem` command: compare two sets of measurements, list baselines, replay and draw traces.

Each command's usage is its parser's (`devmem COMMAND --help`, and docs/reference/cli.md, generated
from `build_parser()`).

`devmem compare BASE NEW...`: each a JSON report (`--devmem-report=FILE.json`), a baseline directory, or one
baseline file; several NEW reports (CI shards) are merged first, as `devmem merge` does. Measurements
are matched by (test id, regime, device class); a simulated device, a GPU model and a CPU backend are
different classes and never compared. Exit status: 0 no regression, 1 regression, 2 bad input.

Each subcommand is a module of this package (`compare.py`, ...) with its `HELP`, `add_arguments(parser)`
and `run(args, parser) -> int` (a usage error through `parser.error`, bad input as a DevmemError or
ValueError, which `main` turns into exit 2); what several share is `common.py`'s. The flags the plugin has too (`--mode`,
`--fraction`, `--device`, `--tolerance`, `--baselines`) are built from `options.OPTIONS`. This package
never imports pytest or the plugin.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from ..errors import DevmemError, InputError
from ..version import package_version
from . import compare, compilers, convert, history, init_ci, merge, plot, replay, show
from .common import error

__all__ = ["COMMANDS", "InputError", "build_parser", "main"]

COMMANDS: dict[str, ModuleType] = {
    "compare": compare,
    "merge": merge,
    "show": show,
    "replay": replay,
    "convert": convert,
    "plot": plot,
    "history": history,
    "init-ci": init_ci,
    "compilers": compilers,
}
"""Each subcommand's module, in the order `devmem --help` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The `devmem` command's parser: its subcommands and their options (the documentation's CLI
    reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="devmem", description="Compare and list pytest-devmem measurements.")
    parser.add_argument("--version", action="version", version=f"%(prog)s (pytest-devmem) {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        module.add_arguments(commands.add_parser(name, help=module.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(COMMANDS[args.command].run(args, parser))
    except (DevmemError, ValueError) as exc:
        error(str(exc))
    except OSError as exc:  # an output that cannot be written: a directory in the way, no room, no permission
        where = f"{exc.filename}: " if exc.filename else ""
        error(f"cannot write {where}{exc.strerror or exc}")
    except KeyboardInterrupt:  # (merge says which files it refreshed before one came; each file is whole)
        print("devmem: interrupted (Ctrl-C)", file=sys.stderr)
        return 130  # as a shell reports a command ended by SIGINT
    return 2
