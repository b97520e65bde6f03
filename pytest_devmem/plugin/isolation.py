"""Running tests whose regime differs from the session's in a child pytest process, one per regime.

The child is started with the regime's JAX/TensorFlow variables in its environment and the regime as
its session regime, runs exactly the listed tests, and streams one JSON line per event (start,
report, finish) to a file. The parent turns the lines back into TestReports, so outcomes,
tracebacks, captured output and measurement records appear as if the tests ran in place. A child
that dies mid-test fails that test with the exit status and the end of the child's output, and a
fresh child runs the tests that remain.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from ..errors import FileFormatError
from ..files import read_json
from ..model.regime import Regime
from .environment import restore, session_environment_key
from .settings import Settings

OUTPUT_TAIL_CHARS = 3000


@dataclass
class ChildOutcome:
    """What the child processes of one regime produced for each test, and how many were started."""

    reports: dict[str, list[pytest.TestReport]] = field(default_factory=dict)
    children_started: int = 0


CHILD_OPTIONS_ERROR = (
    "--devmem-child-output and --devmem-child-nodes are pytest-devmem's own: it gives both to the child "
    "processes it starts for tests under another regime; they are not for use by hand"
)
MAX_NODES_BYTES = 256 * 2**20


def open_child_channel(config: pytest.Config) -> tuple[ChildEventWriter, set[str]] | None:
    """In a child process: where to send its events, and the node ids it is to run. None in any
    other process. A pytest.UsageError, never a hang or an INTERNALERROR, when the two options are
    not given together, or name something other than regular files (a FIFO would block)."""
    output, nodes = (
        config.getoption("devmem_child_output", default=None),
        config.getoption("devmem_child_nodes", default=None),
    )
    if output is None and nodes is None:
        return None
    if not output or not nodes:
        raise pytest.UsageError(CHILD_OPTIONS_ERROR)
    try:
        _, nodes_given = read_json(nodes, "list of tests for a child process", MAX_NODES_BYTES)
    except FileFormatError as exc:
        raise pytest.UsageError(f"invalid --devmem-child-nodes: {exc} ({CHILD_OPTIONS_ERROR})") from None
    if not isinstance(nodes_given, list) or not all(isinstance(node, str) for node in nodes_given):
        raise pytest.UsageError(
            f"invalid --devmem-child-nodes: {nodes}: not a JSON list of node ids ({CHILD_OPTIONS_ERROR})"
        )
    return ChildEventWriter(config, output), set(nodes_given)


class ChildEventWriter:
    """The child's side: appends one JSON line per event and flushes, so a crash loses nothing sent."""

    def __init__(self, config: pytest.Config, path: str) -> None:
        self._config = config
        self._file: IO[str] = _open_for_events(path)

    def _write(self, event: dict[str, Any]) -> None:
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()

    def start(self, nodeid: str) -> None:
        self._write({"event": "start", "nodeid": nodeid})

    def report(self, report: pytest.TestReport) -> None:
        data = self._config.hook.pytest_report_to_serializable(config=self._config, report=report)
        self._write({"event": "report", "nodeid": report.nodeid, "data": data})

    def finish(self, nodeid: str) -> None:
        self._write({"event": "finish", "nodeid": nodeid})

    def close(self) -> None:
        self._file.close()


def _open_for_events(path: str) -> IO[str]:
    """`path` opened for appending, when it is (or becomes) a regular file; opened without blocking,
    so that a FIFO nobody reads is an error rather than a hang."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError as exc:
        raise pytest.UsageError(
            f"invalid --devmem-child-output {path!r}: {exc.strerror or exc} ({CHILD_OPTIONS_ERROR})"
        ) from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise pytest.UsageError(f"invalid --devmem-child-output {path!r}: not a regular file ({CHILD_OPTIONS_ERROR})")
    if hasattr(os, "set_blocking"):
        os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "a", encoding="utf-8")


NOT_FOR_CHILDREN = (
    "--junitxml",
    "--junit-xml",
    "--junitprefix",
    "--html",
    "--report-log",
    "--resultlog",
    "--result-log",
    "--basetemp",
    "--cov-report",
    "--cov-config",
    "--json-report-file",
)
"""Options whose output a child would write over the parent's (reports, coverage data, the base
temporary directory the parent owns); each takes a value."""
NOT_FOR_CHILDREN_OPTIONAL_VALUE = ("--cov",)
"""Such options whose value may be left out (argparse's nargs='?': the next word is the value
unless it is an option)."""
NOT_FOR_CHILDREN_FLAGS = ("--self-contained-html", "--json-report", "--cov-append")


def parent_arguments(config: pytest.Config) -> list[str]:
    """The parent's own command line, less the test paths (the child gets its own) and the options
    that write files the parent owns: so a conftest's option (`--dataset=small`), `-o` overrides,
    `--timeout` and the like mean the same in the child."""
    positional = list(getattr(config.option, "file_or_dir", None) or [])
    arguments: list[str] = []
    words = list(config.invocation_params.args)
    index = 0
    while index < len(words):
        argument = words[index]
        index += 1
        name, has_value = argument.split("=", 1)[0], "=" in argument
        if name in NOT_FOR_CHILDREN_FLAGS or (
            has_value and name in (*NOT_FOR_CHILDREN, *NOT_FOR_CHILDREN_OPTIONAL_VALUE)
        ):
            continue
        if name in NOT_FOR_CHILDREN:
            index += 1  # and its value
            continue
        if name in NOT_FOR_CHILDREN_OPTIONAL_VALUE:
            if index < len(words) and not words[index].startswith("-"):
                index += 1
            continue
        if argument in positional:
            positional.remove(argument)
            continue
        arguments.append(argument)
    return arguments


def child_command(
    config: pytest.Config,
    regime: Regime,
    settings: Settings,
    output: Path,
    nodes: Path,
    paths: Sequence[str],
    extra: Sequence[str] = (),
    drop: Sequence[str] = (),
) -> list[str]:
    """The pytest command line of a child running `regime`: the parent's options (less the flags in
    `drop`), then the child's own and `extra` (later options win), with a cache of its own so the
    parent's last-failed state is untouched."""
    command = [sys.executable, "-m", "pytest", *paths, *(word for word in parent_arguments(config) if word not in drop)]
    command += ["--rootdir", str(config.rootpath), "-o", f"cache_dir={output.parent / 'cache'}", "-q"]
    if config.inipath is not None:
        command += ["-c", str(config.inipath)]
    if config.pluginmanager.hasplugin("xdist"):
        command += ["-n", "0"]
    capture = config.getoption("capture", default=None)
    if capture:
        command.append(f"--capture={capture}")
    command += [
        "--devmem-mode",
        regime.mode.value,
        "--devmem-fraction",
        repr(regime.fraction),
        "--devmem-device",
        settings.device_spec,
        "--devmem-child-output",
        str(output),
        "--devmem-child-nodes",
        str(nodes),
        "--devmem-baselines",
        str(settings.baselines),
        "--devmem-tolerance",
        settings.tolerance.spec,
    ]
    switches = {
        "--devmem-update": settings.update,  # the child compares without failing; only the parent writes
        "--devmem-strict": settings.strict,
        "--devmem-find-min-fraction": settings.find_min_fraction,
    }
    command += [flag for flag, on in switches.items() if on]
    values = {
        "--devmem-frameworks": ",".join(settings.frameworks) or None,
        "--devmem-what-if": settings.what_if,
        "--devmem-cuda-context": settings.cuda_context_bytes,
        "--devmem-limit": settings.limit,
        "--devmem-artifacts": settings.artifacts_dir,
        "--devmem-max-leak": settings.max_leak,
        "--devmem-traces": settings.traces_dir,
    }
    command += [word for flag, value in values.items() if value is not None for word in (flag, str(value))]
    return command + list(extra)


@dataclass(frozen=True)
class ChildExtras:
    """What a child gets beyond a regime's: options added after its own (`arguments`), the parent's
    flags it does not get (`dropped`), and variables set in its environment."""

    arguments: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()


def run_in_children(
    config: pytest.Config,
    regime: Regime,
    settings: Settings,
    items: Sequence[pytest.Item],
    original_environment: dict[str, str | None] | None = None,
    extras: ChildExtras = ChildExtras(),
) -> ChildOutcome:
    """Run `items` under `regime` in child processes until each has a result.

    `original_environment` holds the framework variables as the user set them, before this process
    applied its own regime; the child starts from those."""
    outcome = ChildOutcome()
    remaining = list(items)
    environment = dict(config.stash.get(session_environment_key, os.environ))  # never what a test set since
    restore(original_environment or {}, environment)  # the user's own values, not this process's regime
    regime.apply(environment)
    environment.update(extras.environment)
    environment.pop("PYTEST_XDIST_WORKER", None)  # the child is no xdist worker: no second split
    environment.pop("PYTEST_XDIST_WORKER_COUNT", None)
    with tempfile.TemporaryDirectory(prefix="devmem-child-") as scratch:
        while remaining:
            outcome.children_started += 1
            stem = Path(scratch) / f"child{outcome.children_started}"
            paths = sorted({os.path.relpath(item.path, config.invocation_params.dir) for item in remaining})
            command = child_command(
                config,
                regime,
                settings,
                stem.with_suffix(".jsonl"),
                stem.with_suffix(".nodes"),
                paths,
                extras.arguments,
                extras.dropped,
            )
            events, returncode, output = _run_child(config, remaining, stem, command, environment)
            started, finished = _apply_events(config, events, outcome)
            crashed = [item for item in remaining if item.nodeid in started and item.nodeid not in finished]
            for item in crashed:
                outcome.reports.setdefault(item.nodeid, []).append(_crash_report(item, regime, returncode, output))
            not_run = [item for item in remaining if item.nodeid not in started]
            if not_run and not started:  # the child ran nothing: retrying would loop forever
                for item in not_run:
                    outcome.reports[item.nodeid] = [_crash_report(item, regime, returncode, output, started=False)]
                not_run = []
            remaining = not_run
    return outcome


def _run_child(
    config: pytest.Config, items: Sequence[pytest.Item], stem: Path, command: list[str], environment: dict[str, str]
) -> tuple[list[dict[str, Any]], int, str]:
    """Run `command`, the child for `items` (their node ids in `stem`.nodes, its events in `stem`.jsonl,
    its output in `stem`.log): the events it wrote, its exit status and the end of its output."""
    events_path, log_path = stem.with_suffix(".jsonl"), stem.with_suffix(".log")
    stem.with_suffix(".nodes").write_text(
        json.dumps([item.nodeid for item in items]), encoding="utf-8"
    )  # JSON: a node id may hold a line break or end in a space
    with open(log_path, "w", encoding="utf-8") as log:
        completed = subprocess.run(
            command,
            cwd=config.invocation_params.dir,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    output = log_path.read_text(encoding="utf-8", errors="replace")[-OUTPUT_TAIL_CHARS:]
    events = []
    if events_path.exists():
        for line in events_path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a crash
                break
    return events, completed.returncode, output


def _apply_events(
    config: pytest.Config, events: list[dict[str, Any]], outcome: ChildOutcome
) -> tuple[set[str], set[str]]:
    started: set[str] = set()
    finished: set[str] = set()
    for event in events:
        nodeid = event["nodeid"]
        if event["event"] == "start":
            started.add(nodeid)
            outcome.reports[nodeid] = []
        elif event["event"] == "report":
            report = config.hook.pytest_report_from_serializable(config=config, data=event["data"])
            if isinstance(report.longrepr, list):  # a skip's (path, line, reason): JSON made the tuple a list
                report.longrepr = tuple(report.longrepr)
            outcome.reports.setdefault(nodeid, []).append(report)
        elif event["event"] == "finish":
            finished.add(nodeid)
    return started, finished


WINDOWS_STATUS = {
    0xC0000005: "STATUS_ACCESS_VIOLATION",
    0xC0000017: "STATUS_NO_MEMORY",
    0xC00000FD: "STATUS_STACK_OVERFLOW",
    0xC000012D: "STATUS_COMMITMENT_LIMIT",
    0xC000013A: "STATUS_CONTROL_C_EXIT",
    0xC0000409: "STATUS_STACK_BUFFER_OVERRUN",
}
"""NTSTATUS codes a Windows process that crashed exits with (there are no signals there; ntstatus.h)."""
WINDOWS_OUT_OF_MEMORY = (0xC0000017, 0xC000012D)


def describe_exit(returncode: int) -> str:
    """`killed by SIGKILL (signal 9)`, `exit status 3`, or on Windows `exit status 0xC0000017 (STATUS_NO_MEMORY)`."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name} (signal {-returncode})"
    if returncode >= 0xC0000000:  # an NTSTATUS error code: Windows' way of saying a process crashed
        status = WINDOWS_STATUS.get(returncode)
        return f"exit status {returncode:#010X}".replace("0X", "0x") + (f" ({status})" if status else "")
    return f"exit status {returncode}"


def looks_like_out_of_memory(returncode: int) -> bool:
    """A SIGKILL (what Linux's OOM killer sends; Windows has no SIGKILL) or Windows' out-of-memory statuses."""
    kill = getattr(signal, "SIGKILL", None)
    return (kill is not None and returncode == -kill) or returncode in WINDOWS_OUT_OF_MEMORY


def _crash_report(
    item: pytest.Item, regime: Regime, returncode: int, output: str, started: bool = True
) -> pytest.TestReport:
    where = "while running this test" if started else "before running this test"
    hint = " (a real out-of-memory kill looks like this)" if looks_like_out_of_memory(returncode) else ""
    message = (
        f"the child process for regime {regime.label} died {where}: {describe_exit(returncode)}{hint}\n"
        f"--- end of the child's output ---\n{output.rstrip() or '(no output)'}"
    )
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords={name: 1 for name in item.keywords},
        outcome="failed",
        longrepr=message,
        when="call",
    )


def replay_from_children(
    config: pytest.Config,
    settings: Settings,
    regime_env: dict[str, str | None] | None,
    outcomes: dict[Regime, ChildOutcome],
    group: list[pytest.Item],
    item: pytest.Item,
    nextitem: pytest.Item | None,
    regime: Regime,
) -> None:
    """Run `item`'s regime group in a child (once per regime; `group` is the item alone under
    xdist, where a worker does not know its whole group), then report the item's results here as
    if it had run in place, and tear down what the next item does not share. `outcomes` is the
    session's, per regime, filled here."""
    outcome = outcomes.get(regime)
    if outcome is None or item.nodeid not in outcome.reports:
        fresh = run_in_children(config, regime, settings, group, regime_env)
        if outcome is None:
            outcomes[regime] = fresh
        else:
            outcome.reports.update(fresh.reports)
            outcome.children_started += fresh.children_started
        outcome = outcomes[regime]
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in outcome.reports.pop(item.nodeid, []):
        ihook.pytest_runtest_logreport(report=report)
    _teardown_for(item, nextitem)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def _teardown_for(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Tear down the in-process fixtures that `nextitem` does not share, as pytest's runner would
    have done after this item; a failing finalizer is reported as this item's teardown error."""
    setup_state = getattr(item.session, "_setupstate", None)
    if setup_state is None:
        return
    call = pytest.CallInfo.from_call(lambda: setup_state.teardown_exact(nextitem), when="teardown")
    if call.excinfo is not None:
        report = item.ihook.pytest_runtest_makereport(item=item, call=call)
        item.ihook.pytest_runtest_logreport(report=report)
