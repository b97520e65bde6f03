"""Random alloc/free sequences keep the pool's invariants under every policy."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_devmem.errors import OutOfMemoryError
from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.pool import BFCPool, OnDemandPool, Policy, TracingPool, make_pool, replay
from pytest_devmem.units import KiB, MiB

sizes = st.one_of(st.integers(1, 4 * KiB), st.integers(1, 512 * KiB), st.integers(1, 6 * MiB))
operations = st.lists(st.tuples(st.booleans(), sizes, st.integers(0, 10**6)), max_size=120)
policies = st.sampled_from(
    [
        Policy.of("prealloc"),
        Policy.of("fraction", 0.3),
        Policy.of("growth"),
        Policy.of("growth", 0.6),
        Policy.of("ondemand"),
    ]
)


def run(pool: BFCPool | OnDemandPool | TracingPool, ops: list[tuple[bool, int, int]]) -> dict[int, int]:
    live: dict[int, int] = {}
    for is_alloc, size, pick in ops:
        if is_alloc or not live:
            try:
                handle = pool.alloc(size)
            except OutOfMemoryError:
                continue
            assert handle not in live
            live[handle] = size
        else:
            handle = sorted(live)[pick % len(live)]
            pool.free(handle)
            del live[handle]
    return live


@settings(max_examples=150, deadline=None)
@given(policy=policies, ops=operations, release=st.booleans())
def test_random_sequences_keep_invariants(policy: Policy, ops: list[tuple[bool, int, int]], release: bool) -> None:
    device = SimulatedDevice(32 * MiB)
    pool = make_pool(device, policy, release_free_regions=release)
    live = run(pool, ops)
    stats = pool.stats()
    # stats equal a recount of what the caller holds
    assert stats["requested_bytes_in_use"] == sum(live.values())
    assert stats["bytes_in_use"] >= stats["requested_bytes_in_use"]
    assert stats["peak_bytes_in_use"] >= stats["bytes_in_use"]
    assert stats["peak_pool_bytes"] >= stats["pool_bytes"] <= stats["bytes_limit"]
    assert 0.0 <= stats["fragmentation"] < 1.0
    # buffers are aligned and never overlap
    spans = sorted((handle, handle + size) for handle, size in live.items())
    assert all(start % 256 == 0 for start, _ in spans)
    assert all(end <= following for (_, end), (following, _) in zip(spans, spans[1:]))
    if isinstance(pool, BFCPool):
        assert pool.check_invariants() == []
        assert device.used == stats["pool_bytes"]
        assert stats["largest_free_block_bytes"] <= stats["pool_bytes"] - stats["bytes_in_use"]
    else:
        assert device.used == stats["bytes_in_use"]
    for handle in list(live):
        pool.free(handle)
    assert pool.stats()["bytes_in_use"] == 0
    if isinstance(pool, BFCPool):  # everything merged back: one free chunk per region
        assert all(not in_use for *_, in_use, _ in pool.chunks())
        assert len(pool.chunks()) == len(pool.regions())


@settings(max_examples=60, deadline=None)
@given(policy=policies, ops=operations)
def test_replaying_a_recorded_trace_gives_the_same_statistics(policy: Policy, ops: list[tuple[bool, int, int]]) -> None:
    recorder = TracingPool(make_pool(SimulatedDevice(32 * MiB), policy))
    run(recorder, ops)
    result = replay(recorder.trace, make_pool(SimulatedDevice(32 * MiB), policy))
    expected = recorder.stats()
    assert result.ok
    assert {k: v for k, v in result.stats.items() if k != "num_ooms"} == {
        k: v for k, v in expected.items() if k != "num_ooms"
    }
