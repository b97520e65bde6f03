from __future__ import annotations

from pathlib import Path

import pytest

from pytest_devmem.errors import InvalidFreeError, OutOfMemoryError
from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.frameworks import setups_for
from pytest_devmem.model.machine import MachineSpec, run_machine
from pytest_devmem.model.pool import Policy, Trace, TraceEvent, TracingPool, make_pool, replay
from pytest_devmem.model.trace import ALLOCATE, ALLOCATE_FAILURE, FREE, START, TraceFormatError
from pytest_devmem.units import GiB, MiB


def record_workload(mode: str = "growth", fraction: float | None = None, capacity: int = GiB) -> TracingPool:
    pool = TracingPool(make_pool(SimulatedDevice(capacity), Policy.of(mode, fraction)))
    weights = pool.alloc(64 * MiB)
    for _ in range(3):
        activations = [pool.alloc(size) for size in (4 * MiB, 8 * MiB, 1000)]
        for handle in reversed(activations):
            pool.free(handle)
    pool.free(weights)
    return pool


def test_tracing_pool_records_allocs_and_frees_in_order() -> None:
    pool = record_workload()
    actions = [event.action for event in pool.trace]
    assert actions[0] == ALLOCATE and actions[-1] == FREE
    assert actions.count(ALLOCATE) == actions.count(FREE) == 10
    assert pool.trace.events[1].size == 4 * MiB
    assert pool.trace.peak_live_bytes() == 76 * MiB + 1000
    assert pool.stats()["num_allocs"] == 10  # the adaptor forwards to the pool


def test_tracing_pool_records_failures() -> None:
    pool = TracingPool(make_pool(SimulatedDevice(GiB), Policy.of("fraction", 0.1)))
    with pytest.raises(OutOfMemoryError):
        pool.alloc(GiB)
    assert pool.trace.events == [
        TraceEvent(ALLOCATE_FAILURE, 0, GiB, pool.trace.events[0].time, pool.trace.events[0].thread)
    ]


def test_trace_round_trips_through_rmm_csv(tmp_path: Path) -> None:
    trace = record_workload().trace
    path = tmp_path / "trace.csv"
    trace.write_csv(path)
    assert path.read_text().splitlines()[0] == "Thread,Time,Action,Pointer,Size,Stream,Source,Label,Device,Process"
    again = Trace.read_csv(path)
    assert [(e.action, e.pointer, e.size) for e in again] == [(e.action, e.pointer, e.size) for e in trace]
    assert [e.time for e in again] == pytest.approx([e.time for e in trace], abs=1e-6)


def test_an_allocator_started_before_the_trace_is_a_start_event_in_both_files(tmp_path: Path) -> None:
    """A `start` (what a shared fixture started and keeps: capture/measurement.py) is read back from
    the CSV and the Arrow file as written, and replays as the allocator it started, holding the
    fixture's bytes, which are in no figure of the trace's own (in use, contributors at the peak)."""
    trace = Trace([TraceEvent(ALLOCATE, 1, MiB, source="jax", device="gpu:0")]).after(
        [
            TraceEvent(START, 0, 4096, source="tensorflow", label="a shared fixture's buffers", device="gpu:0"),
            TraceEvent(START, 0, 0, source="pool", device="gpu:0"),  # a start holding nothing: the plugin's
        ]
    )
    trace.write_csv(tmp_path / "t.csv")
    trace.write_arrow(tmp_path / "t.arrow")
    for name in ("t.csv", "t.arrow"):
        again = Trace.read(tmp_path / name)
        assert [(e.action, e.source, e.size, e.device) for e in again] == [
            (START, "tensorflow", 4096, "gpu:0"),
            (START, "pool", 0, "gpu:0"),
            (ALLOCATE, "jax", MiB, "gpu:0"),
        ]
        assert again.pairing_problem() is None
    run = run_machine(trace, setups_for(Policy.of("ondemand"), GiB), MachineSpec(GiB, default_device="gpu:0"))
    device = run.devices[0]
    assert run.order == ["tensorflow", "pool", "jax"] and device.peak_bytes_reserved == MiB + 4096  # on demand: as held
    assert device.peak_bytes_in_use == device.peak_bytes_requested == MiB and device.at_peak == {"jax": MiB}


def test_reads_rmm_logs_with_deallocate_and_clock_times(tmp_path: Path) -> None:
    path = tmp_path / "rmm.csv"
    path.write_text(
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "140573312345856,1634567890.123456,allocate,0x7f8a40000000,1024,0x7f8a38001020\n"
        "140573312345856,13:39:51:124000,allocate,0x7f8a40000400,2048,0x0\n"
        "140573312345856,13:39:51:125000,deallocate,0x7f8a40000000,1024,0x0\n"
    )
    trace = Trace.read_csv(path)
    assert [e.action for e in trace] == [ALLOCATE, ALLOCATE, FREE]
    assert trace.events[1].time == pytest.approx(13 * 3600 + 39 * 60 + 51.124)
    assert trace.events[0].stream == 0x7F8A38001020
    result = replay(trace, make_pool(SimulatedDevice(GiB), Policy.of("ondemand")))
    assert result.ok and result.peak_live_bytes == 3072


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "trace.csv:1: not a memory-event log"),
        ("a,b\n", "trace.csv:1: not a memory-event log"),
        ("Thread,Time,Action,Pointer,Size,Stream\n1,0.0,allocate,0x10\n", "trace.csv:2: expected 6 columns, got 4"),
        (
            "Thread,Time,Action,Pointer,Size,Stream\n1,0.0,allocate,0x10,5,0\n1,0.0,grab,0x10,5,0\n",
            "trace.csv:3: unknown action 'grab'",
        ),
        (
            "Thread,Time,Action,Pointer,Size,Stream\n1,0.0,allocate,zz,5,0\n",
            "trace.csv:2: Pointer 'zz' is not a whole number",
        ),
        (
            "Thread,Time,Action,Pointer,Size,Stream,Source,Label,Device,Process\n1,0.0,allocate,1,5,0,jax,,cpu:0,0.5\n",
            "trace.csv:2: Process '0.5' is not a whole number",
        ),
        (
            "Thread,Time,Action,Pointer,Size,Stream,Source,Label,Device,Process\n1,0.0,allocate,1,5,0,jax,,CPU:0,0\n",
            "trace.csv:2: Device 'CPU:0' is not a device: write PLATFORM:N in lower case",
        ),
        (
            "Thread,Time,Action,Pointer,Size,Stream,Source,Label,Device,Process\n1,0.0,allocate,1,5,0,jax,,cpu:00,0\n",
            "trace.csv:2: Device 'cpu:00' is not a device",
        ),
        (
            "Thread,Time,Action,Pointer,Size,Stream,Source,Label,Device,Process\n1,0.0,allocate,1,5,0,jax,,banana,0\n",
            "trace.csv:2: Device 'banana' is not a device",
        ),
    ],
)
def test_malformed_trace_names_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(content)
    with pytest.raises(TraceFormatError) as info:
        Trace.read_csv(path)
    assert message in str(info.value)


@pytest.mark.parametrize("mode", ["prealloc", "growth", "ondemand"])
def test_replay_reproduces_the_recorded_statistics(mode: str) -> None:
    recorded = record_workload(mode)
    fresh = make_pool(SimulatedDevice(GiB), Policy.of(mode))
    result = replay(recorded.trace, fresh)
    assert result.ok and result.events_replayed == len(recorded.trace)
    assert result.stats == recorded.stats()
    assert result.peak_live_bytes == recorded.trace.peak_live_bytes()


def test_replay_into_another_regime_changes_the_footprint_not_the_live_peak() -> None:
    trace = record_workload("growth").trace
    ondemand = replay(trace, make_pool(SimulatedDevice(GiB), Policy.of("ondemand")))
    prealloc = replay(trace, make_pool(SimulatedDevice(GiB), Policy.of("prealloc")))
    assert ondemand.peak_live_bytes == prealloc.peak_live_bytes
    assert ondemand.stats["peak_bytes_reserved"] < 80 * MiB < prealloc.stats["peak_pool_bytes"] == 768 * MiB


def test_replay_stops_at_the_first_oom_or_carries_on() -> None:
    trace = record_workload().trace
    small = replay(trace, make_pool(SimulatedDevice(GiB), Policy.of("fraction", 0.07)))  # 71.68 MiB
    assert not small.ok
    # the 64 MiB weights get the whole 71.68 MiB region (less than twice the request: no split),
    # so the very next 4 MiB activation cannot be served
    assert small.failed_at == small.events_replayed == 1
    assert small.stats["bytes_in_use"] == small.stats["pool_bytes"]
    assert isinstance(small.error, OutOfMemoryError)
    carried = replay(trace, make_pool(SimulatedDevice(GiB), Policy.of("fraction", 0.07)), stop_on_oom=False)
    assert carried.events_replayed == len(trace)
    assert carried.failed_at == 1
    assert carried.stats["num_ooms"] == 9


def test_replay_refuses_a_free_the_trace_never_allocated() -> None:
    trace = Trace([TraceEvent(ALLOCATE, 1, 100), TraceEvent(FREE, 2, 100)])
    with pytest.raises(InvalidFreeError, match="trace event 1: free of 0x2"):
        replay(trace, make_pool(SimulatedDevice(GiB), Policy.of("growth")))


def test_write_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("precious")
    Trace([TraceEvent(ALLOCATE, 1, 100)]).write_csv(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]
    assert "allocate" in path.read_text()


# -- allocations and frees pair -------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_the_first_unpaired_event_is_the_same_by_column_and_event_by_event(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long trace (by column with numpy) and its events one by one find the same first event that
    does not pair: allocated again while live, or freed with another size; on any lane."""
    import random
    import sys

    from pytest_devmem.model.trace import BY_COLUMN_FROM
    from pytest_devmem.model.trace.by_column import first_unpaired

    rng = random.Random(seed)
    trace, live = Trace(), {}
    for _ in range(BY_COLUMN_FROM):  # a well-paired trace over two devices and two sources
        key = (rng.choice(["cpu:0", "cpu:1"]), rng.choice(["jax", "pool"]), rng.randrange(1, 200))
        if key in live:
            trace.add(1, key[2], live.pop(key), source=key[1], device=key[0])
        else:
            live[key] = rng.randrange(1, 5000)
            trace.add(0, key[2], live[key], source=key[1], device=key[0])
    columns = (trace.actions, trace.pointers, trace.sizes, trace.devices, trace.processes, trace.sources)
    assert trace.pairing_problem() is None and first_unpaired(*columns) is None
    at = next(
        i
        for i in range(rng.randrange(BY_COLUMN_FROM // 2, BY_COLUMN_FROM - 100), BY_COLUMN_FROM)
        if trace.actions[i] == 1
    )
    if seed % 2:
        trace.sizes[at] += 1  # freed with another size
    else:
        trace.actions[at] = 0  # allocated again while live
    found = trace.pairing_problem()
    assert found is not None and found[0] == at and first_unpaired(*columns) == at
    monkeypatch.setitem(sys.modules, "pytest_devmem.model.trace.by_column", None)  # no numpy: event by event
    assert trace.pairing_problem() == found


def test_a_pointer_may_be_taken_again_once_freed_and_by_another_allocator_at_once() -> None:
    trace = Trace()
    trace.add(0, 0x10, 256, source="jax", device="gpu:0")
    trace.add(0, 0x10, 512, source="tensorflow", device="gpu:0")  # another allocator's own address space
    trace.add(0, 0x10, 512, source="jax", device="gpu:1")
    trace.add(1, 0x10, 256, source="jax", device="gpu:0")
    trace.add(0, 0x10, 1024, source="jax", device="gpu:0")  # freed, then taken again
    trace.add(2, 0x10, 99, source="jax", device="gpu:0")  # a recorded failure pairs with nothing
    assert trace.pairing_problem() is None
