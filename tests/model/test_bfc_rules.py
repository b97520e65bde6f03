"""The BFC rules, pinned on small hand-made cases."""

from __future__ import annotations

import pytest

from pytest_devmem.errors import OutOfMemoryError
from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.pool import BFCPool, Policy, bin_for_size, rounded_bytes
from pytest_devmem.model.pool.bfc import BACKOFF_FACTOR
from pytest_devmem.model.pool.chunk_table import NUM_BINS
from pytest_devmem.units import GiB, KiB, MiB


def bfc(mode: str = "growth", fraction: float | None = None, capacity: int = GiB, **options: object) -> BFCPool:
    return BFCPool(SimulatedDevice(capacity), Policy.of(mode, fraction), **options)  # type: ignore[arg-type]


def chunk_layout(pool: BFCPool) -> list[tuple[int, int, bool]]:
    """(offset from the first region, size, in use) for every chunk."""
    base = pool.regions()[0][0]
    return [(address - base, size, in_use) for _, address, size, in_use, _ in pool.chunks()]


@pytest.mark.parametrize(
    ("request_bytes", "chunk"),
    [(1, 256), (255, 256), (256, 256), (257, 512), (1000, 1024), (3 * KiB + 1, 3 * KiB + 256)],
)
def test_requests_round_up_to_256_bytes(request_bytes: int, chunk: int) -> None:
    assert rounded_bytes(request_bytes) == chunk
    pool = bfc()
    pool.alloc(request_bytes)
    assert pool.stats()["bytes_in_use"] == chunk
    assert pool.stats()["internal_fragmentation_bytes"] == chunk - request_bytes


@pytest.mark.parametrize(
    ("size", "expected_bin"),
    [
        (256, 0),
        (512, 1),
        (768, 1),
        (1024, 2),
        (256 << 10, 10),
        ((256 << 20) - 256, 19),
        (256 << 20, 20),
        (64 * GiB, 20),
    ],
)
def test_bin_numbers(size: int, expected_bin: int) -> None:
    assert bin_for_size(size) == expected_bin
    assert 0 <= expected_bin < NUM_BINS


def test_best_fit_takes_smallest_chunk_then_lowest_address() -> None:
    pool = bfc()
    a = pool.alloc(1024)
    pool.alloc(256)
    b = pool.alloc(2048)
    pool.alloc(256)
    c = pool.alloc(1024)
    pool.alloc(256)
    for handle in (c, b, a):  # free in reverse so heap order cannot be the reason
        pool.free(handle)
    assert pool.alloc(1000) == a  # two 1 KiB chunks: the lower address wins
    assert pool.alloc(1024) == c
    assert pool.alloc(1500) == b  # 2 KiB is the smallest that fits, not the big tail
    assert pool.check_invariants() == []


def test_chunk_at_least_twice_the_request_is_split() -> None:
    pool = bfc()
    a = pool.alloc(2048)
    pool.alloc(256)
    pool.free(a)
    assert pool.alloc(1024) == a
    assert chunk_layout(pool)[:3] == [(0, 1024, True), (1024, 1024, False), (2048, 256, True)]


def test_chunk_under_twice_the_request_is_handed_out_whole() -> None:
    pool = bfc()
    a = pool.alloc(2048)
    pool.alloc(256)
    pool.free(a)
    assert pool.alloc(1280) == a
    assert chunk_layout(pool)[:2] == [(0, 2048, True), (2048, 256, True)]
    stats = pool.stats()
    assert stats["internal_fragmentation_bytes"] == 2048 - 1280
    assert stats["largest_alloc_size"] == 2048


def test_chunk_wasting_more_than_the_internal_fragmentation_bound_is_split() -> None:
    pool = bfc(max_internal_fragmentation=512)
    a = pool.alloc(2048)
    pool.alloc(256)
    pool.free(a)
    pool.alloc(1280)  # 768 bytes would be wasted: over the 512-byte bound
    assert chunk_layout(pool)[:3] == [(0, 1280, True), (1280, 768, False), (2048, 256, True)]


def test_freed_chunk_coalesces_with_next_then_previous() -> None:
    pool = bfc()
    x, y, z = pool.alloc(256), pool.alloc(256), pool.alloc(256)
    pool.alloc(256)  # guard: keeps z from merging with the region's free tail
    pool.free(x)
    pool.free(z)
    assert [c[1:] for c in chunk_layout(pool)[:3]] == [(256, False), (256, True), (256, False)]
    pool.free(y)
    assert chunk_layout(pool)[:2] == [(0, 768, False), (768, 256, True)]
    assert pool.check_invariants() == []


def test_freeing_everything_leaves_each_region_one_free_chunk() -> None:
    pool = bfc()
    handles = [pool.alloc(size) for size in (300, 5000, 256, 70_000, 1)]
    for handle in handles[::2] + handles[1::2]:
        pool.free(handle)
    assert [(size, in_use) for _, _, size, in_use, _ in pool.chunks()] == [(2 * MiB, False)]


def test_growth_regions_start_at_2mib_and_double_and_the_doubling_persists() -> None:
    """bfc_allocator.cc Extend: curr_region_allocation_bytes_ is doubled in place until a request
    fits, so a large request's doubling sticks for later regions; a region that needed no
    doubling doubles the next one."""
    pool = bfc()
    pool.alloc(3 * MiB // 2)  # region 0: 2 MiB
    pool.alloc(3 * MiB // 2)  # does not fit the 0.5 MiB left: region 1, 4 MiB
    pool.alloc(3 * MiB)  # 2.5 MiB left in region 1 is too small: region 2, 8 MiB
    pool.alloc(20 * MiB)  # bigger than the next 16 MiB: doubled to 32 MiB, and 32 MiB it stays
    pool.alloc(13 * MiB)  # 12 MiB left in region 3: region 4 of 32 MiB, the next will be 64 MiB
    pool.alloc(30 * MiB)  # 19 MiB left in region 4: region 5 of 64 MiB
    assert [size // MiB for _, size in pool.regions()] == [2, 4, 8, 32, 32, 64]
    assert pool.stats()["pool_bytes"] == 142 * MiB
    assert pool.check_invariants() == []


def test_growth_is_capped_at_three_quarters_of_the_device_by_default() -> None:
    """gpu_helpers.cc: allocator_memory = total_memory * memory_fraction, preallocating or not."""
    pool = bfc("growth", capacity=64 * MiB)
    assert pool.stats()["bytes_limit"] == 48 * MiB
    pool.alloc(40 * MiB)
    with pytest.raises(OutOfMemoryError):
        pool.alloc(10 * MiB)


def test_growth_region_is_capped_by_what_the_limit_leaves() -> None:
    pool = bfc("growth", fraction=0.5, capacity=16 * MiB)  # limit 8 MiB
    pool.alloc(3 * MiB // 2)  # 2 MiB
    pool.alloc(3 * MiB)  # 4 MiB
    pool.alloc(MiB + 512 * KiB)  # next would be 8 MiB; only 2 MiB is left under the limit
    assert [size // MiB for _, size in pool.regions()] == [2, 4, 2]


def test_growth_backs_off_by_0_9_when_the_device_refuses() -> None:
    device = SimulatedDevice(16 * MiB)
    device.try_allocate(12 * MiB)  # another tenant
    pool = BFCPool(device, Policy.of("growth"))
    pool.alloc(MiB)  # 2 MiB region; the device has 2 MiB left
    pool.alloc(3 * MiB // 2)  # wants 4 MiB; the device refuses until the size backs off below 2 MiB
    expected = 4 * MiB
    while expected > 2 * MiB:
        expected = rounded_bytes(int(expected * BACKOFF_FACTOR))
    assert [size for _, size in pool.regions()] == [2 * MiB, expected]
    assert device.free_bytes() == 2 * MiB - expected


def test_backoff_of_a_tiny_region_steps_down_by_256_bytes_until_the_device_gives() -> None:
    """bfc_allocator.cc Extend: below 10 x 256 bytes, x0.9 rounds back up, so XLA forces a 256-byte step."""
    device = SimulatedDevice(4 * KiB)
    device.try_allocate(3 * KiB + 512)  # another tenant leaves 512 bytes
    pool = BFCPool(device, Policy.of("growth"))  # limit 3 KiB: the first region asks 3 KiB
    pool.alloc(300)
    assert [size for _, size in pool.regions()] == [512]
    assert device.free_bytes() == 0


def test_backoff_ends_when_the_device_is_full() -> None:
    device = SimulatedDevice(MiB)
    device.try_allocate(MiB)  # nothing left, not even 256 bytes
    pool = BFCPool(device, Policy.of("prealloc"))
    assert pool.preallocate() == 0
    with pytest.raises(OutOfMemoryError, match="other users of this device hold 1.00 MiB"):
        pool.alloc(256)


def test_prealloc_reserves_three_quarters_on_first_use_and_never_returns_it() -> None:
    device = SimulatedDevice(GiB)
    pool = BFCPool(device, Policy.of("prealloc"))
    assert pool.stats()["pool_bytes"] == 0
    handle = pool.alloc(KiB)
    assert pool.regions()[0][1] == 3 * GiB // 4
    assert device.used == 3 * GiB // 4
    pool.free(handle)
    assert pool.stats()["pool_bytes"] == 3 * GiB // 4  # freeing keeps the region; only trim() returns it
    assert pool.trim() == 3 * GiB // 4
    assert device.used == 0
    assert BFCPool(SimulatedDevice(GiB), Policy.of("prealloc")).preallocate() == 3 * GiB // 4


@pytest.mark.parametrize(
    ("mode", "fraction", "fits", "fails"),
    [
        ("prealloc", None, [700 * MiB], 100 * MiB),  # 768 MiB limit
        ("fraction", 0.5, [500 * MiB], 30 * MiB),  # 512 MiB limit
        ("growth", None, [700 * MiB], 100 * MiB),  # capped at 768 MiB too, as XLA caps growth
    ],
)
def test_out_of_memory_at_the_right_moment(mode: str, fraction: float | None, fits: list[int], fails: int) -> None:
    pool = bfc(mode, fraction)
    for size in fits:
        pool.alloc(size)
    before = pool.stats()
    with pytest.raises(OutOfMemoryError) as info:
        pool.alloc(fails)
    after = pool.stats()
    assert after["num_ooms"] == 1
    assert {k: v for k, v in after.items() if k != "num_ooms"} == {k: v for k, v in before.items() if k != "num_ooms"}
    assert info.value.figures.requested == fails
    assert pool.check_invariants() == []


def test_fragmentation_is_free_minus_largest_block_over_free() -> None:
    pool = bfc("prealloc", fraction=1.0, capacity=4 * KiB)
    handles = [pool.alloc(256) for _ in range(16)]
    for handle in handles[1:6:2]:
        pool.free(handle)
    stats = pool.stats()
    assert stats["largest_free_block_bytes"] == 256
    assert stats["fragmentation"] == pytest.approx((768 - 256) / 768)
    with pytest.raises(OutOfMemoryError, match="fragmentation"):
        pool.alloc(512)  # 768 bytes free, no two of them together


def test_fragmentation_is_zero_with_one_free_block_or_none() -> None:
    pool = bfc()
    assert pool.stats()["fragmentation"] == 0.0
    pool.alloc(KiB)
    assert pool.stats()["fragmentation"] == 0.0


def test_release_free_regions_before_failing() -> None:
    def scenario(release: bool) -> BFCPool:
        pool = bfc("growth", capacity=8 * MiB, release_free_regions=release)
        a = pool.alloc(3 * MiB // 2)
        b = pool.alloc(3 * MiB)
        pool.free(a)
        pool.free(b)
        pool.alloc(5 * MiB)
        return pool

    with pytest.raises(OutOfMemoryError):
        scenario(release=False)
    pool = scenario(release=True)
    assert [size // MiB for _, size in pool.regions()] == [6]  # the whole 6 MiB limit, as one region
    assert pool.check_invariants() == []


def test_free_regions_are_released_only_when_that_can_make_room() -> None:
    """bfc_allocator.cc DeallocateFreeRegions: nothing is released unless the free regions plus
    what the limit leaves could hold the request."""
    pool = bfc("growth", capacity=8 * MiB, release_free_regions=True)  # limit 6 MiB
    spare = pool.alloc(MiB)  # region 0: 2 MiB
    pool.alloc(3 * MiB)  # region 1: 4 MiB
    pool.free(spare)  # region 0 is free again; 2 MiB free, 0 left under the limit
    with pytest.raises(OutOfMemoryError):
        pool.alloc(3 * MiB)  # even with region 0 released, 2 MiB could not hold it
    assert [size // MiB for _, size in pool.regions()] == [2, 4]


def test_reset_peak_stats_keeps_current_usage() -> None:
    pool = bfc()
    keep = pool.alloc(10 * KiB)
    pool.free(pool.alloc(MiB))
    pool.reset_peak_stats()
    stats = pool.stats()
    assert stats["bytes_in_use"] == stats["peak_bytes_in_use"] == 10 * KiB
    assert stats["num_allocs"] == 0 and stats["largest_alloc_size"] == 0
    assert stats["pool_bytes"] == stats["peak_pool_bytes"] == 2 * MiB
    pool.free(keep)
    assert pool.stats()["bytes_in_use"] == 0


def test_stats_use_xla_names_and_track_peaks() -> None:
    pool = bfc()
    a = pool.alloc(MiB)
    b = pool.alloc(512 * KiB)
    pool.free(a)
    stats = pool.stats()
    for key in (
        "num_allocs",
        "bytes_in_use",
        "peak_bytes_in_use",
        "largest_alloc_size",
        "bytes_limit",
        "bytes_reserved",
        "peak_bytes_reserved",
        "largest_free_block_bytes",
        "pool_bytes",
        "peak_pool_bytes",
        "fragmentation",
    ):
        assert key in stats
    assert stats["num_allocs"] == 2
    assert stats["bytes_in_use"] == 512 * KiB
    assert stats["peak_bytes_in_use"] == MiB + 512 * KiB
    assert stats["bytes_limit"] == 3 * GiB // 4
    assert stats["pool_bytes"] == 2 * MiB
    assert stats["bytes_reserved"] == stats["peak_bytes_reserved"] == 0  # XLA's BFC allocator never sets it
    assert stats["largest_free_block_bytes"] == MiB  # b sits between the freed MiB and the 512 KiB tail
    pool.free(b)
    assert pool.stats()["largest_free_block_bytes"] == 2 * MiB


def test_memory_map_shows_bins_and_chunks() -> None:
    pool = bfc()
    pool.alloc(1000)
    text = pool.memory_map()
    assert "bins (free chunks):" in text
    assert "in use (asked 1000 B)" in text
    assert "region 0 at 0x" in text


def test_dump_on_oom_attaches_the_memory_map() -> None:
    pool = bfc("fraction", 0.01, dump_on_oom=True)
    with pytest.raises(OutOfMemoryError) as info:
        pool.alloc(100 * MiB)
    assert info.value.memory_map is not None
    assert "memory map of fraction=0.01 pool" in str(info.value)


def test_close_returns_every_region_to_the_device() -> None:
    device = SimulatedDevice(GiB)
    pool = BFCPool(device, Policy.of("growth"))
    pool.alloc(3 * MiB)
    pool.close()
    assert device.used == 0
    assert pool.stats()["pool_bytes"] == 0
    pool.alloc(KiB)  # reusable
    assert pool.check_invariants() == []
