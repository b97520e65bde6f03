"""A TPU chip has one HBM allocator, the TPU runtime's: every JAX buffer and every buffer the
`devmem` pool stands for comes out of it (JAX does not preallocate on a TPU, and the runtime
defragments HBM when an allocation does not fit: jax-ml/jax #9064; its out-of-memory message names
the chip's memory, "Could not allocate X bytes in memory ...HBM0; Y allocatable, Z available":
jax-ml/jax #14304). The model gives each chip and process one such allocator under the TPU
runtime's regime, shared by the trace's sources, and keeps each source's own figures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_devmem.hardware.devices import open_device
from pytest_devmem.model.frameworks import setups_for
from pytest_devmem.model.machine import MachineRun, MachineSpec, run_machine
from pytest_devmem.model.pool import Policy
from pytest_devmem.model.regime import TPU_RUNTIME
from pytest_devmem.model.trace import ALLOCATE_CODE, FREE_CODE, Trace
from pytest_devmem.units import GiB, MiB

V5E = open_device("sim:TPU-v5e").capacity  # 15.75G: the v5e compiler's "available HBM"


def on_v5e(events: list[tuple[int, int, int, str]], **spec: Any) -> MachineRun:
    """`events` (action, pointer, bytes, source) on chip tpu:0, replayed under the TPU runtime's regime."""
    trace = Trace()
    for action, pointer, size, source in events:
        trace.add(action, pointer, size, source=source, label=f"{source} {pointer}", device="tpu:0")
    setups = setups_for(Policy(TPU_RUNTIME.mode, TPU_RUNTIME.fraction), V5E)
    return run_machine(trace, setups, MachineSpec(V5E, "sim:TPU-v5e", 9, default_device="tpu:0", **spec))


@pytest.mark.parametrize("jax_bytes", [MiB, 4 * GiB, V5E - MiB])
def test_the_pool_and_jax_share_the_chips_one_runtime_allocator_no_false_oom(jax_bytes: int) -> None:
    run = on_v5e([(ALLOCATE_CODE, 1, MiB, "pool"), (ALLOCATE_CODE, 2, jax_bytes, "jax")])
    assert run.oom is None
    (chip,) = run.devices
    (runtime,) = chip.allocators  # one allocator on the chip, for both sources
    assert runtime.source == "TPU runtime" and "used by the devmem pool, JAX" in runtime.setup
    assert runtime.took == runtime.limit == V5E  # all usable HBM: no CUDA context, no GPU-style backoff
    assert chip.context_bytes == 0 and chip.peak_bytes_in_use == MiB + jax_bytes
    assert runtime.peak_bytes_in_use == MiB + jax_bytes
    assert {source: figures.peak_live_bytes for source, figures in run.by_source.items()} == {
        "pool": MiB,
        "jax": jax_bytes,
    }
    assert run.order == ["pool", "jax"]


def test_the_chips_map_is_one_pool_whose_buffers_name_their_sources() -> None:
    run = on_v5e(
        [(ALLOCATE_CODE, 1, 3 * MiB, "pool"), (ALLOCATE_CODE, 2, 5 * MiB, "jax"), (FREE_CODE, 1, 3 * MiB, "pool")]
    )
    (pool_map,) = run.snapshots["tpu:0"].pools
    assert pool_map.source == "TPU runtime" and pool_map.regions == (V5E,)
    assert run.devices[0].at_peak == {"jax 2": 5 * MiB, "pool": 3 * MiB}


def test_live_data_of_all_sources_beyond_usable_hbm_is_a_capacity_oom_not_a_tenant() -> None:
    half = 8 * GiB  # 16 GiB in all, over the v5e's 15.75G
    run = on_v5e([(ALLOCATE_CODE, 1, half, "pool"), (ALLOCATE_CODE, 2, half, "jax")])
    assert run.oom is not None
    assert run.oom.kind == "capacity" and run.oom.source == "jax"
    assert run.oom.held_by_others == {}  # the pool's buffers are the same runtime's, not another tenant's
    assert run.oom.device_in_use == half and run.oom.capacity == V5E


def test_just_fitting_usable_hbm_between_sources_is_no_oom() -> None:
    run = on_v5e([(ALLOCATE_CODE, 1, 8 * GiB, "pool"), (ALLOCATE_CODE, 2, V5E - 8 * GiB, "jax")])
    assert run.oom is None and run.devices[0].peak_bytes_in_use == V5E


def test_the_runtime_moves_every_sources_buffers_and_counts_them_once() -> None:
    # jax 4 GiB at 0, pool 4 GiB at 4, jax 4 GiB at 8, pool 3 GiB at 12 (0.75 GiB left at the end);
    # freeing the first and the last leaves 4 + 3.75 GiB in two holes; 6 GiB fits only once the
    # runtime moves the pool's buffer at 4 GiB and JAX's at 8 GiB to the front: 8 GiB moved
    events = [
        (ALLOCATE_CODE, 1, 4 * GiB, "jax"),
        (ALLOCATE_CODE, 1, 4 * GiB, "pool"),
        (ALLOCATE_CODE, 2, 4 * GiB, "jax"),
        (ALLOCATE_CODE, 2, 3 * GiB, "pool"),
        (FREE_CODE, 1, 4 * GiB, "jax"),
        (FREE_CODE, 2, 3 * GiB, "pool"),
        (ALLOCATE_CODE, 3, 6 * GiB, "jax"),
    ]
    run = on_v5e(events)
    assert run.oom is None
    (runtime,) = run.devices[0].allocators
    assert (runtime.moved_bytes, runtime.compactions) == (8 * GiB, 1)
    assert run.devices[0].peak_bytes_in_use == 15 * GiB


def test_a_gpu_presets_compact_what_if_keeps_a_pool_per_framework() -> None:
    trace = Trace()
    trace.add(ALLOCATE_CODE, 1, MiB, source="pool", device="cpu:0")
    trace.add(ALLOCATE_CODE, 2, MiB, source="jax", device="cpu:0")
    spec = MachineSpec(V5E, "sim:16GiB", 9, context_bytes=0)
    run = run_machine(trace, setups_for(Policy(TPU_RUNTIME.mode, TPU_RUNTIME.fraction), V5E), spec)
    assert [a.source for a in run.devices[0].allocators] == ["pool", "jax"]
    assert run.oom is not None and run.oom.kind == "tenant"  # the first pool preallocated the whole device


def test_tensorflows_events_stay_on_their_cpu_device_under_a_tpu_preset() -> None:
    from pytest_devmem.model.tpu_devices import as_tpu_chips

    trace = Trace()
    trace.add(ALLOCATE_CODE, 1, MiB, source="jax", device="cpu:0")
    trace.add(ALLOCATE_CODE, 1, MiB, source="tensorflow", device="cpu:0")
    trace.add(ALLOCATE_CODE, 2, MiB, source="pool")
    as_tpu_chips(trace)
    assert [(e.source, e.device) for e in trace.events] == [
        ("jax", "tpu:0"),
        ("tensorflow", "cpu:0"),
        ("pool", "tpu:0"),
    ]


def test_the_devmem_pool_and_jax_arrays_share_a_v5e_chip_in_a_pytest_run(
    jax_loaded: Any, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        """
        import jax.numpy as jnp

        def test_both(devmem):
            staging = devmem.pool.alloc(2 * 2**30)  # 2 GiB the test's pool stands for
            x = jnp.ones((1024, 1024), jnp.float32)  # 4 MiB of JAX's
            assert float(x.sum()) == 1024 * 1024
            devmem.pool.free(staging)

        def test_over(devmem):
            devmem.pool.alloc(16911433728 - 2 * 2**20)  # all of the v5e's 15.75G but 2 MiB
            x = jnp.ones((1024, 1024), jnp.float32)  # 4 MiB more than the chip has
            assert float(x.sum()) > 0
        """
    )
    result = pytester.runpytest_inprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "--devmem-report=r.json"
    )
    result.assert_outcomes(passed=1, failed=1)
    records = {r["test_id"].split("::")[1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    both = records["test_both"]
    assert both["oom"] is None and both["regime"] == "compact(fraction=1)"
    (chip,) = both["devices"]
    assert chip["device"] == "tpu:0"
    assert [a["allocator"] for a in chip["allocators"]] == ["TPU runtime"]
    by_source = both["trace"]["by_source"]
    assert by_source["pool"]["peak_live_bytes"] == 2 * GiB
    assert 4 * MiB <= by_source["jax"]["peak_live_bytes"] < 2 * GiB
    assert 2 * GiB + 4 * MiB <= chip["peak_bytes_in_use"] < 3 * GiB
    assert both["tpu"]["compaction_moved_bytes"] == 0
    over = records["test_over"]["oom"]
    assert over["kind"] == "capacity" and over["allocator"] == "jax" and over["held_by_others"] == {}
    result.stdout.fnmatch_lines(
        [
            "*JAX could not allocate 4.00 MiB*on tpu:0 -- capacity: the live data does not fit the device",
            "  the TPU runtime (all of the chip's sources): 15.75 GiB in chunks*",
        ]
    )


def test_a_chunk_handed_out_whole_is_given_back_by_the_runtimes_move_not_a_limit_oom() -> None:
    # the pool's request leaves 2 MiB, too little to split off (XLA's BFC hands the chunk out whole);
    # moving the buffer to its rounded size gives the 2 MiB back
    fits = on_v5e([(ALLOCATE_CODE, 1, V5E - 2 * MiB, "pool"), (ALLOCATE_CODE, 2, MiB, "jax")])
    assert fits.oom is None
    over = on_v5e([(ALLOCATE_CODE, 1, V5E - 2 * MiB, "pool"), (ALLOCATE_CODE, 2, 4 * MiB, "jax")])
    assert over.oom is not None and over.oom.kind == "capacity"


def interleaved(seed: int, events: int = 3000) -> list[tuple[int, int, int, str]]:
    """Random allocations and frees of the pool and JAX on one chip, enough to fill and fragment it."""
    import random

    rng = random.Random(seed)
    live: list[tuple[int, int, str]] = []
    out: list[tuple[int, int, int, str]] = []
    for pointer in range(1, events):
        if live and (rng.random() < 0.45 or sum(size for _, size, _ in live) > V5E * 0.8):
            gone, size, source = live.pop(rng.randrange(len(live)))
            out.append((FREE_CODE, gone, size, source))
        source = rng.choice(("pool", "jax"))
        size = rng.choice((rng.randrange(1, 64 * MiB), rng.randrange(64 * MiB, 2 * GiB)))
        live.append((pointer, size, source))
        out.append((ALLOCATE_CODE, pointer, size, source))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_shared_runtime_replays_as_one_allocator_with_every_buffer_would(seed: int) -> None:
    """Two sources on the chip's runtime give the chip the figures and maps of one source holding
    all of their buffers (which the single-lane loop replays)."""
    events = interleaved(seed)
    shared = on_v5e(events)
    alone = on_v5e([(action, pointer, size, "jax") for action, pointer, size, _ in events])
    (chip,), (reference,) = shared.devices, alone.devices
    assert (shared.oom is None) == (alone.oom is None)
    for name in ("peak_bytes_in_use", "peak_bytes_requested", "peak_event", "fragmentation", "worst_fragmentation"):
        assert getattr(chip, name) == getattr(reference, name), name
    assert [(a.moved_bytes, a.compactions) for a in chip.allocators] == [
        (a.moved_bytes, a.compactions) for a in reference.allocators
    ]
    assert chip.allocators[0].moved_bytes > 0  # the walk made the runtime move buffers
    for maps, other in ((shared.snapshots, alone.snapshots), (shared.fragmented, alone.fragmented)):
        assert {d: [(m.regions, m.chunks) for m in s.pools] for d, s in maps.items()} == {
            d: [(m.regions, m.chunks) for m in s.pools] for d, s in other.items()
        }
    assert sum(f.allocations for f in shared.by_source.values()) == alone.by_source["jax"].allocations


def test_ondemand_on_a_chip_models_no_fragmentation_at_all_where_compact_moves_buffers() -> None:
    """docs/tpu.md: `ondemand` on a TPU keeps no holes to fail in: an allocation fits whenever the
    live bytes with it fit the chip. Holes of 5 GiB between live buffers, then 10 GiB asked: the
    TPU runtime's regime moves buffers to fit it; on demand it fits as it is, nothing moved."""
    events = [
        (ALLOCATE_CODE, 1, 5 * GiB, "jax"),
        (ALLOCATE_CODE, 2, 2 * GiB, "jax"),
        (ALLOCATE_CODE, 3, 5 * GiB, "jax"),
        (FREE_CODE, 1, 5 * GiB, "jax"),
        (FREE_CODE, 3, 5 * GiB, "jax"),
        (ALLOCATE_CODE, 4, 3 * GiB, "jax"),
        (ALLOCATE_CODE, 5, 10 * GiB, "jax"),
    ]
    trace = Trace()
    for action, pointer, size, source in events:
        trace.add(action, pointer, size, source=source, label=f"{source} {pointer}", device="tpu:0")
    spec = MachineSpec(V5E, "sim:TPU-v5e", 9, default_device="tpu:0")
    compact = on_v5e(events)
    ondemand = run_machine(trace, setups_for(Policy.of("ondemand"), V5E), spec)
    assert compact.oom is None and ondemand.oom is None
    assert sum(a.moved_bytes for a in compact.devices[0].allocators) > 0
    (allocator,) = ondemand.devices[0].allocators
    assert allocator.moved_bytes == 0 and ondemand.devices[0].fragmentation == 0.0
    assert ondemand.devices[0].peak_bytes_in_use == 15 * GiB
