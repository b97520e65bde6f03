"""The pytest plugin: options, the `devmem` marker and fixture, and one manager that glues regime,
pool, sources, records and reports together. Module-level hooks only register the manager."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, Mapping

import pytest

from ..gate.baseline import BaselineFormatError, BaselineStore
from ..gate.refresh import refresh_baselines
from ..gate.stale import SuiteShape, stale_baselines
from ..model.device import DEFAULT_COMPUTE_CAPABILITY, Device, open_device
from ..errors import DevmemError, OutOfMemoryError
from ..files import path_in, write_atomic
from ..gate.marks import MARK_NAME, MARKER_HELP, MarkSpec, compiles_verdict, fragmentation_verdict, leak_verdict, limit_verdict, parse_mark
from ..model.pool import Policy, make_pool
from ..model.pool.base import Pool
from ..capture.measurement import Captured, Measurement
from ..capture.tensorflow.cpu_allocator import ONEDNN_VARIABLE, CpuAllocatorSetting, prepare_cpu_allocator
from ..capture.tensorflow.cpu_allocator import VARIABLE as TF_CPU_BFC
from ..gate.record import TestRecord
from ..model.regime import Regime, configure_tensorflow_gpus, jax_backend_started, restore
from ..present.report import benchmark_json, render
from ..present.text import terminal_lines
from .compile_target import CompileTarget
from .compile_target import resolve as resolve_compile_target
from .settings import Settings, add_options, load_settings
from ..gate.tolerance import parse_tolerance
from ..capture.pool import RecordingPool
from ..gate.verdicts import baseline_verdict, oom_verdict
from .recording import make_record
from .shard import shard_of
from .workers import LargestTests, SideBySide, check_side_by_side, plan_workers, workers_per_device
from ..units import format_size

if TYPE_CHECKING:  # isolation pulls in subprocess and json: imported only when a test needs a child
    from ..model.frameworks import AllocatorSetup
    from ..model.trace import Trace
    from .isolation import ChildEventWriter, ChildOutcome

PLUGIN_NAME = "devmem-manager"
DEFAULT_REGIME = Regime.of("prealloc")
"""A measured test's regime when neither --devmem-mode nor its marker names one: JAX's and
TensorFlow's own defaults, which prealloc models (records and baselines say `prealloc`)."""
DEFAULT_FIXTURE_POLICY = DEFAULT_REGIME.policy

mark_key = pytest.StashKey["MarkSpec | str | None"]()
regime_key = pytest.StashKey["Regime | None"]()
measured_key = pytest.StashKey[bool]()
captured_key = pytest.StashKey[Captured]()
oom_key = pytest.StashKey["str | None"]()  # the out-of-memory error the test raised, as text
_early_env_key = pytest.StashKey["dict[str, str | None]"]()  # framework variables before this session's regime
_conflicts_key = pytest.StashKey["list[str]"]()  # the user's JAX variables that contradict the session regime
_gpu_env_key = pytest.StashKey["str | None"]()  # CUDA_VISIBLE_DEVICES before this worker's GPU was chosen
_deviceless_env_key = pytest.StashKey["Mapping[str, str | None]"]()  # what the deviceless GPU compile's setting replaced
_tensorflow_cpu_key = pytest.StashKey[CpuAllocatorSetting]()  # TF_CPU_ALLOCATOR_USE_BFC, as this session left it


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Set the session regime's JAX/TensorFlow variables before any conftest can import a framework."""
    try:
        settings = load_settings(early_config)
    except pytest.UsageError:
        return  # pytest_configure reports it properly
    if settings.regime is not None:
        conflicts = settings.regime.conflicts(os.environ)
        early_config.stash[_conflicts_key] = conflicts
        if conflicts:
            return  # pytest_configure stops the run with them
    if settings.effective_regime is not None:
        early_config.stash[_early_env_key] = settings.effective_regime.apply()
    early_config.stash[_tensorflow_cpu_key] = prepare_cpu_allocator(os.environ)  # before TensorFlow creates its CPU device
    early_config.stash[_deviceless_env_key] = _prepare_deviceless_compile()  # before JAX starts its backends
    _apply_worker_gpu(early_config, settings)


def _prepare_deviceless_compile() -> dict[str, str | None]:
    """Where XLA:GPU's compiler is installed (the gpu-compile extra) on a machine without a GPU: the
    setting that lets it register while JAX runs on the CPU, without a traceback at JAX's start
    (capture/gpu_compile.py); the previous values, to put back."""
    from ..capture.gpu_compile import cuda_compiler_problem, environment_for_deviceless_compile

    if cuda_compiler_problem() is not None:
        return {}
    from .workers import gpu_count

    wanted = environment_for_deviceless_compile(os.environ, gpu_count() > 0)
    previous = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    return previous


def _restore_tensorflow_cpu(config: pytest.Config) -> None:
    setting = config.stash.get(_tensorflow_cpu_key, None)
    if setting is not None and setting.set_here:
        restore({TF_CPU_BFC: None})
    if setting is not None and setting.onednn_set_here:
        restore({ONEDNN_VARIABLE: None})
    if _deviceless_env_key in config.stash:
        restore(config.stash[_deviceless_env_key])


def _apply_worker_gpu(config: pytest.Config, settings: Settings) -> None:
    """Give this xdist worker its own GPU, before any framework initialises CUDA."""
    plan = settings.worker_plan
    if plan is None or plan.cuda_visible_devices is None or _gpu_env_key in config.stash:
        return
    config.stash[_gpu_env_key] = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = plan.cuda_visible_devices



def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    try:
        settings = load_settings(config)
        if settings.regime is not None:
            conflicts = config.stash.get(_conflicts_key, None)
            if conflicts is None:  # the plugin came too late for the early check: the environment is still the user's
                conflicts = settings.regime.conflicts(os.environ)
            if conflicts:
                raise pytest.UsageError("; ".join(conflicts))
        try:
            device = open_device(settings.device_spec)
        except DevmemError as exc:
            raise pytest.UsageError(f"{exc} (from {settings.device_from})") from None
        target = _compile_target(config, settings, device)
        try:
            store = BaselineStore(settings.baselines, device.device_class).load()
        except BaselineFormatError as exc:
            raise pytest.UsageError(terminal_lines(f"corrupt or foreign baseline file: {exc}")) from None
        child = None
        if config.getoption("devmem_child_output", default=None) is not None or config.getoption("devmem_child_nodes", default=None) is not None:
            from .isolation import open_child_channel

            child = open_child_channel(config)
    except pytest.UsageError:
        early = config.stash.get(_early_env_key, None)
        if early is not None:  # undo what pytest_load_initial_conftests set
            restore(early)
        _restore_tensorflow_cpu(config)
        raise
    if _tensorflow_cpu_key not in config.stash:  # the plugin came too late for the early hook
        config.stash[_tensorflow_cpu_key] = prepare_cpu_allocator(os.environ)
    _apply_worker_gpu(config, settings)
    manager = DevmemManager(config, settings, device, store, child, target)
    config.pluginmanager.register(manager, PLUGIN_NAME)


def _compile_target(config: pytest.Config, settings: Settings, device: Device) -> CompileTarget:
    """Whose compile sizes JAX's executables this session; the device class says so where the sizes
    are not the device's own (so a baseline of one compile's sizes is never compared with another's)."""
    from ..capture.gpu_compile import cuda_compiler_problem

    target = resolve_compile_target(settings.compile_target, device, cuda_compiler_problem())
    if target.class_suffix and hasattr(device, "class_suffix"):
        device.class_suffix = target.class_suffix
    return target


@dataclass
class DevmemFixture:
    """What the `devmem` fixture gives a test: its regime, its pool on the session's device."""

    regime: Regime  # prealloc where neither --devmem-mode nor the marker names one
    pool: Pool
    device: Device


class DevmemManager:
    """All per-session state: the device, the sources, the records, the child processes."""

    def __init__(self, config: pytest.Config, settings: Settings, device: Device, store: BaselineStore, child: tuple[ChildEventWriter, set[str]] | None = None, target: CompileTarget | None = None) -> None:
        self.config = config
        self.settings = settings
        self.device = device
        self.store = store
        self.shape = SuiteShape()  # what pytest collected, before any selection: for stale baselines
        self.xdist_note = ""
        self.stale: list[str] = []
        self.workers_reported = 0  # xdist controller: workers that sent their results
        self._stale_from_workers: set[str] = set()
        self._largest_from_workers: list[tuple[int, str, Trace]] = []
        self.largest = LargestTests(_worker_count(config)) if hasattr(config, "workerinput") else None
        self.side_by_side: SideBySide | None = None
        self.baselines_written: list[str] = []
        self.write_problems: list[str] = []  # baselines or the report that could not be written
        self.autosaved: Path | None = None  # this run's report under .devmem/ (--devmem-autosave)
        self.unrecorded: dict[tuple[str, str], tuple[str, str]] = {}  # skipped at setup: (test, regime) -> (device, why)
        self.records: list[TestRecord] = []
        self.isolated: dict[Regime, list[pytest.Item]] = {}
        self.child_outcomes: dict[Regime, ChildOutcome] = {}
        self.compile_target = target or CompileTarget("cpu", None, "")
        self.measurement = Measurement(device, self._gpu_sizer())
        if settings.regime is not None:
            self.measurement.watch_frameworks()  # every test is measured: hook JAX before it runs anything
        self._previous_env: dict[str, str | None] | None = config.stash.get(_early_env_key, None)
        self._tensorflow_configured = False
        self.child_writer: ChildEventWriter | None = child[0] if child is not None else None
        self.child_nodes: set[str] = child[1] if child is not None else set()  # in a child: the tests it runs
        self._local_records: dict[str, TestRecord] = {}  # made in this process: no JSON round trip
        if settings.effective_regime is not None:
            if jax_backend_started():
                warnings.warn(
                    pytest.PytestWarning(f"JAX had already started before pytest-devmem could apply regime {settings.effective_regime.label}; its settings do not apply in this process"),
                    stacklevel=1,
                )
            previous = settings.effective_regime.apply()
            if self._previous_env is None:
                self._previous_env = previous
        self._plan_controller_workers()

    def _gpu_sizer(self) -> object | None:
        """The GPU sizer for the session's compile target, its results cached on disk in pytest's
        cache directory where there is one; None where JAX keeps its own sizes."""
        spec = self.compile_target.spec
        if spec is None:
            return None
        from ..capture.gpu_compile import GpuSizer

        cache = getattr(self.config, "cache", None)
        directory = None
        if cache is not None:
            try:
                directory = cache.mkdir("devmem-gpu-sizes")
            except OSError:
                directory = None
        return GpuSizer(spec, directory)

    def _plan_controller_workers(self) -> None:
        """On the xdist controller: say how workers will share the device, warn if they cannot."""
        if self.is_xdist_worker or self.is_child or self.settings.regime is None:
            return
        try:
            count = int(self.config.getoption("numprocesses", default=0) or 0)
        except (TypeError, ValueError):
            count = 0
        uses_gpu = getattr(self.device, "index", None) is not None
        from .workers import gpu_count

        plan = plan_workers(self.settings.regime, self.settings.fraction_chosen, 0, count, gpu_count() if uses_gpu else 0, uses_gpu)
        if plan.warning:
            plan_warning = plan.warning + self._crowding(count)
            self.xdist_note = plan_warning
            self.config.issue_config_time_warning(pytest.PytestWarning(plan_warning), stacklevel=2)
        else:
            self.xdist_note = plan.note

    def _crowding(self, count: int) -> str:
        """What each worker's JAX would really hold on this device, started one after the other."""
        from ..model.frameworks import AllocatorSetup
        from ..model.whatif import process_shares
        from .recording import machine_spec

        regime = self.settings.regime
        if regime is None or not regime.policy.preallocates:
            return ""
        shares = process_shares(machine_spec(self.device, self.settings.cuda_context_bytes), AllocatorSetup("jax", "prealloc", regime.fraction), count)
        held = ", ".join(f"worker {i + 1} {format_size(share)}" for i, share in enumerate(shares))
        return f"; on {self.device.name}, started one after the other, each JAX preallocation backs off to what is left: {held}"

    # -- session ------------------------------------------------------------------------

    @property
    def is_child(self) -> bool:
        return self.child_writer is not None

    @property
    def is_xdist_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.measurement.close()
        if self._previous_env is not None:
            restore(self._previous_env)
        if _gpu_env_key in config.stash:
            restore({"CUDA_VISIBLE_DEVICES": config.stash[_gpu_env_key]})
        _restore_tensorflow_cpu(config)
        if self.child_writer is not None:
            self.child_writer.close()
        close = getattr(self.device, "close", None)
        if close is not None:
            close()

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        regime = self.settings.regime.label if self.settings.regime else f"none (marked tests only, under {DEFAULT_REGIME.label} unless the marker names one)"
        lines = [f"devmem: device {self.device.name}, regime {regime}"]
        if self.compile_target.spec is not None or self.compile_target.class_suffix:
            lines.append(f"devmem: {self.compile_target.note}")
        if self.tensorflow_cpu is not None and _tensorflow_installed():
            lines.append(f"devmem: {self.tensorflow_cpu.describe()}")
        return lines

    @property
    def tensorflow_cpu(self) -> CpuAllocatorSetting | None:
        return self.config.stash.get(_tensorflow_cpu_key, None)

    # -- collection ---------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        """What each collector holds, as it collected it: the innermost wrapper, so before any
        plugin filters the result (--lf does); selection (-k, node ids, shards) comes later."""
        report = yield
        if report.passed:
            self.shape.expanded(collector.nodeid, [node.nodeid for node in report.result])
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> Generator[None, None, None]:
        """After every plugin has chosen (-k, shard plugins such as pytest-split, which run
        trylast): what this session runs is final, so each item's regime and its child group are
        set on the items that run. A child runs exactly the nodes its parent gave it, whatever a
        shard plugin on the inherited command line would choose."""
        collected = list(items) if self.is_child else []
        result = yield
        if self.is_child:
            self._keep_child_nodes(config, items, collected)
        self._prepare_items(config, items)
        return result

    def _prepare_items(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        session_regime = self.settings.regime
        timeouts = config.pluginmanager.hasplugin("timeout")  # pytest-timeout
        self.shape.add_items(item.nodeid for item in items)
        for item in items:
            marker = item.get_closest_marker(MARK_NAME)
            spec = parse_mark(marker.args, dict(marker.kwargs)) if marker is not None else None
            item.stash[mark_key] = spec
            item.stash[measured_key] = session_regime is not None or marker is not None
            regime = spec.regime(session_regime) if isinstance(spec, MarkSpec) else session_regime
            item.stash[regime_key] = regime
            if regime is not None and regime != session_regime and not self.is_child:
                self.isolated.setdefault(regime, []).append(item)
                if timeouts:  # the child gets --timeout and times each test itself; here one timer
                    item.add_marker(pytest.mark.timeout(0))  # would fire while waiting for the child

    def _keep_child_nodes(self, config: pytest.Config, items: list[pytest.Item], collected: list[pytest.Item]) -> None:
        wanted = self.child_nodes
        keep = [item for item in collected if item.nodeid in wanted]
        dropped = [item for item in items if item.nodeid not in wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    # -- running ------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        """Tests under another regime: run their regime's group in a child, then replay the reports."""
        regime = item.stash.get(regime_key, None)
        if regime is None or regime == self.settings.regime or self.is_child:
            return None
        outcome = self.child_outcomes.get(regime)
        if outcome is None or item.nodeid not in outcome.reports:
            from .isolation import run_in_children

            group = [item] if self.is_xdist_worker else self.isolated.get(regime, [item])
            fresh = run_in_children(self.config, regime, self.settings, group, self._previous_env)
            if outcome is None:
                self.child_outcomes[regime] = fresh
            else:
                outcome.reports.update(fresh.reports)
                outcome.children_started += fresh.children_started
            outcome = self.child_outcomes[regime]
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in outcome.reports.pop(item.nodeid, []):
            ihook.pytest_runtest_logreport(report=report)
        self._teardown_for(item, nextitem)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    @staticmethod
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

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        """A test failed by pytest-devmem alone shows `M` and MEMORY PROBLEMS, as pytest-memray's do."""
        if report.when == "call" and getattr(report, "devmem_failure", False):
            return "failed", "M", ("MEMORY PROBLEMS", {"red": True})
        return None

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        if self.child_writer is not None:
            self.child_writer.start(nodeid)

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        if self.child_writer is not None:
            self.child_writer.finish(nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        __tracebackhide__ = True
        spec = item.stash.get(mark_key, None)
        if isinstance(spec, str):
            raise pytest.UsageError(spec)
        if not item.stash.get(measured_key, False):
            return (yield)
        self._configure_tensorflow_once()
        item.stash[oom_key] = None
        self.measurement.start()  # before fixtures: what a function-scoped fixture allocates counts
        try:
            return (yield)
        except BaseException:  # no call phase will stop the measurement: stop it here
            self.measurement.stop()
            raise

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Generator[None, object, object]:
        """A fixture shared by several tests is set up by whichever runs first: its memory belongs to
        none of them, so it stays out of the trace (test order must not change a test's figures)."""
        if fixturedef.scope == "function" or not self.measurement.recorder.recording:
            return (yield)
        with self.measurement.recorder.paused():
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        if not item.stash.get(measured_key, False):
            return (yield)
        self.measurement.recorder.mark()  # what the test itself allocates, after its fixtures
        try:
            return (yield)
        except BaseException as exc:
            item.stash[oom_key] = _out_of_memory_text(exc)
            raise
        finally:
            item.stash[captured_key] = self.measurement.stop(check_leaks=self._max_leak(item) is not None)

    def _max_leak(self, item: pytest.Item) -> int | None:
        spec = item.stash.get(mark_key, None)
        return spec.max_leak if isinstance(spec, MarkSpec) and spec.max_leak is not None else self.settings.max_leak

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when == "setup" and report.skipped and item.stash.get(measured_key, False):
            regime = item.stash.get(regime_key, None)
            why = str(report.longrepr[2]).removeprefix("Skipped: ") if isinstance(report.longrepr, tuple) else "skipped"
            report.devmem_unrecorded = [(regime or DEFAULT_REGIME).label, f"skipped: {why}"]  # type: ignore[attr-defined]
        if call.when != "call" or not item.stash.get(measured_key, False):
            return report
        captured = item.stash.get(captured_key, None)
        if captured is None:  # a subtest's report, made while the test still runs: one test, one record
            return report
        del item.stash[captured_key]
        spec = item.stash.get(mark_key, None)
        limit = spec.limit if isinstance(spec, MarkSpec) and spec.limit is not None else self.settings.limit
        regime = item.stash.get(regime_key, None)
        policy = regime.policy if regime is not None else DEFAULT_FIXTURE_POLICY
        record = make_record(
            self.measurement,
            captured,
            test_id_of(item.nodeid, item.location[0]),
            (regime or DEFAULT_REGIME).label,
            policy,
            self.device,
            context_bytes=self.settings.cuda_context_bytes,
            outcome=report.outcome,
            real_oom=item.stash.get(oom_key, None),
            limit_bytes=limit,
            duration_s=call.duration,
            timeline=self.settings.artifacts_dir is not None,
            compile_target=self.compile_target.label if "jax" in sys.modules else None,
        )
        self._write_trace(record)
        self._analyse_trace(record, policy)
        failure = self._first_failure(item, spec, record, captured)
        if failure is not None:  # it quotes test ids, trace labels and baseline fields: nothing raw reaches the terminal
            failure = terminal_lines(failure)
        if failure is not None and report.outcome == "passed":
            failure += terminal_lines(self._leave_artifacts(record))
            report.outcome = "failed"
            report.longrepr = failure
            report.devmem_failure = True  # type: ignore[attr-defined]  # its own status letter, M
            record.outcome = "failed"
            record.failed_by_devmem = True
        elif failure is not None:  # failed already (a real OOM, say): add what pytest-devmem found
            report.sections.append(("pytest-devmem", failure))
        if self.largest is not None and regime == self.settings.regime:  # ran in this worker's own process
            self.largest.offer(record.test_id, record.peak_bytes_in_use, record.trace_events)
        if self.is_child or self.is_xdist_worker:  # the record travels to another process with the report
            report.devmem_record = record.to_json()  # type: ignore[attr-defined]
        else:
            self._local_records[item.nodeid] = record
        return report

    def _first_failure(self, item: pytest.Item, spec: MarkSpec | str | None, record: TestRecord, captured: Captured) -> str | None:
        """pytest-devmem's checks in order (out of memory, limit, recompiles, leak, baseline); the
        first failure's text, or None. Each check records what it found."""
        marked = spec if isinstance(spec, MarkSpec) else None
        failure = oom_verdict(record) or limit_verdict(record.peak_bytes_in_use, record.limit_bytes)
        if failure is None and marked is not None:
            failure = compiles_verdict(captured.compiled, marked.max_compiles)
        if failure is None:
            failure = leak_verdict(captured.kept, self._max_leak(item))
        if failure is None:
            bound = marked.max_fragmentation if marked is not None and marked.max_fragmentation is not None else self.settings.max_fragmentation
            failure = fragmentation_verdict(record.devices, bound)
        tolerance = parse_tolerance(marked.tolerance) if marked is not None and marked.tolerance is not None else self.settings.tolerance
        record.tolerance = tolerance.spec
        baseline_failure = baseline_verdict(record, self.store, tolerance, update=self.settings.update, strict=self.settings.strict)
        return failure or baseline_failure

    def _write_trace(self, record: TestRecord) -> None:
        """With --devmem-traces=DIR: the test's trace as an RMM-style CSV, named after the test and regime."""
        directory = self.settings.traces_dir
        if directory is None or record.trace_events is None:
            return
        path = path_in(directory, f"{record.test_id}[{record.regime}]", ".csv")
        try:
            record.trace_events.write_csv(path)
        except OSError as exc:  # the test's outcome does not depend on it: say so, and go on
            warnings.warn(pytest.PytestWarning(terminal_lines(f"pytest-devmem could not write the trace of {record.test_id} to {path}: {exc.strerror or exc}")), stacklevel=1)
            return
        if record.trace is not None:
            record.trace["file"] = str(path)

    def _leave_artifacts(self, record: TestRecord) -> str:
        """With --devmem-artifacts=DIR: the failing test's trace and its picture there; the lines that say where."""
        directory = self.settings.artifacts_dir
        if directory is None or record.trace_events is None or record.run is None:
            return ""
        from ..model.timeline import build_view
        from ..present.plot import write_plot

        name = f"{record.test_id}[{record.regime}]"
        trace, picture = path_in(directory, name, ".csv"), path_in(directory, name, ".html")
        try:
            record.trace_events.write_csv(trace)
            view = build_view(record.run, record.trace_events, record.regime)
            write_plot(view, picture, f"{record.test_id} under {record.regime} on {self.device.name}")
        except OSError as exc:
            return f"\n  artifacts not written to {directory}: {exc.strerror or exc}"
        return f"\n  artifacts: {self.shown(picture)} (timeline and memory map), {self.shown(trace)} (trace)"

    def _analyse_trace(self, record: TestRecord, policy: Policy) -> None:
        """Replay the test's trace: the smallest prealloc fraction it needs, and how a device of another size fares."""
        if not self.settings.traces_needed or record.trace_events is None or not len(record.trace_events):
            return
        from dataclasses import replace

        from ..model.whatif import MIN_FRACTION_FLOOR, find_min_fraction, what_if
        from .recording import allocator_setups, machine_spec

        trace = record.trace_events
        setups = allocator_setups(policy, self.device)
        spec = machine_spec(self.device, self.settings.cuda_context_bytes)
        analysis: dict[str, object] = {"trace_events": len(trace), "peak_live_bytes": trace.peak_live_bytes()}
        if self.settings.find_min_fraction:
            smallest = find_min_fraction(trace, setups, spec)
            analysis["min_fraction"] = smallest
            analysis["min_fraction_at_floor"] = smallest == MIN_FRACTION_FLOOR  # "0.01 or less": the search stops there
        if self.settings.what_if is not None:
            answer = what_if(trace, setups, replace(spec, capacity=self.settings.what_if))
            analysis["what_if"] = {"capacity": answer.capacity, "ok": answer.ok, "message": answer.message}
        record.analysis = analysis

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.child_writer is not None:
            self.child_writer.report(report)
        unrecorded = getattr(report, "devmem_unrecorded", None)
        if isinstance(unrecorded, list) and len(unrecorded) == 2:  # from here, a worker or a child
            self.unrecorded[(test_id_of(report.nodeid, report.location[0]), str(unrecorded[0]))] = (self.device.name, str(unrecorded[1]))
        if report.when != "call":
            return
        local = self._local_records.pop(report.nodeid, None)
        if local is not None:
            self.records.append(local)
            return
        data = getattr(report, "devmem_record", None)
        if data is not None:
            self.records.append(TestRecord.from_json(data))

    def _configure_tensorflow_once(self) -> None:
        if self._tensorflow_configured or "tensorflow" not in sys.modules or self.settings.regime is None:
            return
        self._tensorflow_configured = True
        problem = configure_tensorflow_gpus(self.settings.effective_regime, self.device.capacity)  # type: ignore[arg-type]
        if problem:
            warnings.warn(pytest.PytestWarning(problem), stacklevel=1)

    # -- fixture ------------------------------------------------------------------------

    def make_fixture(self, item: pytest.Item) -> DevmemFixture:
        regime = item.stash.get(regime_key, None)
        if regime is not None and regime == self.settings.regime:
            regime = self.settings.effective_regime  # this xdist worker's share of the session regime
        policy = regime.policy if regime is not None else DEFAULT_FIXTURE_POLICY
        pool: Pool = make_pool(self.device, policy)
        if item.stash.get(measured_key, False):
            self.measurement.pool_source.attach(pool)
        # records only while the test is measured, and refuses to be used once the test has ended
        return DevmemFixture(regime or DEFAULT_REGIME, RecordingPool(pool, self.measurement.recorder), self.device)  # type: ignore[arg-type]

    # -- reporting ----------------------------------------------------------------------

    def session_info(self) -> dict[str, object]:
        from .. import __version__

        versions = {"pytest-devmem": __version__}
        for package in ("jax", "jaxlib", "tensorflow", "tensorflow-cpu", "nvidia-ml-py"):
            try:
                versions[package] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                pass
        from ..model.driver_info import driver_info
        from ..provenance import provenance

        driver = driver_info()
        tensorflow_cpu = self.tensorflow_cpu
        return {
            "device": self.device.name,
            "device_class": self.device.device_class,
            "device_capacity_bytes": self.device.capacity,
            "device_compute_capability": list(getattr(self.device, "compute_capability", DEFAULT_COMPUTE_CAPABILITY)),
            "regime": self.settings.regime.label if self.settings.regime else None,
            "versions": versions,
            **({"tensorflow_cpu_allocator": tensorflow_cpu.describe()} if tensorflow_cpu is not None and any(name.startswith("tensorflow") for name in versions) else {}),
            **({"compile_target": self.compile_target.to_json()} if "jax" in versions else {}),
            **({"shard": shard} if (shard := shard_of(self.config)) is not None else {}),
            **provenance(self.config.rootpath, versions, self.device.device_class, {"driver_version": driver.driver_version, "cuda_version": driver.cuda_version}),
        }

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if (self.records or self.stale or self.side_by_side is not None) and not self.is_child and not self.is_xdist_worker:
            from ..present.summary import SessionSummary

            SessionSummary(self, terminalreporter, everything=config.getoption("verbose", 0) > 0).write()
            problem = self.tensorflow_cpu.problem() if self.tensorflow_cpu is not None else None
            if problem and any(not reading.unused for record in self.records for name, reading in record.sources.items() if name == "tensorflow"):
                terminalreporter.write_line(f"pytest-devmem: {problem}", yellow=True)

    def shown(self, path: object) -> str:
        """A path relative to where pytest was started, when it lies below it."""
        try:
            return str(Path(str(path)).relative_to(self.config.invocation_params.dir))
        except ValueError:
            return str(path)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """pytest-xdist's controller: what a worker sent when it finished (its stale baselines, its
        largest tests' traces); a worker that crashed sends nothing."""
        output = getattr(node, "workeroutput", None)
        sent = output.get("devmem") if isinstance(output, dict) else None
        if not isinstance(sent, dict):
            return
        self.workers_reported += 1
        stale = sent.get("stale")
        if isinstance(stale, list):
            self._stale_from_workers.update(str(name) for name in stale)
        self._largest_from_workers += LargestTests.from_json(sent.get("largest"))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.records.sort(key=lambda r: r.test_id)  # once, for the summary and the report
        if self.is_child:
            return
        if self.is_xdist_worker:  # only the controller writes: every record reaches it, and this
            self.config.workeroutput["devmem"] = {  # type: ignore[attr-defined]
                "stale": stale_baselines(self.store.entries(), self.shape),
                "largest": self.largest.to_json() if self.largest is not None else [],
            }
            return
        info = self.session_info()
        if self.settings.update:
            written, problems = refresh_baselines(self.store, self.records, info["versions"], self.unrecorded)  # type: ignore[arg-type]
            self.baselines_written = [str(path) for path in written]
            self.write_problems += [f"baseline not written: {problem}" for problem in problems]
        self.stale = sorted(set(stale_baselines(self.store.entries(), self.shape)) | self._stale_from_workers)
        if self.stale and self.settings.strict and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self.side_by_side = self._check_side_by_side()
        if self.side_by_side is not None and not self.side_by_side.fits and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        unrecorded = self.unrecorded_json()
        if self.settings.report_path is not None:
            try:
                write_atomic(self.settings.report_path, render(self.settings.report_path, self.records, info, unrecorded))
            except OSError as exc:
                self.write_problems.append(f"report not written: {self.settings.report_path}: {exc.strerror or exc}")
        if self.settings.benchmark_json is not None:
            try:
                write_atomic(self.settings.benchmark_json, benchmark_json(self.records))
            except OSError as exc:
                self.write_problems.append(f"benchmark JSON not written: {self.settings.benchmark_json}: {exc.strerror or exc}")
        if self.settings.autosave and self.records:  # a run that measured nothing leaves no file
            from ..present.autosave import autosave

            try:
                self.autosaved = autosave(self.config.rootpath, render("report.json", self.records, info, unrecorded), info)
            except OSError as exc:
                self.write_problems.append(f"report not autosaved: {exc.filename or self.config.rootpath}: {exc.strerror or exc}")
        if self.write_problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # what the user asked to be stored is not: CI must see it

    def unrecorded_json(self) -> list[dict[str, str]]:
        """The measured tests skipped at setup, for the report: a refresh from reports
        (`devmem merge --baselines`) stores them as `--devmem-update` does."""
        return [{"test_id": test_id, "regime": regime, "device": device, "reason": reason} for (test_id, regime), (device, reason) in sorted(self.unrecorded.items())]

    def _check_side_by_side(self) -> SideBySide | None:
        """xdist controller: the suite's largest tests replayed at once, as the workers sharing a
        device may run them (see plugin/workers.py)."""
        if self.workers_reported < 2 or len(self._largest_from_workers) < 2:
            return None
        from .recording import allocator_setups, machine_spec

        from .workers import gpu_count

        uses_gpu = getattr(self.device, "index", None) is not None
        gpus = gpu_count() if uses_gpu else 0
        sharing = workers_per_device(self.workers_reported, gpus, uses_gpu)

        def setups_for(count: int) -> tuple[str, dict[str, AllocatorSetup]]:
            if uses_gpu and gpus > 1:  # each worker keeps the session regime on its GPU
                regime = self.settings.regime
            else:
                regime = plan_workers(self.settings.regime, self.settings.fraction_chosen, 0, count, 0, False).regime
            policy = regime.policy if regime is not None else DEFAULT_FIXTURE_POLICY
            return policy.label, allocator_setups(policy, self.device)

        return check_side_by_side(self._largest_from_workers, sharing, setups_for, machine_spec(self.device, self.settings.cuda_context_bytes))


def _worker_count(config: pytest.Config) -> int:
    """The number of pytest-xdist workers, as a worker is told."""
    count = getattr(config, "workerinput", {}).get("workercount")
    return count if isinstance(count, int) and count > 0 else 1


def _tensorflow_installed() -> bool:
    if "tensorflow" in sys.modules:
        return True
    import importlib.util

    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


def test_id_of(nodeid: str, path: str) -> str:
    """The id records and baselines know a test by: its node id; for a test outside the rootdir,
    which pytest names `::test` without its file, the file's path from the rootdir (`path`, the
    item's location) in front, so two such tests never share an id or a baseline file."""
    if not nodeid.startswith("::"):
        return nodeid
    return path.replace(os.sep, "/") + nodeid


def _out_of_memory_text(exc: BaseException) -> str | None:
    """The first line of our pool's OOM, or of a framework's (XLA's RESOURCE_EXHAUSTED, TensorFlow's
    ResourceExhaustedError); None for any other error."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (OutOfMemoryError, MemoryError)) or "RESOURCE_EXHAUSTED" in text or "ResourceExhausted" in text or "out of memory" in text.lower():
        return text.splitlines()[0][:500]
    return None


@pytest.fixture
def devmem(request: pytest.FixtureRequest) -> Generator[DevmemFixture, None, None]:
    """The test's regime and a pool under it on the session's device; the pool is closed afterwards."""
    manager = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    if not isinstance(manager, DevmemManager):
        raise pytest.UsageError("the devmem fixture needs the pytest-devmem plugin, which is disabled here (-p no:devmem?)")
    fixture = manager.make_fixture(request.node)
    try:
        yield fixture
    finally:
        fixture.pool.close()
