"""The session's results: every test's record (made here, in a worker or in a child), the tests
skipped at setup, what the xdist workers sent, and, at the end, what is written (baselines, the
report with the run's shard, the benchmark JSON, the autosaved report), stale baselines and the
workers' side-by-side check, then the plain facts the terminal summary shows."""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..compile_store import STORE_DIRECTORY, StoreUpdate, entry_problem, is_key, update_store
from ..files import write_atomic
from ..gate.baseline import BaselineStore
from ..gate.baseline_files import BaselineFormatError
from ..gate.record import TestRecord
from ..gate.refresh import refresh_baselines
from ..gate.stale import SuiteShape, stale_baselines, stale_key
from ..gate.targets import TargetTable
from ..hardware.driver_info import driver_info
from ..model.device import DeviceKind
from ..model.side_by_side import SideBySide, check_side_by_side
from ..present.autosave import autosave
from ..present.report import benchmark_json, render
from ..present.summary import SummaryFacts
from ..provenance import provenance
from ..version import package_version
from .checks import shown
from .environment import tensorflow_cpu_key
from .recording import allocator_setups, machine_spec
from .run_info import collect_run_info
from .settings import SessionParts
from .targets import session_results, table_columns
from .workers import LargestTests, gpu_count, plan_workers, workers_per_device

if TYPE_CHECKING:
    from ..capture.tensorflow.cpu_allocator import CpuAllocatorSetting
    from ..model.frameworks import AllocatorSetup
    from ..model.trace import Trace


@dataclass(eq=False)
class SessionResults(SessionParts):
    """What the session measured and stored; only the xdist controller (or a single process) writes."""

    def __post_init__(self) -> None:
        config = self.config
        self.records: list[TestRecord] = []
        self.local: dict[str, TestRecord] = {}  # made in this process, waiting for their report: no JSON round trip
        self.unrecorded: dict[
            tuple[str, str], tuple[str, str]
        ] = {}  # skipped at setup, or crashed its xdist worker: (test, regime) -> (device, why)
        self.started: dict[str, str] = {}  # xdist controller: each measured test set up, by node id: its regime
        self.shape = SuiteShape(
            config.rootpath
        )  # what pytest collected, before any selection, and the disk: for stale baselines
        self.stale: list[str] = []
        self.workers_reported = 0  # xdist controller: workers that sent their results
        self.stale_from_workers: set[str] = set()
        self.largest_from_workers: list[tuple[int, str, Trace]] = []
        self.side_by_side: SideBySide | None = None
        self.baselines_written: list[str] = []
        self.stale_removed: list[str] = []  # by --devmem-update: "test id [regime]"
        self.not_refreshed: list[tuple[str, str, str]] = []  # by --devmem-update: (test id, regime, why)
        self.write_problems: list[str] = []  # what the user asked to be stored and could not be
        self.autosaved: Path | None = None
        self.reruns = TargetTable()  # --devmem-targets: the reruns' rows, made here or sent by workers
        self.targets: TargetTable | None = None  # at the end: the session's device and each target, every test
        # the target compiler's entries the records' sizes came from, by key: for the store beside the baselines
        self.compiler_entries: dict[str, dict[str, object]] = {}
        self.compile_counts: dict[str, float | int] | None = None  # this process's sizer's (sizer_counts)
        self.counts_from_workers: list[dict[str, float | int]] = []
        self.store_update: StoreUpdate | None = None  # what --devmem-update did to the store

    # -- gathering ----------------------------------------------------------------------

    def add(self, nodeid: str, data: object) -> None:
        """A call report arrived: its record, made here or sent with the report by a worker or a child."""
        local = self.local.pop(nodeid, None)
        if local is not None:
            self.records.append(local)
        elif isinstance(data, dict):
            self.records.append(TestRecord.from_json(data))

    def add_compiler_entries(self, sent: object) -> None:
        """The entries a worker's or a child's test sent with its record; each checked, a bad one left out."""
        if not isinstance(sent, dict):
            return
        for key, entry in sent.items():
            if is_key(key) and entry_problem(entry) is None:
                self.compiler_entries[key] = entry

    def worker_finished(self, sent: object) -> None:
        """pytest-xdist's controller: what a worker sent when it finished (its stale baselines, its
        largest tests' traces); a worker that crashed sends nothing."""
        if not isinstance(sent, dict):
            return
        self.workers_reported += 1
        stale = sent.get("stale")
        if isinstance(stale, list):
            self.stale_from_workers.update(str(name) for name in stale)
        self.largest_from_workers += LargestTests.from_json(sent.get("largest"))
        counts = sent.get("compile_counts")
        if isinstance(counts, dict):
            self.counts_from_workers.append(
                {name: value for name, value in counts.items() if isinstance(value, (int, float))}
            )
        targets = sent.get("targets")
        if isinstance(targets, dict):
            self.add_reruns(TargetTable.from_json(targets))

    def add_reruns(self, reruns: TargetTable) -> None:
        """Rows of the targets table from the reruns of this process or of a worker, with the child
        processes they started and why they did not run, where they did not."""
        self.reruns.add(reruns.results)
        self.reruns.children += reruns.children
        self.reruns.skipped = self.reruns.skipped or reruns.skipped

    def worker_output(self, largest: LargestTests | None) -> dict[str, object]:
        """What an xdist worker sends its controller, which alone writes."""
        return {
            "stale": stale_baselines(self.store.entries(), self.shape),
            "largest": largest.to_json() if largest is not None else [],
            "targets": self.reruns.to_json(),
            "compile_counts": self.compile_counts,
        }

    def target_table(self) -> TargetTable | None:
        """--devmem-targets: every measured test on the session's device (its records) and on each
        target, in one order whatever order the rows came in."""
        if not self.settings.targets:
            return None

        columns = table_columns(self.device.name, self.device.capacity, self.settings.targets)
        table = TargetTable(
            columns,
            session_results(self.records, self.device.name, self.device.capacity) + self.reruns.results,
            self.reruns.children,
            self.reruns.skipped,
        )
        table.sort()
        table.fill_missing(
            self.reruns.skipped or "no result came back from the target's run (the xdist worker that ran it crashed?)"
        )
        return table

    # -- the end ------------------------------------------------------------------------

    def finish(self, session: pytest.Session) -> None:
        """Write what was asked, find stale baselines and check the workers side by side; the
        session fails where any of it fails."""
        last = {
            (r.test_id, r.regime, r.device_class): r for r in self.records
        }  # a test run again (a rerun plugin): its last run, as pytest's outcome and --devmem-update take it
        self.records = sorted(
            last.values(), key=lambda r: r.test_id
        )  # once, for the summary and the report: each test once
        info = self.session_info()
        if self.settings.update:
            refresh = refresh_baselines(self.store, self.records, info["versions"], self.unrecorded)  # type: ignore[arg-type]
            self.baselines_written = [str(path) for path in refresh.written]
            self.not_refreshed = refresh.left_out
            self.write_problems += [f"baseline not written: {problem}" for problem in refresh.problems]
            self.remove_stale()
            self.update_store()
        self.stale = sorted(
            set(stale_baselines(self.store.entries(), self.shape)) | (self.stale_from_workers - set(self.stale_removed))
        )
        failed = bool(self.stale and self.settings.strict)
        self.side_by_side = self.check_side_by_side()
        failed = failed or (self.side_by_side is not None and not self.side_by_side.fits)
        unrecorded = self.unrecorded_json()
        self.targets = self.target_table()
        self._write(
            self.settings.report_path,
            "report",
            lambda: render(self.settings.report_path, self.records, info, unrecorded, self.targets),  # type: ignore[arg-type]
        )
        self._write(self.settings.benchmark_json, "benchmark JSON", lambda: benchmark_json(self.records))
        if self.settings.autosave and self.records:  # a run that measured nothing leaves no file
            try:
                self.autosaved = autosave(
                    self.config.rootpath, render("report.json", self.records, info, unrecorded, self.targets), info
                )
            except OSError as exc:
                self.write_problems.append(
                    f"report not autosaved: {exc.filename or self.config.rootpath}: {exc.strerror or exc}"
                )
        if (failed or self.write_problems) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = (
                pytest.ExitCode.TESTS_FAILED
            )  # what the user asked to be stored is not, or strict found stale ones

    def remove_stale(self) -> None:
        """--devmem-update: the baselines of tests the collected suite proves gone are removed, as
        syrupy's --snapshot-update removes unused snapshots (a test that was not selected is never
        stale: gate/stale.py); a file that cannot be changed is named and keeps them."""
        stale = set(stale_baselines(self.store.entries(), self.shape)) | self.stale_from_workers
        keys = {name: stale_key(name) for name in stale}
        changed, problems = self.store.remove(keys.values())
        self.write_problems += [f"stale baseline not removed: {problem}" for problem in problems]
        files = set(changed)
        self.stale_removed = sorted(name for name, key in keys.items() if self.store.path_for(key[0]) in files)

    def update_store(self) -> None:
        """--devmem-update: the compilers' entries the stored baselines name, beside them; those no
        stored baseline names any more removed (compile_store.py)."""
        directory = self.store.directory / STORE_DIRECTORY
        try:  # read again: an entry is removed only where every baseline file could be read
            stored = BaselineStore(self.store.root, self.store.device_class).load().entries()
        except (BaselineFormatError, OSError) as exc:
            self.write_problems.append(f"compiler entries not updated, as the baselines cannot be read: {exc}")
            return
        named = {key for entry in stored for key in entry.compiler_entries}
        if not named and not directory.is_dir():
            return
        self.store_update = update_store(directory, self.compiler_entries, named, self.store.root, self.config.rootpath)
        self.write_problems += [f"compiler entry not written: {problem}" for problem in self.store_update.problems]

    def session_counts(self) -> dict[str, float | int] | None:
        """The sizers' counts of this process and its workers, summed; None where none sized anything."""
        found = [counts for counts in (self.compile_counts, *self.counts_from_workers) if counts]
        if not found:
            return None
        return {
            name: sum(counts.get(name, 0) for counts in found)
            for name in ("compiled", "seconds", "from_store", "from_cache")
        }

    def _write(self, path: Path | None, what: str, text: object) -> None:
        if path is None:
            return
        try:
            write_atomic(path, text())  # type: ignore[operator]
        except OSError as exc:
            self.write_problems.append(f"{what} not written: {path}: {exc.strerror or exc}")

    def unrecorded_json(self) -> list[dict[str, str]]:
        """The measured tests skipped at setup, for the report: a refresh from reports
        (`devmem merge --baselines`) stores them as `--devmem-update` does."""
        return [
            {"test_id": test_id, "regime": regime, "device": device, "reason": reason}
            for (test_id, regime), (device, reason) in sorted(self.unrecorded.items())
        ]

    def check_side_by_side(self) -> SideBySide | None:
        """xdist controller: the suite's largest tests replayed at once, as the workers sharing a
        device may run them (model/side_by_side.py)."""
        if self.workers_reported < 2 or len(self.largest_from_workers) < 2 or self.settings.tpu is not None:
            return None  # (a TPU's chips belong to one process: workers never share them)
        uses_gpu = self.device.kind is DeviceKind.CUDA
        gpus = gpu_count() if uses_gpu else 0
        sharing = workers_per_device(self.workers_reported, gpus, uses_gpu)

        def setups_for(count: int) -> tuple[str, dict[str, AllocatorSetup]]:
            if uses_gpu and gpus > 1:  # each worker keeps the session regime on its GPU
                regime = self.settings.regime
            else:
                regime = plan_workers(self.settings.regime, self.settings.fraction_chosen, 0, count, 0, False).regime
            policy = (regime or self.settings.default_regime).policy
            return policy.label, allocator_setups(policy, self.device)

        return check_side_by_side(
            self.largest_from_workers, sharing, setups_for, machine_spec(self.device, self.settings.cuda_context_bytes)
        )

    def session_info(self) -> dict[str, object]:
        """The report's session: the device, the regime, versions, and where the figures came from."""
        versions = {"pytest-devmem": package_version()}
        for package in ("jax", "jaxlib", "tensorflow", "tensorflow-cpu", "nvidia-ml-py"):
            try:
                versions[package] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                pass
        driver = driver_info()
        tensorflow_cpu = self.config.stash.get(tensorflow_cpu_key, None)
        run_info = self.run_info()
        return {
            "device": self.device.name,
            "device_class": self.device.device_class,
            "device_capacity_bytes": self.device.capacity,
            "device_compute_capability": list(self.device.compute_capability),
            "regime": self.settings.regime.label if self.settings.regime else None,
            "versions": versions,
            **(
                {"tensorflow_cpu_allocator": tensorflow_cpu.describe()}
                if tensorflow_cpu is not None and any(name.startswith("tensorflow") for name in versions)
                else {}
            ),
            **({"compile_target": self.compile_target.to_json()} if "jax" in versions else {}),
            **({"shard": shard} if (shard := shard_of(self.config)) is not None else {}),
            **provenance(
                self.config.rootpath,
                versions,
                self.device.device_class,
                {"driver_version": driver.driver_version, "cuda_version": driver.cuda_version},
            ),
            **({"run_info": run_info} if run_info else {}),
        }

    def run_info(self) -> dict[str, object]:
        """What the project's `pytest_devmem_update_run_info` hooks added (hookspec.py), as plain
        JSON (plugin/run_info.py); a hook that raises or stores what JSON cannot hold is a problem
        the summary names, and the session's measurements are written all the same."""
        run_info, problems = collect_run_info(self.config)
        self.write_problems += problems
        return run_info

    def facts(
        self, isolated: dict[str, int], xdist_note: str, tensorflow_cpu: CpuAllocatorSetting | None
    ) -> SummaryFacts:
        """What the terminal summary shows, as plain data."""
        start = self.config.invocation_params.dir
        report = self.settings.report_path
        report_written = report is not None and not any(p.startswith("report not written") for p in self.write_problems)
        tensorflow_problem = tensorflow_cpu.problem() if tensorflow_cpu is not None else None
        if tensorflow_problem and not any(
            not reading.unused
            for record in self.records
            for name, reading in record.sources.items()
            if name == "tensorflow"
        ):
            tensorflow_problem = None  # no test used TensorFlow: nothing to say
        return SummaryFacts(
            device=self.device.name,
            simulated=self.device.kind.simulated,
            records=self.records,
            baselines_directory=shown(self.store.directory, start),
            updating=self.settings.update,
            strict=self.settings.strict,
            find_min_fraction=self.settings.find_min_fraction,
            what_if=self.settings.what_if,
            isolated=isolated,
            xdist_note=xdist_note,
            side_by_side=self.side_by_side,
            baselines_written=[shown(path, start) for path in self.baselines_written],
            stale=self.stale,
            stale_removed=self.stale_removed,
            not_refreshed=self.not_refreshed,
            write_problems=self.write_problems,
            report=shown(report, start) if report is not None and report_written else None,
            autosaved=shown(self.autosaved, start) if self.autosaved is not None else None,
            compile_note=self.compile_target.note if self.compile_target.said else "",
            tensorflow_problem=tensorflow_problem,
            targets=self.targets,
            compile_counts=self.session_counts(),
            compiler_store=shown(self.store.directory / STORE_DIRECTORY, start),
            compile_caches=" or ".join(
                (["pytest's cache"] if getattr(self.config, "cache", None) is not None else [])
                + ([shown(self.settings.cache_dir, start)] if self.settings.cache_dir is not None else [])
            )
            or "a disk cache (none here)",
            store_update=self.store_update,
            gated=tuple(self.settings.tolerance.allowances),
        )


SHARD_OPTIONS = (("pytest-split", "splits", "group", 1), ("pytest-shard", "num_shards", "shard_id", 0))
"""(plugin, option dest of the number of shards, option dest of this shard, the first shard's number)."""


def ci_run() -> str | None:
    """The CI run every shard of one pipeline shares: GitHub Actions' run id and attempt, or GitLab's pipeline id."""
    if os.environ.get("GITHUB_RUN_ID"):
        return f"{os.environ['GITHUB_RUN_ID']}-{os.environ.get('GITHUB_RUN_ATTEMPT', '1')}"
    return os.environ.get("CI_PIPELINE_ID") or None


def shard_of(config: pytest.Config) -> dict[str, object] | None:
    """Which shard of a split suite this session ran, for the report: `{"plugin", "group", "groups",
    "run"}` when a shard plugin (pytest-split's `--splits N --group K`, pytest-shard's `--num-shards N
    --shard-id K`) chose its part of the suite (`group` counts from 1), else None. `devmem merge` and
    `devmem history` put such CI jobs' reports back together."""
    for plugin, total_name, index_name, first in SHARD_OPTIONS:
        total = config.getoption(total_name, default=None)
        index = config.getoption(index_name, default=None)
        if isinstance(total, int) and isinstance(index, int) and total > 1:
            return {"plugin": plugin, "group": index - first + 1, "groups": total, "run": ci_run()}
    return None
