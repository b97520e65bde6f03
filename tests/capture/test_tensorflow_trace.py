"""TensorFlow's allocations as a trace (real TensorFlow on CPU): one event per allocation, as
requested, labelled by op and function, freed when TensorFlow frees it, on JAX's clock; the same with
oneDNN on and off; and the honest fallbacks where TensorFlow's profiler or statistics are missing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_devmem.capture import TraceRecorder
from pytest_devmem.capture.sources.base import Reading
from pytest_devmem.capture.tensorflow import PEAK_LABEL, TensorFlowCapture
from pytest_devmem.capture.tensorflow.capture import peak_window
from pytest_devmem.capture.tensorflow.cpu_allocator import VARIABLE, prepare_cpu_allocator
from pytest_devmem.capture.tensorflow.events import WindowClock, allocator_device, label, trace_events
from pytest_devmem.capture.tensorflow.xspace import AllocatorEvent, caller_name, function_name, read_profile
from pytest_devmem.model.trace import Trace
from pytest_devmem.units import MiB

pytestmark = pytest.mark.slow  # real TensorFlow: about 25 s to start it and profile


# -- pure parts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "allocator, has_gpu, device",
    [
        ("GPU_0_bfc", True, "gpu:0"),
        ("GPU_3_bfc", True, "gpu:3"),
        ("gpu_async_1", True, "gpu:1"),
        ("bfc_cpu_allocator_for_gpu", False, "cpu:0"),  # TensorFlow's CPU BFC, so named on every machine
        ("mklcpu", False, "cpu:0"),
        ("bfc_cpu_allocator_for_gpu", True, None),  # host memory beside a GPU: not the device's
        ("gpu_host_bfc", True, None),
    ],
)
def test_devices_come_from_allocator_names(allocator: str, has_gpu: bool, device: str | None) -> None:
    assert allocator_device(allocator, has_gpu) == device


def test_names_of_functions_and_callers() -> None:
    assert function_name("__inference_one_step_on_data_831") == "one_step_on_data"
    assert function_name("MatMul") == "MatMul"
    assert caller_name("EagerLocalExecute: __inference_step_219") == "step"
    assert caller_name("Iterator::Root::Prefetch::ParallelMapV2::Zip[0]::FlatMap") == "tf.data FlatMap"
    assert caller_name("ParallelMapProduce") == "tf.data ParallelMap"
    assert caller_name("ThreadpoolListener::Record") is None
    assert label(AllocatorEvent(0, True, "a", 1, 8, "MatMul", "step")) == "MatMul in step"
    assert label(AllocatorEvent(0, True, "a", 1, 8, "", "tf.data MapAndBatch")) == "tf.data MapAndBatch"
    assert label(AllocatorEvent(0, True, "a", 1, 8)) == "(no op)"


def event(
    time_ns: int,
    allocate: bool,
    address: int,
    size: int = 0,
    allocator: str = "bfc_cpu_allocator_for_gpu",
    op: str = "Op",
) -> AllocatorEvent:
    return AllocatorEvent(time_ns, allocate, allocator, address, size, op if allocate else "")


CLOCK = WindowClock(wall_ns=1_000_000_000, window_s=0.5)  # TensorFlow's 1.0 s is the window's 0.5 s


def shape(trace: Trace) -> list[tuple[str, int, int, float, str]]:
    return [(e.action, e.pointer, e.size, round(e.time, 6), e.label) for e in trace]


def test_frees_pair_by_address_latest_first_and_what_came_before_is_left_out() -> None:
    events = [
        event(1_000_000_000, False, 0xA),  # a buffer from before the window: its free is ignored
        event(1_100_000_000, True, 0xB, 100, op="First"),
        event(1_200_000_000, True, 0xB, 50, op="Second"),  # the same address again (a sub-allocator's reuse)
        event(1_300_000_000, False, 0xB),  # frees the latest: Second
        event(1_400_000_000, False, 0xB),  # then First
    ]
    converted = trace_events(events, CLOCK, end=10.0, tensorflow_has_gpu=False)
    assert shape(converted.events) == [
        ("allocate", 1, 100, 0.6, "First"),
        ("allocate", 2, 50, 0.7, "Second"),
        ("free", 2, 50, 0.8, "Second"),
        ("free", 1, 100, 0.9, "First"),
    ]
    assert {e.device for e in converted.events} == {"cpu:0"} and {e.source for e in converted.events} == {"tensorflow"}


def test_at_equal_times_a_free_comes_before_the_allocation_that_reuses_its_address() -> None:
    events = [
        event(1_100_000_000, True, 0xB, 64),
        event(1_200_000_000, True, 0xB, 32),
        event(1_200_000_000, False, 0xB),
    ]
    assert [(e.action, e.pointer) for e in trace_events(events, CLOCK, end=10.0, tensorflow_has_gpu=False).events] == [
        ("allocate", 1),
        ("free", 1),
        ("allocate", 2),
    ]


def test_paused_spans_and_host_memory_beside_a_gpu_are_left_out_and_what_falls_after_the_end_is_kept_at_it() -> None:
    events = [
        event(1_100_000_000, True, 0x1, 10, allocator="GPU_0_bfc", op="InPause"),  # at 0.6 s, inside the pause
        event(1_200_000_000, True, 0x2, 20, allocator="GPU_0_bfc", op="Kept"),
        event(1_250_000_000, True, 0x3, 30, allocator="gpu_host_bfc", op="Staging"),
        event(1_300_000_000, False, 0x1, allocator="GPU_0_bfc"),  # its free is not the window's either
        event(1_350_000_000, False, 0x3, allocator="gpu_host_bfc"),
        # at 8.5 s and 8.6 s, after the end at 5.0 s: the profiler stops after the window closes, when
        # only the plugin runs, so this is the two clocks' disagreement: kept, at the window's end
        event(9_000_000_000, True, 0x4, 40, allocator="GPU_0_bfc", op="After"),
        event(9_100_000_000, False, 0x2, allocator="GPU_0_bfc"),
    ]
    converted = trace_events(events, CLOCK, end=5.0, tensorflow_has_gpu=True, paused=[(0.55, 0.65)])
    assert shape(converted.events) == [
        ("allocate", 1, 20, 0.7, "Kept"),
        ("allocate", 2, 40, 5.0, "After"),
        ("free", 1, 20, 5.0, "Kept"),
    ]
    assert {e.device for e in converted.events} == {"gpu:0"}
    assert converted.host_allocators == {"gpu_host_bfc"}
    # what a shared fixture started and kept, for the recorder: freed after its pause (by the test), so
    # kept when the fixture was ready, as in a run where another test set it up
    assert converted.paused == [(pytest.approx(0.6), "gpu:0", 10, True)]


class Value:
    """A value a framework allocated for (weakly referenced, as arrays are)."""


def test_a_shared_fixtures_pause_notes_each_allocator_that_allocated_inside_and_what_it_holds() -> None:
    """What a fixture shared by several tests allocates is no test's, but the allocator it started
    stays, holding what the fixture keeps (plugin/shared_fixtures.py): per owner of a pause, in the
    order allocated, each buffer still held when the pause ended (its own entry) and each (source,
    device) whose first allocation there was not (0 bytes), read live (JAX's capture: the values alive then) or after the window from its time
    (TensorFlow's profiler: no free inside a pause); a pause without an owner notes nothing."""
    ticks = iter(float(t) for t in range(100))
    recorder = TraceRecorder(clock=lambda: next(ticks))
    outer, inner = object(), object()
    kept, dropped = Value(), Value()
    notes = recorder.fixtures
    recorder.begin()  # 0
    with recorder.paused():  # 1 .. 2: the plugin's own work
        notes.note("jax", kept, [("cpu:0", 64)])
    with recorder.paused(outer):  # 3 .. 8
        notes.note("jax", kept, [("cpu:1", 128), ("cpu:0", 32)])  # 4
        notes.note("jax", kept, [("cpu:1", 128)])  # the same value again: nothing more
        with recorder.paused(inner):  # 5 .. 7: a fixture the outer one asked for
            notes.note("jax", dropped, [("cpu:1", 256)])  # 6
            del dropped  # gone before the fixture was ready: not kept
        assert notes.noting
    assert not notes.noting
    notes.note("jax", kept, [("cpu:0", 512)])  # no pause: the test's own, recorded as such
    recorder.end()
    del kept  # after the fixture was ready (a test donated it): still what the fixture kept
    notes.note_at(3.5, "tensorflow", "cpu:0", 1024, True)  # before JAX's first in the outer fixture
    notes.note_at(3.6, "tensorflow", "cpu:0", 8, False)  # freed inside its pause: not kept
    notes.note_at(3.7, "tensorflow", "cpu:0", 512, True)  # a second buffer kept there: its own entry
    notes.note_at(6.5, "tensorflow", "cpu:0", 2048, True)  # inside both: the inner one's
    notes.note_at(9.5, "tensorflow", "cpu:0", 4096, True)  # in no owner's pause
    assert notes.started_by() == {
        outer: [
            ("tensorflow", "cpu:0", 1024),
            ("tensorflow", "cpu:0", 512),
            ("jax", "cpu:1", 128),
            ("jax", "cpu:0", 32),
        ],
        inner: [("jax", "cpu:1", 0), ("tensorflow", "cpu:0", 2048)],
    }
    recorder.begin()
    assert notes.started_by() == {}  # each window's own


def test_the_window_clock_pairs_the_wall_clock_with_the_closest_two_readings_of_the_windows() -> None:
    """A pair read one after the other is off by however long the thread waited between the reads:
    of a few tries, the one read in the least time, at the midpoint of its two window readings."""
    window = iter([0.0, 0.020, 1.0, 1.000002, 2.0, 2.001])  # the first and last tries waited 20 ms and 1 ms
    wall = iter([100, 200, 300])
    clock = WindowClock.read(lambda: next(window), lambda: next(wall), tries=3)
    assert clock == WindowClock(wall_ns=200, window_s=pytest.approx(1.000001))


def test_the_recorder_keeps_its_pauses_and_its_end_for_captures_that_read_events_afterwards() -> None:
    ticks = iter([10.0, 10.5, 11.0, 11.2, 12.0, 12.5])
    recorder = TraceRecorder(clock=lambda: next(ticks))
    recorder.begin()  # 10.0
    with recorder.paused():  # 10.5 .. 11.0: a shared fixture's setup
        with recorder.paused():  # nested: one span
            pass
    assert recorder.now() == pytest.approx(1.2)  # 11.2
    with recorder.paused():  # 12.0 .. closed by end() at 12.5
        recorder.end()
    assert recorder.paused_spans == [(0.5, 1.0), (2.0, 2.5)] and recorder.ended_at == 2.5


def test_the_fallback_is_the_peak_held_for_the_whole_test_and_says_it_is_an_upper_bound() -> None:
    reading = Reading("tensorflow", True, peak_bytes_in_use=3 * MiB, figures={"device": "CPU:0"})
    events, notes = peak_window(reading, "TensorFlow's profiler did not start")
    assert events is not None
    assert shape(events) == [("allocate", 1, 3 * MiB, 0.0, PEAK_LABEL)] and events[0].device == "cpu:0"
    assert notes[0].startswith("TensorFlow's profiler did not start: ") and "upper bound" in notes[0]
    assert peak_window(
        Reading("tensorflow", False, note="TensorFlow was not imported by this test", unused=True), "x"
    ) == (Trace(), [])
    events, notes = peak_window(Reading("tensorflow", False, note="Allocator stats not available"), "no profiler")
    assert events is not None and not len(events)  # nothing to show: an empty trace with a note has no figure, never 0
    assert notes == ["TensorFlow's allocations are not measured: no profiler, and Allocator stats not available"]


def test_the_cpu_allocator_variable_is_set_unless_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_devmem.capture.tensorflow import cpu_allocator

    monkeypatch.setattr(cpu_allocator, "tensorflow_started", lambda: False)  # as in a fresh process
    environ: dict[str, str] = {}
    setting = prepare_cpu_allocator(environ)
    # oneDNN off too: its kernels take their scratch outside TensorFlow's allocator, on some CPUs only
    assert environ == {VARIABLE: "true", "TF_ENABLE_ONEDNN_OPTS": "0"} and setting.set_here and setting.effective
    assert setting.describe() == (
        "TensorFlow's CPU allocator: BFC (TF_CPU_ALLOCATOR_USE_BFC=true, set by pytest-devmem); "
        "oneDNN off (TF_ENABLE_ONEDNN_OPTS=0, set by pytest-devmem: the same figures on every CPU)"
    )
    assert setting.problem() is None
    environ = {VARIABLE: "false", "TF_ENABLE_ONEDNN_OPTS": "1"}
    setting = prepare_cpu_allocator(environ)
    assert (
        environ == {VARIABLE: "false", "TF_ENABLE_ONEDNN_OPTS": "1"} and not setting.set_here and not setting.effective
    )
    assert "oneDNN as you set it (TF_ENABLE_ONEDNN_OPTS=1)" in setting.describe()
    assert "not BFC (TF_CPU_ALLOCATOR_USE_BFC=false, yours)" in setting.describe()
    assert (
        setting.problem()
        == "TF_CPU_ALLOCATOR_USE_BFC=false (yours): TensorFlow's CPU allocations are traced only in part, or not at all"
    )
    environ = {"TF_ENABLE_ONEDNN_OPTS": "1"}  # oneDNN on by the user's choice: kept, and said to change the figures
    setting = prepare_cpu_allocator(environ)
    assert environ == {VARIABLE: "true", "TF_ENABLE_ONEDNN_OPTS": "1"} and setting.effective
    assert (setting.problem() or "").startswith(
        "TF_ENABLE_ONEDNN_OPTS=1 (yours): oneDNN's kernels take their scratch outside TensorFlow's allocator"
    )


# -- the profile TensorFlow writes -------------------------------------------------------------


def make_space(tensorflow_loaded: Any) -> Any:
    """An XSpace as TensorFlow's profiler writes it: a function run whose kernel allocates on
    another thread, an eager op, and an allocation outside any op in the function's step."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    environment = space.planes.add(name="Task Environment")
    environment.stat_metadata[1].name = "profile_start_time"
    environment.stats.add(metadata_id=1, uint64_value=5_000_000_000)
    host = space.planes.add(name="/host:CPU")
    names = [
        "EagerLocalExecute: __inference_step_7",
        "FunctionRun",
        "MemoryAllocation",
        "MemoryDeallocation",
        "ExecutorDoneCallback",
        "EagerExecute",
    ]
    for key, name in enumerate(names, start=1):
        host.event_metadata[key].name = name
    for key, name in enumerate(
        ["allocator_name", "requested_bytes", "addr", "tf_op", "id", "allocation_bytes"], start=1
    ):
        host.stat_metadata[key].name = name

    def memory(line: Any, offset_ps: int, allocate: bool, address: int, size: int, op: str = "", step: int = 0) -> None:
        stats = [(1, "bfc_cpu_allocator_for_gpu"), (6, size + 256), (2, size), (3, address)]
        if op:
            stats += [(4, op), (5, step)]
        made = line.events.add(metadata_id=3 if allocate else 4, offset_ps=offset_ps)
        for key, value in stats:
            stat = made.stats.add(metadata_id=key)
            if isinstance(value, str):
                stat.str_value = value
            elif key == 5:
                stat.int64_value = value
            else:
                stat.uint64_value = value

    python = host.lines.add(id=1, name="python", timestamp_ns=1000)
    python.events.add(metadata_id=6, offset_ps=0, duration_ps=10_000_000)  # EagerExecute: not a caller
    python.events.add(metadata_id=1, offset_ps=1_000_000, duration_ps=8_000_000)
    python.events.add(metadata_id=2, offset_ps=2_000_000, duration_ps=1_000_000).stats.add(
        metadata_id=5, int64_value=-42
    )
    memory(python, 20_000_000, True, 0x10, 512, op="Fill", step=99)  # an eager op: its step runs no function
    compute = host.lines.add(id=2, name="tf_Compute/1", timestamp_ns=1000)
    memory(compute, 2_500_000, True, 0x20, 4096, op="MatMul", step=-42)
    done = compute.events.add(metadata_id=5, offset_ps=2_600_000, duration_ps=300_000)
    done.stats.add(metadata_id=5, int64_value=-42)
    memory(compute, 2_700_000, True, 0x30, 64)
    memory(compute, 2_800_000, False, 0x20, 4096)
    return space


def test_a_profile_gives_each_allocation_its_op_function_and_time(tensorflow_loaded: object) -> None:
    profile = read_profile(make_space(tensorflow_loaded))
    assert profile.start_ns == 5_000_000_000 and profile.host_events == 8
    assert [
        (e.time_ns, e.allocate, e.address, e.requested_bytes, e.op, e.function, e.thread) for e in profile.events
    ] == [
        (5_000_021_000, True, 0x10, 512, "Fill", "", 0),
        (5_000_003_500, True, 0x20, 4096, "MatMul", "step", 1),  # in the function's step, on another thread
        (5_000_003_700, True, 0x30, 64, "", "step", 1),  # outside any op, inside the step's done callback
        (5_000_003_800, False, 0x20, 4096, "", "step", 1),
    ]
    converted = trace_events(
        profile.events, WindowClock(wall_ns=5_000_000_000, window_s=0.0), end=1.0, tensorflow_has_gpu=False
    )
    assert [(e.action, e.size, e.label) for e in converted.events] == [
        ("allocate", 4096, "MatMul in step"),
        ("allocate", 64, "step"),
        ("free", 4096, "MatMul in step"),
        ("allocate", 512, "Fill"),
    ]


def test_an_op_tensorflow_prints_as_null_is_no_op(tensorflow_loaded: object) -> None:
    """TensorFlow 2.16 to 2.19 write `tf_op: "(null)"` for an allocation outside any op (a tf.data
    batch filled in the executor's done callback): it takes its step's function, as no op does."""
    space = make_space(tensorflow_loaded)
    outside = next(
        event for event in space.planes[1].lines[1].events if any(s.uint64_value == 0x30 for s in event.stats)
    )
    outside.stats.add(metadata_id=4, str_value="(null)")
    outside.stats.add(metadata_id=5, int64_value=-42)
    found = [(e.op, e.function) for e in read_profile(space).events if e.address == 0x30]
    assert found == [("", "step")]


# -- real TensorFlow, one process per oneDNN setting ---------------------------------------------

WORK = """
import numpy as np
import tensorflow as tf

MiB = 2**20


def test_variable():
    v = tf.Variable(tf.zeros((100 * MiB // 4,), dtype=tf.float32))
    assert v.shape[0] == 100 * MiB // 4


def test_ops():
    a = tf.random.normal((256, 256), seed=1)
    b = tf.matmul(a, a)
    c = tf.nn.relu(b) + 1.0
    assert c.shape == (256, 256)


def test_temporary_is_freed():
    t = tf.ones((16 * MiB // 4,))
    assert float(tf.reduce_sum(t)) > 0
    del t
    u = tf.zeros((16 * MiB // 4,))  # takes the memory t gave back
    assert u.shape[0] > 0


@tf.function
def step(x):
    return tf.reduce_sum(tf.matmul(x, x))


def test_function():
    x = tf.ones((128, 128))
    assert float(step(x)) > 0


def test_data():
    dataset = tf.data.Dataset.range(256).map(lambda i: tf.fill((1024,), tf.cast(i, tf.float32))).batch(32)
    assert sum(1 for _ in dataset) == 8


def test_keras_fit():
    model = tf.keras.Sequential([tf.keras.layers.Input((32,)), tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(4)])
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(np.ones((256, 32), np.float32), np.zeros((256,), np.int64), batch_size=64, epochs=1, verbose=0)
"""


@pytest.fixture(scope="module")
def work_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[dict[str, dict[str, Any]], dict[str, Trace], str, dict[str, Any]]]:
    """The WORK suite run once with oneDNN off and once on, each in a fresh process (TensorFlow reads
    both variables when it starts), without TF_CPU_ALLOCATOR_USE_BFC: the plugin sets it."""
    import subprocess
    import sys

    pytest.importorskip("tensorflow")
    folder = tmp_path_factory.mktemp("work")
    (folder / "test_work.py").write_text(WORK)
    runs = {}
    for onednn in ("0", "1"):
        environment = {
            key: value
            for key, value in os.environ.items()
            if key not in (VARIABLE, "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")
        }
        environment.update(
            TF_ENABLE_ONEDNN_OPTS=onednn,
            TF_CPP_MIN_LOG_LEVEL="2",
            PYTHONPATH=os.pathsep.join(
                p for p in (str(Path(__file__).parents[2]), environment.get("PYTHONPATH", "")) if p
            ),
        )
        command = [
            sys.executable,
            "-m",
            "pytest",
            "test_work.py",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:hypothesispytest",
            "--devmem-mode=prealloc",
            f"--devmem-report=r{onednn}.json",
            f"--devmem-traces=traces{onednn}",
        ]
        done = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        report = json.loads((folder / f"r{onednn}.json").read_text())
        records = {r["test_id"].split("::")[-1]: r for r in report["records"]}
        traces = {
            path.name.split("::")[-1].split("test_work.py_")[-1].split("[")[0]: Trace.read_csv(path)
            for path in (folder / f"traces{onednn}").glob("*.csv")
        }
        runs[onednn] = (records, traces, done.stdout, report["session"])
    return runs


def allocations(trace: Trace) -> list[Any]:
    return [e for e in trace if e.action == "allocate"]


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_a_100_mib_variable_is_one_100_mib_allocation(work_runs: Any, onednn: str) -> None:
    records, traces, output, session = work_runs[onednn]
    said = "TensorFlow's CPU allocator: BFC (TF_CPU_ALLOCATOR_USE_BFC=true, set by pytest-devmem)"
    if onednn == "1":  # the user's choice, kept and said
        said += "; oneDNN as you set it (TF_ENABLE_ONEDNN_OPTS=1): its kernels' scratch is outside TensorFlow's allocator, and on CPUs without AVX-512 it is off"
    assert f"devmem: {said}" in output and session["tensorflow_cpu_allocator"] == said  # the header and the report
    assert session["device_class"] == (
        "sim-16GiB-onednn" if onednn == "1" else "sim-16GiB"
    )  # oneDNN's figures: baselines apart
    big = [e for e in allocations(traces["test_variable"]) if e.size >= MiB]
    assert [(e.size, e.label, e.device) for e in big] == [(100 * MiB, "Fill", "cpu:0")]  # not 128 MiB: what was asked
    assert 100 * MiB <= records["test_variable"]["peak_bytes_in_use"] < 100 * MiB + 64 * 1024


def test_the_same_figures_with_onednn_on_and_off(work_runs: Any) -> None:
    off, on = work_runs["0"][0], work_runs["1"][0]
    assert off["test_variable"]["peak_bytes_in_use"] == on["test_variable"]["peak_bytes_in_use"]
    for test in (
        "test_ops",
        "test_temporary_is_freed",
        "test_function",
    ):  # a scalar may be freed a moment earlier or later
        assert abs(off[test]["peak_bytes_in_use"] - on[test]["peak_bytes_in_use"]) <= 4096, test
    for test in (
        "test_data",
        "test_keras_fit",
    ):  # tf.data's threads hold as many batches in flight as their timing lets them
        assert abs(off[test]["peak_bytes_in_use"] - on[test]["peak_bytes_in_use"]) <= max(
            0.1 * off[test]["peak_bytes_in_use"], MiB
        ), test  # the gate's default tolerance


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_each_allocation_of_a_few_ops_is_one_event_labelled_with_its_op(work_runs: Any, onednn: str) -> None:
    traces = work_runs[onednn][1]
    trace = traces["test_ops"]
    outputs = [e.label for e in allocations(trace) if e.size == 256 * 256 * 4]
    matmul = "_MklMatMul" if onednn == "1" else "MatMul"  # oneDNN's rewrite of MatMul
    assert sorted(outputs) == sorted(["RandomStandardNormal", "Mul", "AddV2", matmul, "Relu", "AddV2"])
    assert len({e.pointer for e in allocations(trace)}) == len(allocations(trace))  # one event per allocation
    freed = {e.pointer for e in trace if e.action == "free"}
    assert all(
        e.pointer in freed for e in allocations(trace) if e.label in ("RandomStandardNormal", "Mul")
    )  # a's temporaries


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_a_temporary_made_and_dropped_is_freed_so_the_next_does_not_stack_on_it(work_runs: Any, onednn: str) -> None:
    records, traces = work_runs[onednn][:2]
    trace = traces["test_temporary_is_freed"]
    big = [(e.action, e.label) for e in trace if e.size == 16 * MiB]
    assert big == [
        ("allocate", "Fill"),
        ("free", "Fill"),
        ("allocate", "Fill"),
        ("free", "Fill"),
    ]  # u too, when the test returns
    assert 16 * MiB <= records["test_temporary_is_freed"]["peak_bytes_in_use"] < 17 * MiB  # not 32 MiB


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_ops_in_a_function_keras_fit_and_tf_data_name_where_they_ran(work_runs: Any, onednn: str) -> None:
    traces = work_runs[onednn][1]
    assert "step" in {
        e.label.rsplit(" in ", 1)[-1] for e in allocations(traces["test_function"]) if e.size == 128 * 128 * 4
    }
    fit = {e.label for e in allocations(traces["test_keras_fit"])}
    assert any(
        label.endswith(" in multi_step_on_iterator") or label.endswith(" in one_step_on_iterator") for label in fit
    ), sorted(fit)[:20]
    data = [e for e in allocations(traces["test_data"]) if e.size == 4096]
    assert len(data) == 256 and {e.label for e in data} == {
        "Fill in tf.data MapAndBatch"
    }  # the map, fused with the batch
    batches = [e for e in allocations(traces["test_data"]) if e.size == 32 * 4096]
    assert len(batches) == 8 and {e.label for e in batches} == {"tf.data MapAndBatch"}


# -- real TensorFlow in this process: JAX's clock, the fallbacks -------------------------------------

TOGETHER = """
import jax.numpy as jnp
import tensorflow as tf

def test_order():
    a = jnp.ones((1024, 1024)).block_until_ready()  # 4 MiB in JAX
    t = tf.ones((2048, 1024))                        # 8 MiB in TensorFlow
    b = jnp.ones((512, 1024)).block_until_ready()   # 2 MiB in JAX
    assert a.size and t.shape[0] and b.size

def test_tensorflow_temporary_then_jax():
    t = tf.ones((16 * 2**20,))                                 # 64 MiB in TensorFlow, dropped
    assert float(tf.reduce_sum(t)) > 0
    del t
    x = jnp.ones((16 * 2**20,)).block_until_ready()            # then 64 MiB in JAX
    assert x.size
"""


def test_tensorflow_and_jax_events_keep_their_real_order(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_together=TOGETHER)
    pytester.runpytest_inprocess(
        "--devmem-mode=growth", "--devmem-report=r.json", "--devmem-traces=traces"
    ).assert_outcomes(passed=2)
    trace = Trace.read_csv(next((pytester.path / "traces").glob("*test_order*.csv")))
    assert [(e.source, e.size) for e in allocations(trace) if e.size >= MiB] == [
        ("jax", 4 * MiB),
        ("tensorflow", 8 * MiB),
        ("jax", 2 * MiB),
    ]
    records = {r["test_id"].split("::")[-1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    # TensorFlow's 64 MiB is given back before JAX's 64 MiB: the two never stack
    assert 64 * MiB <= records["test_tensorflow_temporary_then_jax"]["peak_bytes_in_use"] < 66 * MiB


SHARED_PIPELINE = """
import jax.numpy as jnp
import pytest
import tensorflow as tf

@pytest.fixture(scope="module")
def pipeline():
    return tf.data.Dataset.from_tensor_slices(tf.ones((1024, 256))).batch(32)  # TensorFlow's first allocation

def test_a(pipeline):
    assert jnp.ones((128, 1024, 1024)).shape[0] == 128  # 512 MiB in JAX

def test_b(pipeline):
    assert jnp.ones((128, 1024, 1024)).shape[0] == 128

def test_c(request):
    request.getfixturevalue("pipeline")  # asked for, not named
    assert jnp.ones((128, 1024, 1024)).shape[0] == 128
"""


def test_a_framework_a_shared_fixture_started_holds_its_share_in_every_test_that_uses_it_in_any_order(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    """TensorFlow, first started in a module-scoped fixture, takes most of the device (its default);
    the fixture's memory is no test's, but TensorFlow's allocator stays, so each test's 512 MiB JAX
    step finds the device held: the tenant out of memory it is on a GPU, for the test that set the
    fixture up and for those after it, one that asks for it by name too, alone or in any order
    (plugin/shared_fixtures.py)."""
    pytester.makepyfile(test_shared=SHARED_PIPELINE)
    selections = {
        "all": [],
        "c alone": ["test_shared.py::test_c"],
        "reversed": ["test_shared.py::test_c", "test_shared.py::test_b", "test_shared.py::test_a"],
    }
    seen: dict[str, tuple[object, ...]] = {}
    for name, selection in selections.items():
        report = f"{name.replace(' ', '_')}.json"
        pytester.runpytest_inprocess(
            "--devmem-mode=prealloc", "--devmem-device=sim:2GiB", f"--devmem-report={report}", *selection
        )
        for record in json.loads((pytester.path / report).read_text())["records"]:
            test = record["test_id"].split("::")[-1]
            figures = (record["oom"]["kind"], record["peak_bytes_reserved"], record["devices"][0]["allocators"])
            assert seen.setdefault(test, figures) == figures, (name, test)
    assert set(seen) == {"test_a", "test_b", "test_c"}
    assert {figures[0] for figures in seen.values()} == {"tenant"}
    assert [a["allocator"] for a in seen["test_b"][2]] == ["tensorflow", "jax"]  # TensorFlow's, started first


OWN_PROFILER = """
import tensorflow as tf

def test_profiles_itself(tmp_path):
    tf.profiler.experimental.start(str(tmp_path))   # the test's own session: it gets the profiler
    x = tf.ones((1_000_000,))
    assert float(tf.reduce_sum(x)) > 0
    tf.profiler.experimental.stop()

def test_after():
    y = tf.ones((2_000_000,))
    assert y.shape[0] == 2_000_000
"""


def test_a_test_with_its_own_profiler_session_gets_it_and_its_record_falls_back_to_the_peak(
    tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_own=OWN_PROFILER)
    pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-report=r.json", "--devmem-traces=traces"
    ).assert_outcomes(passed=2)
    records = {r["test_id"].split("::")[-1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    own = records["test_profiles_itself"]
    assert any(
        note.startswith("the test started a TensorFlow profiler session of its own") and "an upper bound" in note
        for note in own["trace"]["notes"]
    )
    assert own["peak_bytes_in_use"] >= 4_000_000
    trace = Trace.read_csv(next((pytester.path / "traces").glob("*test_profiles_itself*.csv")))
    assert [(e.action, e.label) for e in trace] == [("allocate", PEAK_LABEL)]
    after = records["test_after"]  # the next test is traced again
    assert after["trace"]["notes"] == [] and 8_000_000 <= after["peak_bytes_in_use"] < 8_100_000


def test_a_capture_made_while_another_captures_patch_is_in_place_still_gets_the_profiler(
    tensorflow_loaded: object,
) -> None:
    """A capture's patch of TensorFlow's profiler class names the class it wraps: a capture made while
    one is in place (one left by a session that never closed) uses the class, not the patch."""
    from tensorflow.python.profiler.internal import _pywrap_profiler

    real = _pywrap_profiler.ProfilerSession
    left = TensorFlowCapture(TraceRecorder())
    later = TensorFlowCapture(TraceRecorder())
    try:
        assert left.install() and _pywrap_profiler.ProfilerSession is not real
        assert later.install(), later.note
        recorder = later._recorder
        recorder.begin()
        later.begin()
        kept = tensorflow_loaded.ones((1024,))  # type: ignore[attr-defined]
        recorder.end()
        events, notes = later.end()
        assert notes == [] and events is not None and 4096 in [e.size for e in events if e.action == "allocate"]
        del kept
    finally:
        later.uninstall()
        left.uninstall()
    assert _pywrap_profiler.ProfilerSession is real


def test_a_tensorflow_without_the_profiler_api_falls_back_to_the_peak(
    tensorflow_loaded: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tensorflow.python.profiler.internal import _pywrap_profiler

    class OldSession:
        def start(self, *args: object) -> None: ...

    monkeypatch.setattr(_pywrap_profiler, "ProfilerSession", OldSession)
    recorder = TraceRecorder()
    capture = TensorFlowCapture(recorder)
    assert not capture.install()
    assert capture.note == "this TensorFlow's profiler session lacks export_to_tb"
    recorder.begin()
    capture.begin()
    recorder.end()
    events, notes = capture.end(Reading("tensorflow", True, peak_bytes_in_use=MiB, figures={"device": "CPU:0"}))
    assert events is not None and [(e.size, e.label) for e in events] == [(MiB, PEAK_LABEL)]
    assert notes[0].startswith("this TensorFlow's profiler session lacks export_to_tb: ") and notes[0].endswith(
        "an upper bound"
    )


def test_tensorflow_started_before_the_plugin_says_so_in_the_summary(
    tensorflow_loaded: Any, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert float(tensorflow_loaded.reduce_sum(tensorflow_loaded.ones((4,)))) == 4.0  # TensorFlow has started here
    monkeypatch.delenv(VARIABLE, raising=False)  # as if nobody had set it before TensorFlow started
    pytester.makepyfile(
        test_late="import tensorflow as tf\n\ndef test_tf():\n    assert tf.ones((1024,)).shape[0] == 1024\n"
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "devmem: TensorFlow had started before pytest-devmem could set TF_CPU_ALLOCATOR_USE_BFC=true*",
            "pytest-devmem: TensorFlow had started before pytest-devmem could set TF_CPU_ALLOCATOR_USE_BFC=true*what could be measured",
        ]
    )
    assert VARIABLE not in os.environ  # what the plugin set, it took back


@pytest.fixture
def _plain_cpu_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the subprocess above: oneDNN off and no BFC, the CPU allocator of a CPU without AVX-512."""
    monkeypatch.setenv(VARIABLE, "false")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.mark.usefixtures("_plain_cpu_allocator")
def test_a_tensorflow_that_keeps_no_statistics_has_no_figure_and_says_why(pytester: pytest.Pytester) -> None:
    pytest.importorskip("tensorflow")
    pytester.makepyfile(
        test_plain="import tensorflow as tf\n\ndef test_tf():\n    assert float(tf.reduce_sum(tf.ones((1024,)))) == 1024.0\n"
    )
    result = pytester.runpytest_subprocess("--devmem-mode=prealloc", "--devmem-report=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "devmem: TensorFlow's CPU allocator: not BFC (TF_CPU_ALLOCATOR_USE_BFC=false, yours)*",
            "pytest-devmem: TF_CPU_ALLOCATOR_USE_BFC=false (yours)*",
        ]
    )
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["peak_bytes_in_use"] is None  # not measured: never 0
    assert any(
        note.startswith("TensorFlow ran but its allocator keeps no statistics") for note in record["trace"]["notes"]
    )
