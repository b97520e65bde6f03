"""`--devmem-targets`: the measured tests run once more on each other target, to show where each fits.

A target's regime is fixed for a process once JAX or TensorFlow start, and so is the compile that
sizes JAX's executables for it; so each target gets child processes of its own (isolation.py), one
per target and regime, not one per test: the tests this process ran, under `--devmem-device=TARGET`,
the regime `model.targets.regime_on_target` gives (each row still the test's session regime), and the compile target `auto` (a GPU or TPU
preset sized by its own deviceless compile, `sim:SIZE` by the CPU's). The children compare with no
baseline, write none, and fail nothing here: their records become rows of the targets table, never
the session's records. Under pytest-xdist each worker reruns the tests it ran and sends the rows
to the controller as plain JSON."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ..gate.record import TestRecord
from ..gate.targets import Target, TargetResult, TargetTable
from ..hardware.devices import open_device
from ..model.device import Device
from ..model.regime import Regime
from ..model.targets import regime_on_target
from ..options import OPTION
from .isolation import ChildExtras, ChildOutcome, run_in_children
from .items import id_of_test, measured, regime_of, skip_text
from .settings import Settings

SWITCHED_OFF = tuple(OPTION[name] for name in ("strict", "update", "find-min-fraction", "autosave"))
"""The session's switches a target's child runs without (it gates nothing and writes nothing): its
settings have them off, its command line drops their flags, and its environment sets them to 0,
where the user set them there or in the ini file (the environment wins over the ini)."""


def table_columns(session_device: str, session_capacity: int, targets: Sequence[str]) -> list[Target]:
    """The session's device first (its records are its column), then each target not the same device."""
    columns = [Target(session_device, session_capacity, session=True)]
    for name in targets:
        if name != session_device:
            columns.append(Target(name, open_device(name).capacity))
    return columns


def session_results(records: Sequence[TestRecord], device: str, capacity: int) -> list[TargetResult]:
    """The session's own records as the table's first column."""
    return [TargetResult.from_record(record, device, capacity) for record in records]


def rerun_groups(
    items: Sequence[pytest.Item], columns: Sequence[Target]
) -> list[tuple[Target, Regime, list[pytest.Item]]]:
    """One group per target and regime (the children to start), in the targets' order."""
    groups: list[tuple[Target, Regime, list[pytest.Item]]] = []
    for target in columns:
        if target.session:
            continue
        by_regime: dict[Regime, list[pytest.Item]] = {}
        for item in items:
            if measured(item):
                by_regime.setdefault(regime_on_target(target.name, regime_of(item)), []).append(item)
        groups += [(target, regime, group) for regime, group in by_regime.items()]
    return groups


def rerun_on_targets(
    config: pytest.Config,
    settings: Settings,
    items: Sequence[pytest.Item],
    columns: Sequence[Target],
    original_environment: dict[str, str | None] | None,
) -> tuple[list[TargetResult], int]:
    """Run `items` on every target that is not the session's device; their rows and the number of
    child processes started."""
    results: list[TargetResult] = []
    children = 0
    switched_off: dict[str, Any] = {option.name.replace("-", "_"): False for option in SWITCHED_OFF}
    with tempfile.TemporaryDirectory(prefix="devmem-targets-") as scratch:
        for target, regime, group in rerun_groups(items, columns):
            where = Path(scratch) / f"target{children}"
            child_settings = replace(
                settings,
                device_spec=target.name,
                baselines=where / "baselines",
                what_if=None,
                traces_dir=None,
                artifacts_dir=None,
                **switched_off,
            )
            arguments = ["--devmem-compile-target", "auto", *target_cache(config, target)]
            if settings.traces_dir is not None:  # the session's traces are its own: a target's go to scratch
                arguments += ["--devmem-traces", str(where / "traces")]
            if settings.artifacts_dir is not None:
                arguments += ["--devmem-artifacts", str(where / "artifacts")]
            extras = ChildExtras(
                arguments=tuple(arguments),
                dropped=tuple(option.option for option in SWITCHED_OFF),
                environment=tuple((option.env, "0") for option in SWITCHED_OFF),
            )
            outcome = run_in_children(config, regime, child_settings, group, original_environment, extras)
            children += outcome.children_started
            results += [result_of(item, target, regime, outcome) for item in group]
    return results, children


def target_cache(config: pytest.Config, target: Target) -> list[str]:
    """A cache directory of the target's own for its children, kept under the session's pytest cache,
    so a GPU's or TPU's deviceless compiles are made once across runs (the session's last-failed
    state stays apart); none where pytest's cache is off."""
    cache = getattr(config, "cache", None)
    if cache is None:
        return []
    try:
        directory = cache.mkdir("devmem-targets") / "".join(
            ch if ch.isalnum() or ch in "-." else "_" for ch in target.name
        )
    except OSError:
        return []
    return ["-o", f"cache_dir={directory}"]


def result_of(item: pytest.Item, target: Target, regime: Regime, outcome: ChildOutcome) -> TargetResult:
    """The cell of one test on one target: its record from the child's call report, or why there is
    none; in the row of the regime the session ran the test under, whatever `regime` ran it there
    (a TPU's own)."""
    reports = outcome.reports.get(item.nodeid, [])
    test_id = id_of_test(item.nodeid, item.location[0])
    session_regime = regime_of(item).label
    for report in reports:
        data = getattr(report, "devmem_record", None)
        if report.when == "call" and isinstance(data, dict):
            return TargetResult.from_record(
                TestRecord.from_json(data),
                target.name,
                target.capacity_bytes,
                why_not_measured(reports),
                session_regime=session_regime,
            )
    return TargetResult.not_measured(
        test_id,
        target.name,
        regime.label,
        target.capacity_bytes,
        why_not_measured(reports),
        outcome=_outcome(reports),
        session_regime=session_regime,
    )


def why_not_measured(reports: Sequence[pytest.TestReport]) -> str:
    """In the words of the test's reports there: skipped (with the reason), an error before the test
    ran, or the child process that died."""
    for report in reports:
        if report.skipped:
            return skip_text(report)
        if report.failed:
            lines = [line.strip() for line in report.longreprtext.splitlines() if line.strip()]
            errors = [line.removeprefix("E").strip() for line in lines if line.startswith("E ")]
            text = (errors or lines or ["no details"])[0]  # the error's own line: pytest's first E line
            return f"{'error' if report.when != 'call' else 'failed'} at {report.when}: {text[:300]}"
    return "no record came back from the target's run"


def _outcome(reports: Sequence[pytest.TestReport]) -> str | None:
    for report in reports:
        if report.failed or report.skipped:
            return report.outcome
    return None


def rerun_measured(
    config: pytest.Config,
    settings: Settings,
    device: Device,
    items: Sequence[pytest.Item],
    original_environment: dict[str, str | None] | None,
    interrupted: bool,
) -> TargetTable:
    """--devmem-targets: the measured tests this process ran (`items`), once more on each other
    target, said on the terminal first: their rows, the child processes started, and why they did
    not run ("" where they did), as a table without its targets (the session's results add them)."""
    if interrupted:
        return TargetTable(skipped="the session was interrupted: the tests were not run on the other targets")
    columns = table_columns(device.name, device.capacity, settings.targets)
    reruns = [target.name for target in columns if not target.session]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reruns and reporter is not None and not hasattr(config, "workerinput"):
        if config.get_verbosity() < 0:
            reporter.write_line("")  # -q leaves the progress line open
        reporter.write_line(
            f"devmem: running {len(items)} measured test(s) again on {len(reruns)} other target(s): {', '.join(reruns)} (--devmem-targets)"
        )
    results, children = rerun_on_targets(config, settings, items, columns, original_environment)
    return TargetTable([], results, children)
