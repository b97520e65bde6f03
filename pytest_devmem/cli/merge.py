"""`devmem merge REPORT... -o MERGED.json [--baselines DIR]`: one report from CI shards' reports, and
the baselines refreshed from it as one `--devmem-update` of the whole suite would write them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import InputError
from ..files import write_atomic
from ..gate.baseline import BaselineStore
from ..gate.record import TestRecord
from ..gate.refresh import Refresh, refresh_baselines
from ..present.text import terminal
from .common import add_setting, merged

HELP = "Merge JSON reports of CI shards into one; refresh baselines from them (--baselines)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", type=Path, nargs="+", help="JSON reports (--devmem-report=FILE.json), one per shard")
    parser.add_argument("-o", "--output", type=Path, default=None, help="Write the merged report to FILE.json")
    add_setting(
        parser,
        "baselines",
        "Also refresh the baseline files under DIR from the merged report, as one --devmem-update of the whole suite would",
        type=Path,
    )
    parser.add_argument(
        "--same-run",
        action="store_true",
        help="Refuse reports of different commits, CI runs or versions (by default a warning)",
    )
    parser.add_argument(
        "--partial",
        action="store_true",
        help="The reports are part of a split suite on purpose (some groups left out): merge them without the others",
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """One report from several; with `--baselines`, those files refreshed from it as one
    `--devmem-update` of the whole suite would write them. Everything is checked before anything is
    written."""
    reports, output, baselines = args.reports, args.output, args.baselines
    if output is None and baselines is None:
        raise InputError("nothing to write: give -o MERGED.json, --baselines DIR, or both")
    if output is not None and output.suffix.lower() != ".json":
        raise InputError(f"{output}: the merged report is a .json file")
    if baselines is not None and os.path.lexists(baselines) and not baselines.is_dir():
        raise InputError(
            f"{baselines}: not a directory: --baselines names the directory of baseline files to refresh (such as baselines/; made when missing)"
        )
    # a set with a group missing would refresh or gate only part of the suite
    document = merged(reports, f"the merged set of {len(reports)} report(s)", args.same_run, args.partial)
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
        try:
            done = refresh()
        except KeyboardInterrupt:  # Ctrl-C: each file is whole (written atomically); say which were refreshed
            changed = sorted(path for path, data in _file_bytes(baselines).items() if before.get(path) != data)  # type: ignore[arg-type]
            print(
                f"devmem: interrupted: {len(changed)} baseline file(s) refreshed before it, each whole; "
                "every other file is as it was (run the merge again to refresh the rest)"
                + "".join(f"\n  refreshed: {path}" for path in changed),
                file=sys.stderr,
            )
            return 130  # as a shell reports a command ended by SIGINT
        for path in done.written:
            print(f"baseline {'unchanged' if before.get(path) == _read_bytes(path) else 'written'}: {path}")
        for test_id, regime, why in done.left_out:  # stored without figures, or with the figures it had
            print(f"not refreshed: {terminal(test_id)} [{terminal(regime)}]: {why}")
        for problem in done.problems:
            print(f"devmem: baseline not written: {problem}", file=sys.stderr)
        if done.problems:
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


def prepare_baselines(document: dict[str, object], directory: Path) -> Callable[[], Refresh]:
    """Baseline files under `directory` refreshed from a (merged) report's records, by the same rule
    and into the same bytes as `--devmem-update` on the session that wrote the report: the refresh,
    checked and with the stored files read (an InputError or BaselineFormatError now, before
    anything is written); calling it writes."""
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
