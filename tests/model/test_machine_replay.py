"""The machine's fast replay gives exactly what its first, straightforward loop gave
(`reference_machine.py`): every device figure, map, fragmentation, out-of-memory result and
timeline, on random traces over devices, processes and frameworks, under every regime."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_machine import ReferenceMachine

from pytest_devmem.errors import DevmemError
from pytest_devmem.model.frameworks import setups_for
from pytest_devmem.model.machine import Machine, MachineRun, MachineSpec
from pytest_devmem.model.machine import replay as replay_module
from pytest_devmem.model.machine import state as state_module
from pytest_devmem.model.machine.loops import compiled_bfc, replay_lanes, replay_ondemand_columns
from pytest_devmem.model.pool import Policy
from pytest_devmem.model.trace import Trace
from pytest_devmem.units import GiB, KiB, MiB

SIZES = [1, 255, 256, 1000, 4 * KiB, 64 * KiB + 17, 300 * KiB, MiB, 5 * MiB + 3, 40 * MiB, 300 * MiB]
LANES = [
    ("", 0, "jax"),
    ("gpu:0", 0, "jax"),
    ("gpu:1", 0, "jax"),
    ("gpu:0", 0, "tensorflow"),
    ("gpu:1", 1, "jax"),
    ("", 0, "pool"),
]
REGIMES = [
    Policy.of("prealloc"),
    Policy.of("fraction", 0.3),
    Policy.of("growth"),
    Policy.of("ondemand"),
    Policy.of("compact"),
]


def build(operations: list[tuple[int, int, int, int]], lanes: list[tuple[str, int, str]]) -> Trace:
    """A trace from (kind, lane, size, pick) operations: 0-1 allocate, 2 free a live buffer (`pick`
    chooses which), 3 a temporary freed by the next event, 4 a recorded failure, 5 free the buffer
    allocated last (often the very next event), 6 an allocation whose pointer the next event frees
    on the next lane (which never allocated it)."""
    trace, live, pointer = Trace(), [], 0
    for kind, lane, size, pick in operations:
        device, process, source = lanes[lane % len(lanes)]
        if kind <= 1 or (kind in (2, 5) and not live):
            pointer += 1
            trace.add(0, pointer, size, source=source, label=f"{source} {pointer}", device=device, process=process)
            live.append((pointer, size, device, process, source))
        elif kind in (2, 5):
            gone = live.pop(pick % len(live) if kind == 2 else -1)
            trace.add(1, gone[0], gone[1], source=gone[4], device=gone[2], process=gone[3])
        elif kind in (3, 6):
            pointer += 1
            trace.add(0, pointer, size, source=source, label=f"{source} temp", device=device, process=process)
            if kind == 6:
                device, process, source = lanes[(lane + 1) % len(lanes)]
            trace.add(1, pointer, size, source=source, device=device, process=process)
        elif kind == 4:
            trace.add(2, 0, size, source=source, device=device, process=process)
    return trace


def outcome(machine: Any, trace: Trace, timeline: bool, stop_on_oom: bool) -> MachineRun | tuple[type, str]:
    try:
        return machine.run(trace, timeline=timeline, stop_on_oom=stop_on_oom)  # type: ignore[no-any-return]
    except DevmemError as error:  # both must refuse a trace alike
        return type(error), str(error)


def assert_same_replay(trace: Trace, policy: Policy, capacity: int) -> None:
    setups, spec = setups_for(policy, capacity), MachineSpec(capacity, "sim")
    for timeline in (False, True):
        for stop_on_oom in (True, False):
            expected = outcome(ReferenceMachine(spec, setups), trace, timeline, stop_on_oom)
            got = outcome(Machine(spec, setups), trace, timeline, stop_on_oom)
            if isinstance(expected, MachineRun) and isinstance(got, MachineRun):  # field by field: a clearer failure
                assert (got.devices, got.oom, got.failure) == (expected.devices, expected.oom, expected.failure)
                assert (got.snapshots, got.fragmented) == (expected.snapshots, expected.fragmented)
                assert (got.by_source, got.order, got.events_replayed, got.timeline) == (
                    expected.by_source,
                    expected.order,
                    expected.events_replayed,
                    expected.timeline,
                )
            assert got == expected


operations = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 5), st.sampled_from(SIZES), st.integers(0, 10**6)), max_size=160
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=operations,
    lanes=st.lists(st.sampled_from(LANES), min_size=1, max_size=4, unique=True),
    policy=st.sampled_from(REGIMES),
    capacity=st.sampled_from([96 * MiB, GiB, 16 * GiB]),
)
def test_a_random_trace_replays_as_the_first_loop_replayed_it(
    ops: list[tuple[int, int, int, int]], lanes: list[tuple[str, int, str]], policy: Policy, capacity: int
) -> None:
    assert_same_replay(build(ops, lanes), policy, capacity)


@settings(max_examples=80, deadline=None)
@given(
    ops=operations,
    source=st.sampled_from(["jax", "tensorflow", "pool"]),
    policy=st.sampled_from([*REGIMES[:3], Policy.of("fraction", 0.97)]),
    capacity=st.sampled_from([96 * MiB, GiB]),
)
def test_a_one_lane_trace_replays_as_the_first_loop_replayed_it(
    ops: list[tuple[int, int, int, int]], source: str, policy: Policy, capacity: int
) -> None:
    """One allocator on one device: the inline loop's own case, out of memory included (and
    TensorFlow's pool, which gives free regions back before it fails)."""
    assert_same_replay(build(ops, [("", 0, source)]), policy, capacity)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=operations,
    lanes=st.lists(st.sampled_from(LANES), min_size=1, max_size=4, unique=True),
    policy=st.sampled_from(REGIMES),
)
def test_lanes_found_by_column_replay_as_the_first_loop_replayed_them(
    ops: list[tuple[int, int, int, int]], lanes: list[tuple[str, int, str]], policy: Policy
) -> None:
    """Long traces find their lanes by column (numpy): here every trace does."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(state_module, "LANES_BY_COLUMN_FROM", 0)
        assert_same_replay(build(ops, lanes), policy, GiB)


fitting_operations = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 5), st.sampled_from(SIZES), st.integers(0, 10**6)), max_size=160
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=fitting_operations,
    lanes=st.lists(st.sampled_from(LANES), min_size=1, max_size=4, unique=True),
    capacity=st.sampled_from([64 * GiB, 128 * GiB]),
)
def test_an_ondemand_trace_replayed_by_column_gives_what_the_first_loop_gave(
    ops: list[tuple[int, int, int, int]], lanes: list[tuple[str, int, str]], capacity: int
) -> None:
    """Every allocator on-demand, every allocation fitting: the running sums over the columns
    (`replay_ondemand_columns`) give every figure, map and count the event loop gave."""
    trace = build(ops, lanes)
    setups, spec = setups_for(Policy.of("ondemand"), capacity), MachineSpec(capacity, "sim")
    fitted = sum(trace.sizes) <= capacity // 2  # TensorFlow's limit is what is free less its reserve
    if fitted and trace.actions.count(0):
        by_column = state_module.Replay(Machine(spec, setups), trace, False, True)
        assert replay_ondemand_columns(by_column) is not None
        by_event = state_module.Replay(Machine(spec, setups), trace, False, True)
        replay_lanes(by_event)
        assert end_state(by_column) == end_state(by_event)  # what the pools and devices hold at the end
    assert_same_replay(trace, Policy.of("ondemand"), capacity)


def end_state(replay: Any) -> list[object]:
    """Each device's bytes used and each allocator's buffers (trace pointer, size, asked, event)."""
    state: list[object] = []
    for device in replay.by_code:
        state.append((device.name, device.device.used, device.in_use, device.held))
        for allocator in device.allocators:
            pool = allocator.pool
            buffers = sorted((pointer, *pool._held[entry[0]], entry[1]) for pointer, entry in allocator.handles.items())
            state.append(
                (
                    allocator.source,
                    allocator.process,
                    pool.bytes_in_use,
                    pool.bytes_reserved,
                    pool.requested_bytes_in_use,
                    buffers,
                    len(pool._held),
                )
            )
    return state


def random_walk(seed: int, events: int, lanes: list[tuple[str, int, str]]) -> Trace:
    """Many small buffers freed in random order around a slowly rising peak: thousands of peaks,
    each followed by a free, so the maps at the peak come from a copy and a replay since. Now and
    then a temporary's pointer is freed on another lane (the loops skip that free too)."""
    rng = random.Random(seed)
    operations = []
    for _ in range(events):
        operations.append(
            (0 if rng.random() < 0.52 else 2, rng.randrange(len(lanes)), rng.choice(SIZES[:7]), rng.randrange(10**6))
        )
        if operations[-1][0] == 2 and rng.random() < 0.01:  # right after a free: no new peak, a temporary
            operations.append((6, rng.randrange(len(lanes)), 1, 0))
    return build(operations, lanes)


@pytest.mark.parametrize(
    "lanes",
    [[("", 0, "jax")], [("gpu:0", 0, "jax"), ("gpu:1", 0, "jax"), ("gpu:0", 0, "tensorflow")]],
    ids=["one lane", "three lanes"],
)
@pytest.mark.parametrize("mode", ["prealloc", "growth"])
def test_maps_promised_at_many_peaks_are_made_from_copies_as_they_were(
    monkeypatch: pytest.MonkeyPatch, lanes: list[tuple[str, int, str]], mode: str
) -> None:
    advanced: list[int] = []
    original = replay_module.advance

    def counting(replay: Any, device: Any, checkpoint: Any, upto: int) -> None:
        advanced.append(upto - checkpoint.upto)
        original(replay, device, checkpoint, upto)

    monkeypatch.setattr(replay_module, "advance", counting)
    trace = random_walk(7, 6000, lanes)
    assert_same_replay(trace, Policy.of(mode), 16 * GiB)
    assert advanced and max(advanced) > 1  # some maps were made by replaying events after a copy


def fragmenting_walk(seed: int, events: int, lanes: list[tuple[str, int, str]]) -> Trace:
    """Buffers of 300 KiB to 5 MiB freed in random order while the live bytes hover near a 96 MiB
    device's compacting pool (72 MiB): the free bytes scatter, and a larger allocation then makes
    the pool move its buffers (or fail)."""
    rng = random.Random(seed)
    operations, live = [], 0
    for _ in range(events):
        if live > 60 * MiB or (live > 20 * MiB and rng.random() < 0.45):
            operations.append((2, 0, MiB, rng.randrange(10**6)))
            live -= 2 * MiB  # about: the walk only steers
        else:
            size = rng.choice([300 * KiB, MiB, 2 * MiB + 5, 5 * MiB + 3])
            operations.append((0, rng.randrange(len(lanes)), size, 0))
            live += size
    return build(operations, lanes)


ONE_LANE, THREE_LANES = [("", 0, "jax")], [("gpu:0", 0, "jax"), ("gpu:1", 0, "jax"), ("gpu:1", 0, "tensorflow")]


@pytest.mark.parametrize(
    ("lanes", "capacity", "seed"),
    [(ONE_LANE, 96 * MiB, seed) for seed in (2, 3, 4, 6, 7)]
    + [(THREE_LANES, 48 * MiB, seed) for seed in (0, 2, 6, 16, 20)],  # walks that move buffers twice or more
    ids=[f"one lane {seed}" for seed in (2, 3, 4, 6, 7)] + [f"three lanes {seed}" for seed in (0, 2, 6, 16, 20)],
)
def test_a_compacting_pool_moving_its_buffers_replays_as_the_first_loop_replayed_it(
    lanes: list[tuple[str, int, str]], capacity: int, seed: int
) -> None:
    """A compacting pool that moves its buffers (and moves them and still fails): every figure and
    map is the first loop's."""
    trace = fragmenting_walk(seed, 1500, lanes)
    assert_same_replay(trace, Policy.of("compact"), capacity)
    assert moves(trace, capacity), "the walk never made the pool move its buffers"


def moves(trace: Trace, capacity: int) -> int:
    """How often the compacting pools moved their buffers in the replay of `trace` going on past failures."""
    run = Machine(MachineSpec(capacity, "sim"), setups_for(Policy.of("compact"), capacity)).run(
        trace, stop_on_oom=False
    )
    return sum(allocator.compactions for device in run.devices for allocator in device.allocators)


def test_tensorflow_giving_regions_back_before_it_fails_leaves_its_pool_smaller_in_the_figures() -> None:
    """TensorFlow's pool gives a wholly free region back before an allocation fails (bfc_allocator.cc
    DeallocateFreeRegions); where the device then cannot give a new one, the allocation fails with
    the pool smaller than before, and the replay (going on past it) sees the smaller pool."""
    events = [
        (0, 1, 600 * MiB),
        (0, 2, 290 * MiB),
        (0, 3, 3 * MiB // 2),
        (1, 3, 3 * MiB // 2),
        (0, 4, 50 * MiB),
        (1, 1, 600 * MiB),
        (0, 5, MiB),
    ]
    trace = Trace()
    for action, pointer, size in events:
        trace.add(action, pointer, size, source="tensorflow")
    setups, spec = setups_for(Policy.of("fraction", 0.97), GiB), MachineSpec(GiB, "sim")
    run = Machine(spec, setups).run(trace, stop_on_oom=False)
    assert run.oom is not None and run.oom.event == 4
    assert run.devices[0].allocators[0].peak_bytes_reserved > run.oom.pool_bytes  # a region went back
    assert_same_replay(trace, Policy.of("fraction", 0.97), GiB)


compiled = pytest.mark.skipif(
    not compiled_bfc.available(),
    reason="the compiled loop is off: DEVMEM_COMPILED=0, or numba cannot be imported",
)


@pytest.fixture
def every_trace_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled loop runs every trace without a timeline, however short."""
    monkeypatch.setattr(compiled_bfc, "COMPILED_FROM_EVENTS", 0)
    monkeypatch.setattr(compiled_bfc, "LOADED_FROM_EVENTS", 0)


@compiled
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=operations,
    source=st.sampled_from(["jax", "tensorflow", "pool"]),
    policy=st.sampled_from([*REGIMES[:3], Policy.of("fraction", 0.97), Policy.of("compact")]),
    capacity=st.sampled_from([96 * MiB, GiB]),
)
def test_a_one_lane_trace_replayed_compiled_gives_what_the_first_loop_gave(
    every_trace_compiled: None, ops: list[tuple[int, int, int, int]], source: str, policy: Policy, capacity: int
) -> None:
    """The compiled loop (numba) and the event loop it hands the pool's growth, failures, moves and
    unknown pointers to: every figure, map and out-of-memory result of the first loop."""
    assert_same_replay(build(ops, [("", 0, source)]), policy, capacity)


@compiled
def test_the_compiled_loop_loads_once_the_traces_it_suits_add_up_to_enough_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Loading numba costs a fixed price a process, which the compiled loop earns back over many
    events: in one trace or several; a trace it does not suit (a timeline) does not count."""
    monkeypatch.setattr(compiled_bfc, "_available", None)
    monkeypatch.setattr(compiled_bfc, "_events_before_loading", 0)
    monkeypatch.setattr(compiled_bfc, "COMPILED_FROM_EVENTS", 100)
    monkeypatch.setattr(compiled_bfc, "LOADED_FROM_EVENTS", 1000)
    trace = random_walk(1, 600, ONE_LANE)
    setups, spec = setups_for(Policy.of("prealloc"), GiB), MachineSpec(GiB, "sim")
    machine = Machine(spec, setups)
    assert not compiled_bfc.suits(state_module.Replay(machine, trace, True, True))  # a timeline: the event loop
    assert not compiled_bfc.suits(state_module.Replay(machine, trace, False, True))  # some 600 events of the 1,000
    assert compiled_bfc._available is None
    assert compiled_bfc.suits(state_module.Replay(machine, trace, False, True))  # some 1,200: loaded
    assert compiled_bfc._available is True


@compiled
@pytest.mark.parametrize("mode", ["prealloc", "growth"])
def test_maps_promised_at_many_peaks_of_a_compiled_replay_are_made_from_copies_as_they_were(
    every_trace_compiled: None, mode: str
) -> None:
    """Thousands of peaks, each a map owed: most promised without leaving the compiled loop, some
    from copies of the pool made when one is due."""
    handed_back = handed_back_runs(random_walk(7, 6000, ONE_LANE), Policy.of(mode))
    assert handed_back and max(handed_back) <= 2  # the event loop ran single events (or a temporary's pair)


def handed_back_runs(trace: Trace, policy: Policy) -> list[int]:
    """The same replay as the first loop's, and the runs of events the compiled loop handed back."""
    handed_back: list[int] = []

    def counting(replay: Any, first: int = 0, stop: int | None = None) -> int:
        handed_back.append((len(replay.trace) if stop is None else stop) - first)
        return replay_lanes(replay, first, stop)

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(compiled_bfc, "replay_lanes", counting)
        assert_same_replay(trace, policy, 16 * GiB)
    return handed_back


@compiled
@pytest.mark.parametrize("seed", [2, 3, 4, 6, 7])
def test_a_compacting_pool_moving_its_buffers_replays_compiled_as_the_first_loop_replayed_it(
    every_trace_compiled: None, seed: int
) -> None:
    assert_same_replay(fragmenting_walk(seed, 1500, ONE_LANE), Policy.of("compact"), 96 * MiB)


@compiled
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=operations,
    lanes=st.lists(st.sampled_from(LANES), min_size=2, max_size=4, unique=True),
    policy=st.sampled_from([REGIMES[0], REGIMES[1], REGIMES[2], REGIMES[4]]),
    capacity=st.sampled_from([96 * MiB, GiB, 16 * GiB]),
)
def test_a_trace_of_several_lanes_replayed_compiled_gives_what_the_first_loop_gave(
    every_trace_compiled: None,
    ops: list[tuple[int, int, int, int]],
    lanes: list[tuple[str, int, str]],
    policy: Policy,
    capacity: int,
) -> None:
    """Several lanes on BFC pools, compiled: lanes that start mid-trace, devices shared by two
    pools, temporaries freed on another lane, failures, all as the first loop replayed them."""
    assert_same_replay(build(ops, lanes), policy, capacity)


@compiled
@pytest.mark.parametrize("mode", ["prealloc", "growth"])
def test_maps_promised_at_many_peaks_of_several_lanes_compiled_are_made_as_they_were(
    every_trace_compiled: None, mode: str
) -> None:
    handed_back = handed_back_runs(random_walk(7, 6000, THREE_LANES), Policy.of(mode))
    assert handed_back and max(handed_back) <= 2


@compiled
@pytest.mark.parametrize("seed", [0, 2, 6, 16, 20])
def test_compacting_pools_of_several_lanes_replay_compiled_as_the_first_loop_replayed_them(
    every_trace_compiled: None, seed: int
) -> None:
    assert_same_replay(fragmenting_walk(seed, 1500, THREE_LANES), Policy.of("compact"), 48 * MiB)


@compiled
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=operations,
    policy=st.sampled_from([REGIMES[0], REGIMES[2], REGIMES[4]]),
    capacity=st.sampled_from([96 * MiB, GiB]),
)
def test_bins_of_free_chunks_made_wider_as_they_fill_change_nothing(
    every_trace_compiled: None,
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple[int, int, int, int]],
    policy: Policy,
    capacity: int,
) -> None:
    """The compiled loop keeps each bin's free chunks in a row of fixed width and makes the rows
    wider when one nearly fills: from two places a bin, that happens at nearly every event."""
    monkeypatch.setattr(compiled_bfc, "MIN_BIN_WIDTH", 2)
    assert_same_replay(build(ops, [("", 0, "jax")]), policy, capacity)


@compiled
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, policy=st.sampled_from([REGIMES[1], REGIMES[2]]), capacity=st.sampled_from([96 * MiB, GiB]))
def test_a_compiled_replay_that_hands_python_many_events_finishes_in_python_alike(
    every_trace_compiled: None,
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple[int, int, int, int]],
    policy: Policy,
    capacity: int,
) -> None:
    """Past a number of events handed back (failed allocations, say), the rest of the trace runs in
    the event loop: here after the second."""
    monkeypatch.setattr(compiled_bfc, "PYTHON_RUNS_BEFORE_GIVING_UP", 2)
    assert_same_replay(build(ops, [("", 0, "tensorflow")]), policy, capacity)
    assert_same_replay(build(ops, [("", 0, "jax"), ("gpu:1", 0, "jax")]), policy, capacity)


many_small_operations = st.lists(
    st.tuples(st.integers(0, 2), st.just(0), st.sampled_from(SIZES[:7]), st.integers(0, 10**6)),
    min_size=200,
    max_size=500,
)


@compiled
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=many_small_operations, policy=st.sampled_from([REGIMES[0], REGIMES[2], REGIMES[4]]))
def test_many_small_buffers_freed_in_any_order_replay_compiled_as_the_first_loop_replayed_them(
    every_trace_compiled: None, ops: list[tuple[int, int, int, int]], policy: Policy
) -> None:
    """Hundreds of small buffers freed in random order: many free chunks in several bins, best fit
    often found in a bin above the request's."""
    assert_same_replay(build(ops, [("", 0, "jax")]), policy, GiB)


# -- allocators started before the trace (a shared fixture's: plugin/shared_fixtures.py) -----------


def held_figures(run: MachineRun) -> list[tuple[object, ...]]:
    """What each device and allocator held, and took when it started: what a `start` decides."""
    return [
        (
            device.device,
            device.peak_bytes_reserved,
            [(a.source, a.process, a.limit, a.asked, a.took, a.peak_bytes_reserved) for a in device.allocators],
        )
        for device in run.devices
    ]


def assert_start_is_a_first_allocation_made_before(
    ops: list[tuple[int, int, int, int]], lanes: list[tuple[str, int, str]], kept: list[int], policy: Policy
) -> None:
    """`start` events, the lanes in turn, each holding one of `kept`'s sizes, leave the machine as
    allocations of those bytes made before the trace, each its own and never freed (of 1 byte,
    freed, where the size is 0), leave it: what each allocator and device holds and took, the order
    they started, whether and how the trace runs out of memory (at a start, where such an
    allocation does not fit: the fixture's setup fails there); and none of it in the trace's live data."""
    body = build(ops, lanes)
    starts, made = Trace(), Trace()
    made_at = []  # the event of `made` each start stands for
    lanes_started = set()
    for pointer, size in enumerate(kept, start=1):
        device, process, source = lane = lanes[(pointer - 1) % len(lanes)]
        if not size and lane in lanes_started:
            continue  # an allocator starts once: the plugin gives no second start of nothing (shared_fixtures.py)
        lanes_started.add(lane)
        starts.add(3, 2**64 - pointer, size, source=source, device=device, process=process)
        made_at.append(len(made))
        made.add(0, 10**9 + pointer, max(size, 1), source=source, device=device, process=process)
        if not size:
            made.add(1, 10**9 + pointer, 1, source=source, device=device, process=process)
    setups, spec = setups_for(policy, GiB), MachineSpec(GiB, "sim")
    with_start = outcome(Machine(spec, setups), body.after(starts), False, False)
    with_first = outcome(Machine(spec, setups), body.after(made), False, False)
    assert isinstance(with_start, MachineRun) and isinstance(with_first, MachineRun)
    if with_first.oom is not None and with_first.oom.event < len(made):  # a buffer the device cannot hold
        assert with_start.oom is not None and made_at[with_start.oom.event] == with_first.oom.event
        assert (with_start.oom.kind, with_start.oom.source) == (with_first.oom.kind, with_first.oom.source)
        return
    assert held_figures(with_start) == held_figures(with_first)
    assert with_start.order == with_first.order
    assert (with_start.oom is None) == (with_first.oom is None)
    if with_start.oom is not None and with_first.oom is not None:
        assert (with_start.oom.kind, with_start.oom.source, with_start.oom.event + len(made) - len(starts)) == (
            with_first.oom.kind,
            with_first.oom.source,
            with_first.oom.event,
        )
    without = Machine(spec, setups).run(body, stop_on_oom=False)
    if with_start.oom is None and without.oom is None:  # nothing in use that the trace did not allocate
        alone = {d.device: d.peak_bytes_requested for d in without.devices}
        assert {d.device: d.peak_bytes_requested for d in with_start.devices} == {
            d.device: alone.get(d.device, 0) for d in with_start.devices
        }


starts = given(  # every kind of operation but a free on another lane, which no allocator pairs
    ops=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 5), st.sampled_from(SIZES), st.integers(0, 10**6)), max_size=160
    ),
    lanes=st.lists(st.sampled_from(LANES), min_size=1, max_size=4, unique=True),
    kept=st.lists(st.sampled_from([0, 1, 4 * KiB, 3 * MiB, 200 * MiB]), min_size=1, max_size=5),
    policy=st.sampled_from(
        [
            Policy.of("prealloc"),
            Policy.of("fraction", 0.3),
            Policy.of("growth"),
            Policy.of("compact"),
            Policy.of("fraction", 0.97),
        ]
    ),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@starts
def test_an_allocator_started_before_the_trace_holds_what_it_held_then(
    ops: list[tuple[int, int, int, int]], lanes: list[tuple[str, int, str]], kept: list[int], policy: Policy
) -> None:
    assert_start_is_a_first_allocation_made_before(ops, lanes, kept, policy)


@compiled
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@starts
def test_an_allocator_started_before_the_trace_holds_the_same_in_the_compiled_loop(
    every_trace_compiled: None,
    ops: list[tuple[int, int, int, int]],
    lanes: list[tuple[str, int, str]],
    kept: list[int],
    policy: Policy,
) -> None:
    assert_start_is_a_first_allocation_made_before(ops, lanes, kept, policy)


HIDDEN_NUMBA = """
import json, random, sys
sys.modules["numba"] = None  # not installed: `import numba` raises ImportError (the base install)
from pytest_devmem.model.frameworks import setups_for
from pytest_devmem.model.machine import Machine, MachineSpec
from pytest_devmem.model.machine.loops import compiled_bfc
from pytest_devmem.model.pool import Policy
from pytest_devmem.model.trace import Trace

compiled_bfc.COMPILED_FROM_EVENTS = compiled_bfc.LOADED_FROM_EVENTS = 0
trace, rng, live = Trace(), random.Random(5), []
for pointer in range(1, 3001):
    live.append((pointer, rng.choice([256, 4096, 300 * 1024, 5 * 2**20])))
    trace.add(0, *live[-1], source="jax", label="x")
    if rng.random() < 0.6:
        trace.add(1, *live.pop(rng.randrange(len(live))), source="jax")
run = Machine(MachineSpec(2**30, "sim"), setups_for(Policy.of("prealloc"), 2**30)).run(trace)
print(json.dumps({"available": compiled_bfc.available(), "numba": "numba" in sys.modules and sys.modules["numba"] is not None,
                  "devices": [d.to_json() for d in run.devices]}))
"""


@compiled
def test_without_numba_the_python_loop_replays_what_the_compiled_loop_does(
    every_trace_compiled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """numba is the `fast-model` extra: where it cannot be imported the event loop (the reference form)
    runs every trace, with the figures the compiled loop gives where it can (which the `test` extra installs)."""
    import json
    import subprocess
    import sys

    hidden = subprocess.run([sys.executable, "-c", HIDDEN_NUMBA], capture_output=True, text=True, check=True)
    without = json.loads(hidden.stdout.strip().splitlines()[-1])
    assert without["available"] is False and without["numba"] is False
    ran, loop = [], replay_module.replay_compiled
    monkeypatch.setattr(replay_module, "replay_compiled", lambda replay: ran.append(1) or loop(replay))
    namespace: dict[str, Any] = {}
    script = HIDDEN_NUMBA.replace('sys.modules["numba"] = None', "pass").replace("print(json.dumps(", "result = ((")
    exec(compile(script, "with_numba", "exec"), namespace)
    assert namespace["result"]["available"] is True and ran  # here numba imports: the compiled loop ran
    assert namespace["result"]["devices"] == without["devices"]
