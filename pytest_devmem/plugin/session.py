"""The plugin object of a session: its hooks read as the life of a test, top to bottom, and hand the
work to the module that owns it (items, measurement, checks, results, children, the summary)."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from ..capture.fixture_pool import RecordingPool
from ..capture.jax import jax_backend_started
from ..capture.measurement import Measurement
from ..compile_store import STORE_DIRECTORY
from ..gate.baseline import BaselineStore
from ..model.device import Device, DeviceKind
from ..model.pool import make_pool
from ..model.regime import Regime
from ..present.summary import SessionSummary
from ..present.text import terminal_lines
from .checks import Checks
from .compile_target import CompileTarget, gpu_sizer, sizer_counts
from .environment import (
    configure_tensorflow_gpus,
    early_env_key,
    interop_key,
    order_key,
    restore_all,
    session_environment_key,
    tensorflow_cpu_key,
    tensorflow_installed,
)
from .isolation import ChildEventWriter, ChildOutcome, replay_from_children
from .items import (
    captured_key,
    id_of_test,
    library_class_fixture,
    mark_key,
    measured,
    oom_key,
    out_of_memory_text,
    prepare_item,
    refusal_raised_at,
    regime_key,
    regime_of,
    skip_text,
)
from .results import SessionResults
from .settings import DevmemFixture, Settings
from .shared_fixtures import FixtureSetup, SharedFixtures
from .targets import rerun_measured
from .workers import LargestTests
from .xdist import controller_plan, ignore_shutdown_interrupt_in_jax_gc, worker_count

if TYPE_CHECKING:
    from ..capture.tensorflow.cpu_allocator import CpuAllocatorSetting


class DevmemSession:
    """Registered once per session by pytest_configure; holds what the session shares."""

    def __init__(
        self,
        config: pytest.Config,
        settings: Settings,
        device: Device,
        store: BaselineStore,
        target: CompileTarget,
        child: tuple[ChildEventWriter, set[str]] | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self.device = device
        self.compile_target = target
        self.measurement = Measurement(
            device,
            gpu_sizer(config, target, settings.cache_dir, store.directory / STORE_DIRECTORY, settings.verify_entries),
        )
        self.measurement.jax_capture.call_sites.root = os.path.join(str(config.rootpath), "")  # the user's lines
        self.checks = Checks(config, settings, device, store, target, self.measurement)
        self.results = SessionResults(config, settings, device, store, target)
        self.child_writer: ChildEventWriter | None = child[0] if child is not None else None
        self.child_nodes: set[str] = child[1] if child is not None else set()  # in a child: the tests it runs
        self.isolated: dict[Regime, list[pytest.Item]] = {}
        self.child_outcomes: dict[Regime, ChildOutcome] = {}
        self.largest = LargestTests(worker_count(config)) if self.is_xdist_worker else None
        self.target_items: list[pytest.Item] = []  # measured tests this process ran, to run again on --devmem-targets
        self.xdist_note = "" if self.is_xdist_worker or self.is_child else controller_plan(config, settings, device)
        self._tensorflow_configured = False
        self._frozen_in: str | None = None  # the module whose first measured test last thawed the collector
        self._shared_fixture_finished = False  # a fixture wider than a test was torn down since the last thaw
        self.shared_fixtures = SharedFixtures()
        self._measured_fixtures: set[str] = set()  # the fixtures the measured tests use
        self.regime_env: dict[str, str | None] | None = config.stash.get(
            early_env_key, None
        )  # what the regime replaced
        if settings.regime is not None:
            self.measurement.watch_frameworks()  # every test is measured: hook JAX before it runs anything
        if settings.effective_regime is not None and settings.sets_framework_variables:
            if jax_backend_started():
                warnings.warn(
                    pytest.PytestWarning(
                        f"JAX had already started before pytest-devmem could apply regime {settings.effective_regime.label}; its settings do not apply in this process"
                    ),
                    stacklevel=1,
                )
            previous = settings.effective_regime.apply()
            if self.regime_env is None:
                self.regime_env = previous

    @property
    def is_child(self) -> bool:
        return self.child_writer is not None

    @property
    def is_xdist_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    @property
    def tensorflow_cpu(self) -> CpuAllocatorSetting | None:
        return self.config.stash.get(tensorflow_cpu_key, None)

    # -- the session starts ---------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        regime = (
            self.settings.regime.label
            if self.settings.regime
            else f"none (marked tests only, under {self.settings.default_regime.label} unless the marker names one)"
        )
        lines = [f"devmem: device {self.device.name}, regime {regime}"]
        if self.settings.tpu is not None:
            lines.append(
                f"devmem: {self.settings.tpu.description}: HBM on demand, defragmented when an allocation does not fit (regime compact); JAX's XLA_PYTHON_CLIENT_* settings do not apply"
            )
        if self.compile_target.said:
            lines.append(f"devmem: {self.compile_target.note}")
        if self.tensorflow_cpu is not None and tensorflow_installed():
            lines.append(f"devmem: {self.tensorflow_cpu.describe()}")
            if config.stash.get(interop_key, False):
                lines.append(
                    "devmem: TensorFlow's inter-op threads: 1 (TF_NUM_INTEROP_THREADS=1, set by pytest-devmem: a graph's ops run one after another, so which buffers live together is the same in every run)"
                )
            if config.stash.get(order_key, False):
                lines.append(
                    "devmem: TensorFlow's executor order: deterministic (TF_DETERMINISTIC_ORDER=1, set by pytest-devmem: ready ops are taken by name, not by where they sit in memory)"
                )
        return lines

    # -- collection: what exists, then what runs, under which regime ------------------------

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        """What each collector holds, as it collected it: the innermost wrapper, so before any
        plugin filters the result (--lf does); selection (-k, node ids, shards) comes later. A file
        that comes back holding nothing tells nothing: pytest's --lf hands back such a report, in
        place of collecting it, for each file that held no failure (`LFPluginCollSkipfiles`,
        _pytest/cacheprovider.py)."""
        report = yield
        if report.passed and (report.result or not isinstance(collector, pytest.File)):
            self.results.shape.expanded(collector.nodeid, [node.nodeid for node in report.result])
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> Generator[None, None, None]:
        """After every plugin has chosen (-k, shard plugins such as pytest-split, which run
        trylast): each item that runs gets its regime, and those under another regime their child
        group. A child runs exactly the nodes its parent gave it, whatever a shard plugin on the
        inherited command line would choose."""
        collected = list(items) if self.is_child else []
        result = yield
        if self.is_child:
            keep = [item for item in collected if item.nodeid in self.child_nodes]
            dropped = [item for item in items if item.nodeid not in self.child_nodes]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
            items[:] = keep
        timeouts = config.pluginmanager.hasplugin("timeout")  # pytest-timeout
        self.results.shape.add_items(item.nodeid for item in items)
        for item in items:
            prepare_item(item, self.settings.regime, self.settings.tpu)
        if self.settings.only and not self.is_child:
            unmeasured = [item for item in items if not measured(item)]
            if unmeasured:
                config.hook.pytest_deselected(items=unmeasured)
                items[:] = [item for item in items if measured(item)]
        self._measured_fixtures = {
            name for item in items if measured(item) for name in getattr(item, "fixturenames", ())
        }
        if any(measured(item) for item in items):
            # before any test runs: a test's figures must not depend on whether the tests before it
            # were measured (what JAX compiled, or left set on its thread, before the hooks went in)
            self.measurement.watch_frameworks()
        for item in items:
            regime = item.stash[regime_key]
            if regime is not None and regime != self.settings.regime and not self.is_child:
                self.isolated.setdefault(regime, []).append(item)
                if timeouts:  # the child gets --timeout and times each test itself; here one timer
                    item.add_marker(pytest.mark.timeout(0))  # would fire while waiting for the child
        return result

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Before any test runs: the environment every child process starts from."""
        self.config.stash[session_environment_key] = dict(os.environ)

    # -- a test under another regime runs in a child ----------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if self.settings.targets and not self.is_child and measured(item):
            self.target_items.append(item)
        regime = item.stash.get(regime_key, None)
        if regime is None or regime == self.settings.regime or self.is_child:
            return None

        group = [item] if self.is_xdist_worker else self.isolated.get(regime, [item])
        replay_from_children(
            self.config, self.settings, self.regime_env, self.child_outcomes, group, item, nextitem, regime
        )
        return True

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        if self.child_writer is not None:
            self.child_writer.start(nodeid)

    # -- a test: its window opens before its fixtures, closes after its call ----------------

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        """Inside pytest's output capture (trylast: the innermost wrapper), still before any fixture:
        what starting the measurement prints (the first `jax.devices()` starts JAX's backends, whose
        CUDA plugin logs `cudart_stub ... Could not find cuda drivers` on a machine without a GPU)
        is the test's captured output, as it is without the plugin."""
        __tracebackhide__ = True
        spec = item.stash.get(mark_key, None)
        if isinstance(spec, str):
            raise pytest.UsageError(spec)
        if not measured(item):
            return (yield)
        self._configure_tensorflow_once()
        item.stash[oom_key] = None
        module = item.nodeid.split("::", 1)[0]
        # A module's first test thaws what earlier tests froze, where a shared fixture (its cyclic
        # garbage frozen while it lived) was torn down since the last thaw: a full collection of the
        # whole process (a tenth of a second with JAX loaded), needless where nothing wider than a
        # test ended.
        thaw = module != self._frozen_in and self._shared_fixture_finished
        self.measurement.start(thaw=thaw)  # before fixtures: what a function-scoped fixture allocates counts
        self._frozen_in = module
        if thaw:
            self._shared_fixture_finished = False
        try:
            return (yield)
        except BaseException as exc:  # no call phase will stop the measurement: stop it here
            stopped = self.measurement.stop()
            self.shared_fixtures.learn(stopped.started_by, stopped.needed_by)
            if isinstance(refused := getattr(exc, "devmem_sizes", None), dict):  # a fixture's call the target refused
                stopped.sizes.update(refused)
                item.stash[captured_key] = stopped  # recorded as that out of memory
            raise

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, object, object]:
        """A fixture shared by several tests is set up by whichever runs first: its memory belongs to
        none of them, so it stays out of the trace (test order must not change a test's figures). One
        set up inside another's setup (asked for in its body with `request.getfixturevalue`) is its own.
        An unmeasured test's setup of one a measured test uses is seen in a window of its own."""
        unmeasured = not self.measurement.recorder.window_open
        if fixturedef.scope == "function" or (unmeasured and fixturedef.argname not in self._measured_fixtures):
            return (yield)
        if unmeasured:
            self.measurement.start()
        try:
            with self.measurement.recorder.paused(FixtureSetup.of(fixturedef, request)):  # what it starts and keeps
                return (yield)
        finally:
            if unmeasured:
                stopped = self.measurement.stop()
                self.shared_fixtures.learn(stopped.started_by, stopped.needed_by)

    def pytest_fixture_post_finalizer(self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
        if fixturedef.scope != "function" and not library_class_fixture(fixturedef, request):
            self._shared_fixture_finished = True

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        if not measured(item):
            return (yield)
        self.measurement.recorder.mark()  # what the test itself allocates, after its fixtures
        try:
            return (yield)
        except BaseException as exc:
            item.stash[oom_key] = out_of_memory_text(exc)
            raise
        finally:
            captured = item.stash[captured_key] = self.measurement.stop(
                check_leaks=self.checks.max_leak(item) is not None
            )
            self.shared_fixtures.learn(captured.started_by, captured.needed_by)
            captured.started = self.shared_fixtures.started(item)
            captured.compiler_entries.update(self.shared_fixtures.entries(item))

    # -- its record and its verdict ---------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if (
            call.when in ("setup", "call") and report.skipped and measured(item)
        ):  # skipped, or failed as expected (xfail): it measured nothing a baseline could hold, so no figure
            if hasattr(report, "wasxfail"):
                why = f"xfailed: {report.wasxfail}" if report.wasxfail else "xfailed"
            else:
                why = skip_text(report)
            report.devmem_unrecorded = [regime_of(item, self.settings.default_regime).label, why]  # type: ignore[attr-defined]
            if call.when == "call":
                if captured_key in item.stash:
                    del item.stash[captured_key]
                return report
        if call.when == "setup" and self.is_xdist_worker and measured(item):  # if its worker crashes, the regime
            report.devmem_regime = regime_of(item, self.settings.default_regime).label  # type: ignore[attr-defined]
        if call.when not in ("call", "setup") or not measured(item):
            return report
        captured = item.stash.get(captured_key, None)
        if captured is None:  # a subtest's report, made while the test still runs: one test, one record
            return report
        del item.stash[captured_key]
        record = self.checks.record(item, report.outcome, call.duration, captured)
        failure = self.checks.first_failure(item, record, captured)
        if failure is not None and report.outcome == "passed":
            report.outcome = "failed"
            report.longrepr = failure + self.checks.leave_artifacts(record)
            report.devmem_failure = True  # type: ignore[attr-defined]  # its own status letter, M
            record.outcome = "failed"
            record.failed_by_devmem = True
        elif failure is not None and (called := refusal_raised_at(item, record.oom, call.excinfo)) is not None:
            # the call raised the target compiler's refusal, as the target does: the verdict is the failure
            report.longrepr = (
                f"{failure}\n  raised at the call in {terminal_lines(called)}" + self.checks.leave_artifacts(record)
            )
            report.devmem_failure = True  # type: ignore[attr-defined]
            record.failed_by_devmem = True
        elif failure is not None:  # failed already (a real OOM, say): add what pytest-devmem found
            report.sections.append(("pytest-devmem", failure))
        if (
            self.largest is not None and item.stash.get(regime_key, None) == self.settings.regime
        ):  # ran in this worker's own process
            self.largest.offer(record.test_id, record.peak_bytes_in_use, record.trace_events)
        if self.is_child or self.is_xdist_worker:  # the record travels to another process with the report
            report.devmem_record = record.to_json()  # type: ignore[attr-defined]
            if captured.compiler_entries:  # with what its sizes came from, for the store beside the baselines
                report.devmem_compiler_entries = captured.compiler_entries  # type: ignore[attr-defined]
        else:
            self.results.local[item.nodeid] = record
            self.results.compiler_entries.update(captured.compiler_entries)
        return report

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        """A test failed by pytest-devmem alone shows `M` and MEMORY PROBLEMS, as pytest-memray's do."""
        if report.when == "call" and getattr(report, "devmem_failure", False):
            return "failed", "M", ("MEMORY PROBLEMS", {"red": True})
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.child_writer is not None:
            self.child_writer.report(report)
        if report.when == "setup" and hasattr(report, "devmem_regime"):
            self.results.started[report.nodeid] = str(report.devmem_regime)
        crashed = report.when == "???" and self.results.started.get(report.nodeid)  # xdist's handle_crashitem
        if crashed:
            why = f"its xdist worker crashed ({report.longrepr}): no figures came back"
            report.devmem_unrecorded = [crashed, why]  # type: ignore[attr-defined]
        unrecorded = getattr(report, "devmem_unrecorded", None)
        if isinstance(unrecorded, list) and len(unrecorded) == 2:  # from here, a worker or a child
            self.results.unrecorded[(id_of_test(report.nodeid, report.location[0]), str(unrecorded[0]))] = (
                self.device.name,
                str(unrecorded[1]),
            )
        if report.when == "call" or report.failed:  # a setup that failed has one where a fixture ran out of memory
            self.results.add(report.nodeid, getattr(report, "devmem_record", None))
            self.results.add_compiler_entries(getattr(report, "devmem_compiler_entries", None))

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        if self.child_writer is not None:
            self.child_writer.finish(nodeid)

    # -- the session ends -------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", None)
        self.results.worker_finished(output.get("devmem") if isinstance(output, dict) else None)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_child:
            return
        if self.settings.targets and self.target_items:  # --devmem-targets: this process's measured tests, again
            interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
            self.results.add_reruns(
                rerun_measured(self.config, self.settings, self.device, self.target_items, self.regime_env, interrupted)
            )
        self.results.compile_counts = sizer_counts(self.measurement)
        if self.is_xdist_worker:  # only the controller writes: every record reaches it
            self.config.workeroutput["devmem"] = self.results.worker_output(self.largest)  # type: ignore[attr-defined]
            return
        self.results.finish(session)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        results = self.results
        if (
            (results.records or results.stale or results.side_by_side is not None)
            and not self.is_child
            and not self.is_xdist_worker
        ):
            isolated = {regime.label: outcome.children_started for regime, outcome in self.child_outcomes.items()}
            facts = results.facts(isolated, self.xdist_note, self.tensorflow_cpu)
            SessionSummary(facts, terminalreporter, everything=config.getoption("verbose", 0) > 0).write()
        elif self.settings.update and not self.is_child and not self.is_xdist_worker:
            why = "" if self.settings.regime is not None else " (without --devmem-mode only tests marked devmem are)"
            terminalreporter.write_line(
                f"pytest-devmem: --devmem-update wrote no baseline: no test was measured{why}", yellow=True
            )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.is_xdist_worker:
            ignore_shutdown_interrupt_in_jax_gc()
        self.measurement.close()
        restore_all(config, self.regime_env)
        if self.child_writer is not None:
            self.child_writer.close()
        self.device.close()

    # -- the fixture, and what the session sets up once --------------------------------------

    def make_fixture(self, item: pytest.Item) -> DevmemFixture:
        """The `devmem` fixture of one test: its regime and a pool under it on the session's device,
        which records while the test is measured and refuses use once the test has ended."""
        regime = item.stash.get(regime_key, None)
        if regime is not None and regime == self.settings.regime:
            regime = self.settings.effective_regime  # this xdist worker's share of the session regime
        pool = make_pool(self.device, (regime or self.settings.default_regime).policy)
        if measured(item):
            self.measurement.pool_source.attach(pool)
        device = (
            f"{'gpu' if self.device.kind is DeviceKind.CUDA else 'cpu'}:0"  # the first device, as the spec names it
        )
        return DevmemFixture(
            regime or self.settings.default_regime, RecordingPool(pool, self.measurement.recorder, device), self.device
        )

    def _configure_tensorflow_once(self) -> None:
        if self._tensorflow_configured or "tensorflow" not in sys.modules or self.settings.regime is None:
            return
        self._tensorflow_configured = True
        problem = configure_tensorflow_gpus(self.settings.effective_regime, self.device.capacity)  # type: ignore[arg-type]
        if problem:
            warnings.warn(pytest.PytestWarning(problem), stacklevel=1)
