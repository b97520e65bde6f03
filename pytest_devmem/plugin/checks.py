"""One test's record and checks: its window's trace run once through the model of the machine, then
pytest-devmem's verdicts in order (out of memory, limit, recompiles, leak, fragmentation, baseline),
and the files a test leaves (its trace, the artifacts of a failure, its what-if answers)."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from ..capture.jax.sizes import UNUSABLE
from ..capture.measurement import Captured, Measurement
from ..compile_store import CONTRADICTED
from ..files import path_in, write_atomic
from ..gate.changes import buffers_of, lines_of
from ..gate.marks import compiles_verdict, fragmentation_verdict, leak_verdict, limit_verdict
from ..gate.record import Analysis, MinFraction, TestRecord
from ..gate.tolerance import parse_tolerance
from ..gate.verdicts import baseline_verdict, largest_at_peak, oom_verdict, relative_to
from ..model.pool import Policy
from ..model.timeline import build_view
from ..model.trace import BY_COLUMN_FROM, Trace, arrow_file
from ..model.whatif import MIN_FRACTION_FLOOR, find_min_fraction, what_if
from ..present.buffers import html_lines_section, html_section
from ..present.plot import write_plot
from ..present.plot_parts import BaselineSide
from ..present.text import terminal_lines
from ..units import format_size
from .items import id_of_test, marked, not_applied_key, oom_key, regime_of
from .recording import allocator_setups, machine_spec, make_record
from .settings import SessionParts


@dataclass(eq=False)
class Checks(SessionParts):
    """Turns a measured test's window into its record and its verdict."""

    measurement: Measurement

    @property
    def start_dir(self) -> Path:
        return self.config.invocation_params.dir

    @property
    def rootdir(self) -> Path:
        return self.config.rootpath

    def record(self, item: pytest.Item, outcome: str, duration: float, captured: Captured) -> TestRecord:
        """The test's record, its trace written and analysed where the session asks."""
        spec = marked(item)
        regime = regime_of(item, self.settings.default_regime)
        record = make_record(
            self.measurement,
            captured,
            id_of_test(item.nodeid, item.location[0]),
            regime.label,
            regime.policy,
            self.device,
            context_bytes=self.settings.cuda_context_bytes,
            outcome=outcome,
            real_oom=item.stash.get(oom_key, None),
            limit_bytes=spec.limit if spec is not None and spec.limit is not None else self.settings.limit,
            duration_s=duration,
            timeline=self.settings.artifacts_dir is not None,
            compile_target=self.compile_target.label if "jax" in sys.modules else None,
            root=self.rootdir,
        )
        if record.tpu is not None and item.stash.get(not_applied_key, None):
            record.tpu["marker_not_applied"] = item.stash[not_applied_key]
        self.write_trace(record)
        self.analyse(record, regime.policy)
        return record

    def max_leak(self, item: pytest.Item) -> int | None:
        spec = marked(item)
        return spec.max_leak if spec is not None and spec.max_leak is not None else self.settings.max_leak

    def first_failure(self, item: pytest.Item, record: TestRecord, captured: Captured) -> str | None:
        """pytest-devmem's checks in order; the first failure's text (escaped for the terminal), or
        None. Every check records what it found, and the baseline is always compared."""
        spec = marked(item)
        contradicted = next((note for note in captured.notes if CONTRADICTED in note), None)
        unusable = None
        if record.trace is not None and any(UNUSABLE in note for note in record.trace.notes):  # never a CPU figure
            unusable = (  # under a TPU's device class
                f"{UNUSABLE}, so JAX's executables kept the CPU compile's sizes (the record's notes say why), which are "
                f"not {record.device_class}'s: `devmem compilers install --force`, or --devmem-compile-target=cpu"
            )
        failures: list[tuple[str, str | None]] = [("compiler entry", contradicted), ("compile target", unusable)]
        failures.append(("out of memory", oom_verdict(record)))
        failures.append(
            ("limit", limit_verdict(record.chip_peak_bytes_in_use, record.limit_bytes, largest_at_peak(record)))
        )
        if record.limit_bytes is not None and record.host_peak and record.trace is not None:
            record.trace.notes.append(
                f"the limit {format_size(record.limit_bytes)} judges a chip's memory: the peak here is the host's (TensorFlow's CPU allocator), not judged"
            )
        if spec is not None:
            aliases = bound_names(item) if isinstance(spec.max_compiles, dict) else {}
            failures.append(
                ("compiles", compiles_verdict(captured.needed, spec.max_compiles, captured.functions, aliases))
            )
        failures.append(("leak", leak_verdict(captured.kept, self.max_leak(item))))
        if spec is not None and spec.max_fragmentation_off:  # max_fragmentation=None: no bound for this test
            bound = None
        else:
            bound = (
                spec.max_fragmentation
                if spec is not None and spec.max_fragmentation is not None
                else self.settings.max_fragmentation
            )
        failures.append(("fragmentation", fragmentation_verdict(record.devices, bound)))
        tolerance = (
            parse_tolerance(spec.tolerance)
            if spec is not None and spec.tolerance is not None
            else self.settings.tolerance
        )
        record.tolerance = tolerance.spec
        compared = baseline_verdict(
            record,
            self.store,
            tolerance,
            update=self.settings.update,
            strict=self.settings.strict,
            rootdir=self.rootdir,
        )  # always: the record keeps it
        failures.append(("baseline", compared))
        first = next(((check, text) for check, text in failures if text is not None), None)
        if first is None:
            return None
        record.failed_check = first[0]  # which one: a refresh takes the figures of a baseline failure alone
        sizer = self.measurement.jax_capture.installed_sizer
        read = (
            [relative_to(str(path), self.rootdir) for path in sizer.entry_files(captured.compiler_entries)]
            if sizer
            else []
        )
        if read:  # a figure from a file, not a compile: which file, in case it is a wrong one
            first = (first[0], f"{first[1]}\n  sized by stored compiler entries, not compiled: {', '.join(read[:3])}")
        return terminal_lines(first[1])  # it quotes test ids, labels and baseline fields

    def write_trace(self, record: TestRecord) -> None:
        """With --devmem-traces=DIR: the test's trace as an RMM-style CSV, named after the test and regime."""
        directory = self.settings.traces_dir
        if directory is None or record.trace_events is None:
            return
        path = path_in(directory, f"{record.test_id}[{record.regime}]", ".csv")
        try:
            write_trace_files(record.trace_events, path)  # and a long trace's Arrow file beside it
        except OSError as exc:  # the test's outcome does not depend on it: say so, and go on
            warnings.warn(
                pytest.PytestWarning(
                    terminal_lines(
                        f"pytest-devmem could not write the trace of {record.test_id} to {path}: {exc.strerror or exc}"
                    )
                ),
                stacklevel=1,
            )
            return
        if record.trace is not None:
            record.trace.file = str(path)

    def leave_artifacts(self, record: TestRecord) -> str:
        """With --devmem-artifacts=DIR: the failing test's trace and its picture there; the lines that say where."""
        directory = self.settings.artifacts_dir
        if directory is None or record.trace_events is None or record.run is None:
            return ""

        name = f"{record.test_id}[{record.regime}]"
        trace, picture = path_in(directory, name, ".csv"), path_in(directory, name, ".html")
        try:
            record.trace_events.write_csv(trace)
            entry = self.store.get(record.test_id, record.regime)
            baseline = None
            if entry is not None:
                file = str(entry.path) if self.rootdir is None else relative_to(str(entry.path), self.rootdir)
                baseline = BaselineSide.of(file, entry.metrics, entry.contributors, entry.profile)
            write_plot(
                build_view(
                    record.run,
                    record.trace_events,
                    record.regime,
                    allocator_setups(Policy.from_label(record.regime), self.device),
                ),
                picture,
                f"{record.test_id} under {record.regime} on {self.device.name}",
                baseline,
                (
                    html_section(buffers_of(record), entry.buffers if entry is not None else None, self.rootdir),
                    html_lines_section(lines_of(record), entry.lines if entry is not None else None, self.rootdir),
                ),
            )
        except OSError as exc:
            return terminal_lines(f"\n  artifacts not written to {directory}: {exc.strerror or exc}")
        return terminal_lines(
            f"\n  artifacts: {shown(picture, self.start_dir)} (timeline and memory map), {shown(trace, self.start_dir)} (trace)"
        )

    def analyse(self, record: TestRecord, policy: Policy) -> None:
        """Replay the test's trace: the smallest prealloc fraction it needs, and how a device of another size fares."""
        if not self.settings.traces_needed or record.trace_events is None or not len(record.trace_events):
            return
        trace = record.trace_events
        setups = allocator_setups(policy, self.device)
        spec = machine_spec(self.device, self.settings.cuda_context_bytes)
        smallest = answer = None
        if self.settings.find_min_fraction:
            found = find_min_fraction(trace, setups, spec)
            smallest = MinFraction(found, found == MIN_FRACTION_FLOOR)  # "0.01 or less": the search stops there
        if self.settings.what_if is not None:
            answer = what_if(trace, setups, replace(spec, capacity=self.settings.what_if))
        record.analysis = Analysis(len(trace), trace.peak_live_bytes(), smallest, answer)


def shown(path: object, start_dir: Path) -> str:
    """A path relative to where pytest was started, when it lies below it."""
    try:
        return str(Path(str(path)).relative_to(start_dir))
    except ValueError:
        return str(path)


ARROW_FROM = BY_COLUMN_FROM
"""A trace of this many events or more also gets an Arrow IPC file beside its CSV: the same events by
column, read back some ten times faster (`devmem replay TEST[REGIME].arrow`); a short trace reads
quickly either way."""


def write_trace_files(trace: Trace, csv_path: Path) -> Path | None:
    """Write `trace` to `csv_path` (for people, pandas and RMM's replay), and for a trace of
    ARROW_FROM events or more, where pyarrow is installed, to the same name with `.arrow`
    (`Trace.write_arrow`), which it returns; an Arrow file an earlier run left there is removed where
    this run writes none. Both are written atomically but not synced to disk (`write_atomic`'s
    `durable=False`): the next run writes them again, and a sync per file cost a suite of 206 short
    tests 1 to 4 s of its 25 s. OSError (naming the file) where either cannot be written or removed."""
    write_atomic(csv_path, trace.csv_text(), durable=False)  # what `Trace.write_csv` writes
    arrow_path = csv_path.with_suffix(".arrow")
    if len(trace) >= ARROW_FROM:
        if arrow_file.available():  # what `Trace.write_arrow` writes
            write_atomic(arrow_path, memoryview(arrow_file.arrow_bytes(trace)), durable=False)  # type: ignore[arg-type]
            return arrow_path
    arrow_path.unlink(missing_ok=True)  # an earlier run's, which would replay as this one's
    return None


def bound_names(item: pytest.Item) -> dict[str, str]:
    """The names the test's module binds wrapped functions to, with each function's own name
    (`train_step = jax.jit(_step)`: JAX names its executable `jit(_step)`)."""
    found = {}
    for name, value in list(getattr(getattr(item, "module", None), "__dict__", {}).items()):
        try:
            wrapped = getattr(getattr(value, "__wrapped__", None), "__name__", None)
        except Exception:  # an object whose attributes raise (a lazy module): no function of the test's
            continue
        if isinstance(wrapped, str) and wrapped != name:
            found[name] = wrapped
    return found
