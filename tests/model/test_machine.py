"""The model of the machine: per device, each process's CUDA context and one allocator per
framework, created in the order they really start and sized by their frameworks' rules
(xla/pjrt/gpu/gpu_helpers.cc, tensorflow/core/common_runtime/gpu/gpu_device.cc,
xla/tsl/framework/bfc_allocator.cc), replayed once for every figure; and the fixes it proves."""

from __future__ import annotations

import random

import pytest

from pytest_devmem.model.explain import oom_lines
from pytest_devmem.model.frameworks import (
    AllocatorSetup,
    context_bytes_for,
    setups_for,
    tensorflow_memory_limit,
    tensorflow_setup,
    tensorflow_system_reserve,
)
from pytest_devmem.model.machine import MachineSpec, run_machine
from pytest_devmem.model.pool import Policy
from pytest_devmem.model.regime import Regime
from pytest_devmem.model.trace import Trace, TraceEvent
from pytest_devmem.model.whatif import find_min_fraction, process_shares, proven_fixes, what_if
from pytest_devmem.plugin.workers import plan_workers, worker_index
from pytest_devmem.units import GiB, KiB, MiB

PREALLOC = Policy.of("prealloc")


def events(*items: tuple[str, int, int, str, str], start: float = 0.0) -> Trace:
    """(action, buffer, bytes, source, device) tuples, one time step apart."""
    return Trace(
        [
            TraceEvent(
                action, pointer, size, start + i, source=source, device=device, label=f"{source} buffer {pointer}"
            )
            for i, (action, pointer, size, source, device) in enumerate(items)
        ]
    )


def machine(capacity: int, name: str = "sim", **spec: object) -> MachineSpec:
    return MachineSpec(capacity, name, **spec)  # type: ignore[arg-type]


def run(trace: Trace, capacity: int, policy: Policy = PREALLOC, environ: dict[str, str] | None = None, **spec: object):  # type: ignore[no-untyped-def]
    return run_machine(trace, setups_for(policy, capacity, environ), machine(capacity, **spec))


# -- devices ------------------------------------------------------------------------------------


def test_each_device_has_its_own_pool_64_mib_on_two_devices_fit_128_mib_devices() -> None:
    trace = events(("allocate", 1, 64 * MiB, "jax", "cpu:1"), ("allocate", 2, 64 * MiB, "jax", "cpu:2"))
    result = run(trace, 128 * MiB)
    assert result.fits
    # the allocator counts the unsplit chunk (bfc_allocator.cc): the 96 MiB pool is under twice 64 MiB
    # and wastes under 128 MiB, so it is handed out whole; 64 MiB were requested
    assert [(d.device, d.peak_bytes_in_use, d.peak_bytes_requested, d.peak_bytes_reserved) for d in result.devices] == [
        ("cpu:1", 96 * MiB, 64 * MiB, 96 * MiB),
        ("cpu:2", 96 * MiB, 64 * MiB, 96 * MiB),
    ]
    headline = result.headline
    assert headline is not None and headline.device == "cpu:1" and headline.peak_bytes_in_use == 96 * MiB


def test_a_sharded_array_counts_its_shard_on_every_device() -> None:
    trace = events(*[("allocate", i + 1, 16 * MiB, "jax", f"cpu:{i}") for i in range(4)])
    result = run(trace, GiB)
    assert [d.peak_bytes_in_use for d in result.devices] == [16 * MiB] * 4
    assert [d.device for d in result.devices] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]


def test_devices_are_ordered_by_their_ordinal_not_their_name() -> None:
    trace = events(("allocate", 1, MiB, "jax", "cpu:10"), ("allocate", 2, MiB, "jax", "cpu:2"))
    assert [d.device for d in run(trace, GiB).devices] == ["cpu:2", "cpu:10"]


def test_jax_preallocates_on_every_device_it_uses_at_its_first_event() -> None:
    """JAX's client reserves its fraction on all its GPUs at start-up (gpu_helpers.cc), so
    TensorFlow starting later on GPU 1 finds only what JAX left there."""
    trace = events(
        ("allocate", 1, MiB, "jax", "gpu:0"),
        ("allocate", 2, MiB, "tensorflow", "gpu:1"),
        ("allocate", 3, MiB, "jax", "gpu:1"),
    )
    result = run(trace, 16 * GiB, default_device="gpu:0")
    gpu1 = result.device("gpu:1")
    assert gpu1 is not None
    jax, tensorflow = gpu1.allocators
    assert (jax.source, jax.took) == ("jax", 12 * GiB)
    assert tensorflow.limit == 16 * GiB - 12 * GiB - 512 * MiB - 1536 * MiB


def test_events_that_name_no_device_are_on_the_first_device() -> None:
    trace = Trace([TraceEvent("allocate", 1, MiB, source="pool")])
    assert [d.device for d in run(trace, GiB, default_device="gpu:0").devices] == ["gpu:0"]


# -- frameworks ------------------------------------------------------------------------------------


def test_a_tensorflow_only_test_reserves_what_tensorflow_takes_not_jaxs_three_quarters() -> None:
    """gpu_device.cc: TensorFlow's allocator is what is free when its device is created, less its
    system reserve (1536 MiB at compute capability 8), taken whole by its first allocation."""
    result = run(events(("allocate", 1, 100 * MiB, "tensorflow", "cpu:0")), 16 * GiB)
    device = result.devices[0]
    assert device.peak_bytes_reserved == 16 * GiB - 512 * MiB - 1536 * MiB
    assert device.peak_bytes_in_use == 100 * MiB


def test_tensorflow_first_starves_jax_and_the_fixes_are_proven() -> None:
    trace = events(("allocate", 1, 64 * MiB, "tensorflow", "cpu:0"), ("allocate", 2, 2 * GiB, "jax", "cpu:0"))
    result = run(trace, 4 * GiB)
    assert result.order == ["tensorflow", "jax"]
    tensorflow, jax = result.devices[0].allocators
    # 4 GiB less the 512 MiB context leaves 3.5 GiB; TensorFlow keeps 1536 MiB and takes 2 GiB
    assert tensorflow.limit == tensorflow.took == 2 * GiB
    # JAX asks 75% of the total, backs off by x0.9 to what is left (1.5 GiB), and runs on: no failure yet
    assert jax.asked == 3 * GiB and 1.3 * GiB < jax.took <= 1.5 * GiB
    oom = result.oom
    assert oom is not None and (oom.kind, oom.source, oom.device, oom.requested) == ("tenant", "jax", "cpu:0", 2 * GiB)
    assert oom.held_by_others == {"tensorflow": 2 * GiB, "CUDA context": 512 * MiB}
    fixes = proven_fixes(trace, setups_for(PREALLOC, 4 * GiB), machine(4 * GiB), result)
    assert fixes.settings == [
        "set TF_FORCE_GPU_ALLOW_GROWTH=true",
        'hide the GPU from TensorFlow (tf.config.set_visible_devices([], "GPU"))',
    ]
    assert run(trace, 4 * GiB, environ={"TF_FORCE_GPU_ALLOW_GROWTH": "true"}).fits


def test_tensorflow_over_a_regimes_small_fraction_is_fixed_by_the_fraction_that_fits() -> None:
    """Under a fraction regime TensorFlow's memory limit is the fraction of the device in whole MiB,
    the logical device's `memory_limit` the plugin sets (frameworks.py); it holds under
    TF_FORCE_GPU_ALLOW_GROWTH=true too (TensorFlow grows up to it), so growth is no fix here; the
    smallest fraction that holds the test is, replayed: never "none found" where one fits."""
    trace = events(("allocate", 1, 64 * MiB, "tensorflow", "cpu:0"))
    policy = Policy.of("fraction", 0.001)
    result = run(trace, 16 * GiB, policy)
    assert result.oom is not None and (result.oom.kind, result.oom.source) == ("limit", "tensorflow")
    assert result.devices[0].allocators[0].limit == 16 * MiB  # 16.38 MiB, as whole MiB
    fixes = proven_fixes(trace, setups_for(policy, 16 * GiB), machine(16 * GiB), result)
    assert fixes.settings == ["run it under fraction 0.01 (marker devmem(fraction=0.01) or --devmem-fraction=0.01)"]
    growth = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    growing = run(trace, 16 * GiB, policy, environ=growth)
    assert growing.oom is not None and growing.devices[0].allocators[0].limit == 16 * MiB
    assert proven_fixes(trace, setups_for(policy, 16 * GiB, growth), machine(16 * GiB), growing).settings == [
        "run it under fraction 0.01 (marker devmem(fraction=0.01) or --devmem-fraction=0.01)"
    ]
    assert run(trace, 16 * GiB, Policy.of("fraction", 0.01)).fits


def test_jax_first_with_a_small_tensorflow_step_fits() -> None:
    trace = events(("allocate", 1, 2 * GiB, "jax", "cpu:0"), ("allocate", 2, 16 * MiB, "tensorflow", "cpu:0"))
    result = run(trace, 4 * GiB)
    assert result.fits and result.order == ["jax", "tensorflow"]
    # JAX took 3 GiB of 4 and the context 512 MiB: 512 MiB free, under 2 GiB, so TensorFlow keeps 225 MiB
    assert result.devices[0].allocators[1].limit == 512 * MiB - 225 * MiB


def test_tensorflow_starved_by_jax_is_another_tenants_failure_not_its_limit() -> None:
    """TensorFlow's limit is what JAX left free when it started, less its reserve: 2 GiB less the
    256 MiB context and JAX's 1.5 GiB leaves 256 MiB, less 225 MiB, 31 MiB. Its 64 MiB would have
    fit on the device alone, so the kind is `tenant` (JAX holds the rest), as with the frameworks
    the other way round; a TensorFlow alone over its limit stays `limit`."""
    trace = events(("allocate", 1, GiB, "jax", "cpu:0"), ("allocate", 2, 64 * MiB, "tensorflow", "cpu:0"))
    result = run(trace, 2 * GiB)
    assert result.oom is not None and (result.oom.kind, result.oom.source) == ("tenant", "tensorflow")
    assert result.devices[0].allocators[1].limit == 31 * MiB
    alone = run(events(("allocate", 1, 1600 * MiB, "tensorflow", "cpu:0")), 2 * GiB)  # over its 1567 MiB
    assert alone.oom is not None and alone.oom.kind == "limit"


def test_a_growing_pool_that_cannot_take_another_region_within_its_limit_fails_on_its_limit() -> None:
    """TensorFlow growing on a 2 GiB device (limit 2 GiB less the 256 MiB context and the 225 MiB
    reserve, 1567 MiB): a 768 MiB buffer takes a 1 GiB region; the next 768 MiB is under the limit in
    bytes, but no region that large fits in what the limit leaves (bfc_allocator.cc Extend), while the
    device has room: its limit stops it, not another tenant."""
    trace = events(("allocate", 1, 768 * MiB, "tensorflow", "cpu:0"), ("allocate", 2, 768 * MiB, "tensorflow", "cpu:0"))
    result = run(trace, 2 * GiB, Policy.of("growth"))
    assert result.oom is not None and (result.oom.kind, result.oom.pool_bytes) == ("limit", GiB)


def test_a_framework_fails_only_at_an_allocation_that_cannot_be_served() -> None:
    one_at_a_time = events(
        ("allocate", 1, GiB, "jax", "cpu:0"), ("free", 1, GiB, "jax", "cpu:0"), ("allocate", 2, GiB, "jax", "cpu:0")
    )
    assert run(one_at_a_time, 2 * GiB).fits  # JAX gets 1.5 GiB: enough, one GiB at a time
    both = events(("allocate", 1, GiB, "jax", "cpu:0"), ("allocate", 2, 600 * MiB, "jax", "cpu:0"))
    result = run(both, 2 * GiB)  # the device has room (a 256 MiB context), JAX's 1.5 GiB limit has not
    assert result.oom is not None and result.oom.kind == "limit" and result.oom.event == 1
    assert result.devices[0].peak_bytes_in_use == GiB  # its figures are the demand up to the failure
    too_much = events(("allocate", 1, GiB, "jax", "cpu:0"), ("allocate", 2, GiB, "jax", "cpu:0"))
    assert run(too_much, 2 * GiB).oom.kind == "capacity"  # type: ignore[union-attr]  # 2 GiB of live data and a context


def test_each_process_holds_one_cuda_context_and_users_can_size_it() -> None:
    def tensorflow_limit(process: int, **spec: object) -> int:
        trace = Trace(
            [
                TraceEvent("allocate", 1, GiB, 0.0, source="jax"),
                TraceEvent("allocate", 2, MiB, 1.0, source="tensorflow", process=process),
            ]
        )
        return run(trace, 8 * GiB, **spec).devices[0].allocators[1].limit

    assert tensorflow_limit(0) == 8 * GiB - 6 * GiB - 512 * MiB - 225 * MiB
    assert tensorflow_limit(1) == tensorflow_limit(0) - 512 * MiB
    assert (
        tensorflow_limit(0, context_bytes=0) == 2 * GiB - 1536 * MiB
    )  # 2 GiB free: the reserve for compute capability 8


def test_the_default_context_is_at_most_an_eighth_of_a_small_device() -> None:
    assert context_bytes_for(16 * GiB) == 512 * MiB
    assert context_bytes_for(GiB) == 128 * MiB
    assert context_bytes_for(GiB, 0) == 0


def test_two_jax_processes_the_second_backs_off_and_a_third_cannot_start() -> None:
    shares = process_shares(machine(16 * GiB), AllocatorSetup("jax", "prealloc", 0.75), 3)
    assert shares[0] == 12 * GiB
    assert 2.5 * GiB < shares[1] <= 16 * GiB - 12 * GiB - 2 * 512 * MiB
    assert shares[2] == 0  # no room even for its CUDA context


def test_the_computed_fraction_is_the_largest_that_fits() -> None:
    trace = events(("allocate", 1, 2 * GiB, "jax", "cpu:0"), ("allocate", 2, 3 * GiB, "tensorflow", "cpu:0"))
    result = run(trace, 16 * GiB)
    assert result.oom is not None and result.oom.source == "tensorflow"
    fixes = proven_fixes(trace, setups_for(PREALLOC, 16 * GiB), machine(16 * GiB), result)
    fraction = float(fixes.settings[0].split("=")[1])
    setups = setups_for(PREALLOC, 16 * GiB)
    assert run_machine(trace, {**setups, "jax": AllocatorSetup("jax", "prealloc", fraction)}, machine(16 * GiB)).fits
    assert not run_machine(
        trace, {**setups, "jax": AllocatorSetup("jax", "prealloc", round(fraction + 0.01, 2))}, machine(16 * GiB)
    ).fits


NO_FIX_CASES = {
    "capacity": (
        PREALLOC,
        (("allocate", 1, 900 * MiB, "jax", "cpu:0"), ("allocate", 2, 900 * MiB, "tensorflow", "cpu:0")),
        {},
        "capacity",
        "none found: on cpu:0 the live data would be 900.00 MiB and the CUDA context 128.00 MiB, more than the "
        "device's 1.00 GiB under any setting; use a larger device, smaller batches, or free buffers earlier.",
    ),
    "capacity, no context": (
        PREALLOC,
        (("allocate", 1, 600 * MiB, "jax", "cpu:0"), ("allocate", 2, 600 * MiB, "jax", "cpu:0")),
        {"context_bytes": 0},
        "capacity",
        "none found: on cpu:0 the live data would be 1.17 GiB, more than the device's 1.00 GiB under any setting; "
        "use a larger device, smaller batches, or free buffers earlier.",
    ),
    "each tried": (
        Policy.of("fraction", 0.4),
        tuple(("allocate", i + 1, size * MiB, "pool", "cpu:0") for i, size in enumerate((500, 400, 100, 500))),
        {},
        "limit",
        "none found: each setting that applies was replayed on this trace and none fits: raise the devmem pool's "
        "fraction; run it under mode 'growth' (marker devmem(mode='growth') or --devmem-mode=growth); run it under "
        "mode 'ondemand' (marker devmem(mode='ondemand') or --devmem-mode=ondemand). When it failed, cpu:0 also "
        "held CUDA context 128.00 MiB.",
    ),
    "each tried, beside another framework": (
        Policy.of("fraction", 0.4),
        (("allocate", 1, 200 * MiB, "jax", "cpu:0"), ("allocate", 2, 500 * MiB, "pool", "cpu:0"))
        + (("free", 1, 200 * MiB, "jax", "cpu:0"), ("allocate", 3, 100 * MiB, "tensorflow", "cpu:0"))
        + (("allocate", 4, 100 * MiB, "pool", "cpu:0"),),
        {},
        "limit",
        "none found: each setting that applies was replayed on this trace and none fits: lower JAX's fraction; "
        "set XLA_PYTHON_CLIENT_PREALLOCATE=false; set XLA_PYTHON_CLIENT_ALLOCATOR=platform; raise the devmem pool's "
        "fraction; run it under mode 'growth' (marker devmem(mode='growth') or --devmem-mode=growth); run it under "
        "mode 'ondemand' (marker devmem(mode='ondemand') or --devmem-mode=ondemand); set "
        'TF_FORCE_GPU_ALLOW_GROWTH=true; hide the GPU from TensorFlow (tf.config.set_visible_devices([], "GPU")). '
        "When it failed, cpu:0 also held JAX 410.00 MiB and CUDA context 128.00 MiB.",
    ),
    "nothing to try": (
        Policy.of("growth"),
        (("allocate", 1, 100 * MiB, "tensorflow", "cpu:0"), ("allocate", 2, 400 * MiB, "tensorflow", "cpu:0"))
        + (("free", 1, 100 * MiB, "tensorflow", "cpu:0"), ("allocate", 3, 200 * MiB, "tensorflow", "cpu:0"))
        + (("allocate", 4, 500 * MiB, "tensorflow", "cpu:0"),),
        {},
        "limit",
        "none found: no setting applies to TensorFlow under this regime, so nothing was replayed; use a larger "
        "device, smaller batches, or free buffers earlier. When it failed, cpu:0 also held CUDA context 128.00 MiB.",
    ),
}


@pytest.mark.parametrize("case", NO_FIX_CASES)
def test_when_no_setting_fits_it_says_so_and_why_in_sentences(case: str) -> None:
    policy, items, spec, kind, said = NO_FIX_CASES[case]
    trace = events(*items)
    result = run(trace, GiB, policy, **spec)
    assert result.oom is not None and result.oom.kind == kind
    fixes = proven_fixes(trace, setups_for(policy, GiB), machine(GiB, **spec), result)
    assert fixes.settings == [] and fixes.text() == said
    oom: dict[str, object] = {"kind": kind, "allocator": result.oom.source, "device": "cpu:0"}
    fixes.record(oom)
    assert oom_lines(oom, None, policy.label, "sim:1GiB")[-1] == f"  fix: {said}"  # the failure's last line


@pytest.mark.parametrize(
    ("available", "capability", "environ", "reserve"),
    [
        (GiB, 8, {}, 225 * MiB),
        (40 * GiB, 6, {}, 500 * MiB),
        (40 * GiB, 7, {}, 1050 * MiB),
        (40 * GiB, 8, {}, 1536 * MiB),
        (80 * GiB, 9, {}, 1800 * MiB),
        (40 * GiB, 8, {"TF_DEVICE_MIN_SYS_MEMORY_IN_MB": "64"}, 64 * MiB),
    ],
)
def test_tensorflow_system_reserve_gpu_device_cc_min_system_memory(
    available: int, capability: int, environ: dict[str, str], reserve: int
) -> None:
    assert tensorflow_system_reserve(available, capability, environ) == reserve


def test_a_reserve_not_smaller_than_what_is_free_is_ignored() -> None:
    """gpu_device.cc: `if (min_system_memory < allocated_memory) allocated_memory -= min_system_memory`."""
    assert tensorflow_memory_limit(100 * MiB, 8) == 100 * MiB
    assert tensorflow_memory_limit(GiB, 8) == GiB - 225 * MiB


def test_tensorflow_setup_follows_its_own_variables_then_the_regime() -> None:
    assert tensorflow_setup(PREALLOC, GiB, {}).mode == "default"
    assert tensorflow_setup(PREALLOC, GiB, {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}).mode == "growth"
    assert (
        tensorflow_setup(PREALLOC, GiB, {"TF_FORCE_GPU_ALLOW_GROWTH": "True"}).mode == "default"
    )  # matched exactly, as TensorFlow does
    assert tensorflow_setup(PREALLOC, GiB, {"TF_GPU_ALLOCATOR": "cuda_malloc_async"}).mode == "ondemand"
    assert tensorflow_setup(Policy.of("growth"), GiB, {}).mode == "growth"
    limited = tensorflow_setup(Policy.of("fraction", 0.5), 16 * GiB, {})
    assert (limited.mode, limited.limit) == ("limit", 8 * GiB)
    # the environment the regime sets is read back as the same setup
    for mode in ("prealloc", "growth", "ondemand"):
        policy = Policy.of(mode)
        assert (
            tensorflow_setup(policy, GiB, Regime(policy).environment()).mode == tensorflow_setup(policy, GiB, {}).mode
        )


def test_worker_plans() -> None:
    prealloc = Regime.of("prealloc")
    split = plan_workers(prealloc, False, 0, 3, 0, False)
    assert split.regime == Regime.of("fraction", 0.25) and "0.75 split 3 ways" in split.note
    chosen = plan_workers(Regime.of("fraction", 0.75), True, 1, 3, 0, False)
    assert chosen.regime == Regime.of("fraction", 0.75)
    assert (
        "3 pytest-xdist workers x fraction 0.75 = 2.25 of one device: they cannot all fit; use --devmem-fraction=0.33"
        in chosen.warning
    )
    gpus = plan_workers(prealloc, False, 5, 8, 4, True)
    assert gpus.cuda_visible_devices == "1" and gpus.regime == prealloc
    assert plan_workers(prealloc, False, 0, 1, 0, False).regime == prealloc
    assert worker_index("gw12") == 12


# -- figures ------------------------------------------------------------------------------------


def test_peak_in_use_is_the_live_data_rounded_as_xla_rounds_requests() -> None:
    trace = events(("allocate", 1, 1000, "jax", "cpu:0"), ("allocate", 2, 3 * MiB, "jax", "cpu:0"))
    device = run(trace, GiB).devices[0]
    assert device.peak_bytes_in_use == 1024 + 3 * MiB


def test_min_fraction_and_what_if_replay_the_whole_machine() -> None:
    trace = events(("allocate", 1, 96 * MiB, "pool", "cpu:0"), ("allocate", 2, 40 * MiB, "pool", "cpu:0"))
    setups = setups_for(PREALLOC, GiB)
    answer = find_min_fraction(trace, setups, machine(GiB))
    assert answer is not None
    assert run_machine(trace, {**setups, "pool": AllocatorSetup("pool", "prealloc", answer)}, machine(GiB)).fits
    assert not run_machine(
        trace, {**setups, "pool": AllocatorSetup("pool", "prealloc", round(answer - 0.01, 2))}, machine(GiB)
    ).fits
    small = what_if(trace, setups, machine(160 * MiB))
    assert not small.ok and small.message.startswith("event 1: pool could not allocate 40.00 MiB on cpu:0")


def random_trace(seed: int) -> Trace:
    """Allocations and frees over two devices and two frameworks, with temporaries freed at once."""
    rng = random.Random(seed)
    trace, live, pointer = Trace(), [], 0
    for step in range(400):
        device, source = rng.choice(["cpu:0", "cpu:1"]), rng.choice(["jax", "tensorflow"])
        size = rng.choice([256, 1000, 64 * KiB, MiB, 5 * MiB, 40 * MiB])
        pointer += 1
        trace.append(TraceEvent("allocate", pointer, size, float(step), source=source, device=device))
        if rng.random() < 0.4:
            trace.append(TraceEvent("free", pointer, size, float(step), source=source, device=device))
        else:
            live.append((pointer, size, source, device))
        if live and rng.random() < 0.35:
            gone = live.pop(rng.randrange(len(live)))
            trace.append(TraceEvent("free", gone[0], gone[1], float(step), source=gone[2], device=gone[3]))
    return trace


@pytest.mark.parametrize("mode", ["prealloc", "growth", "ondemand"])
@pytest.mark.parametrize("seed", range(4))
def test_the_figures_are_the_same_with_or_without_a_timeline(mode: str, seed: int) -> None:
    """Temporaries freed by the next event skip the pool when no picture is drawn; the figures,
    fragmentation and maps must not depend on it."""
    trace = random_trace(seed)
    setups, spec = setups_for(Policy.of(mode), 16 * GiB), machine(16 * GiB)
    plain, drawn = run_machine(trace, setups, spec), run_machine(trace, setups, spec, timeline=True)
    assert plain.fits and drawn.fits
    assert plain.devices == drawn.devices and plain.snapshots == drawn.snapshots
    assert drawn.timeline is not None and len(drawn.timeline) == len(trace)
    for figures in drawn.devices:
        _, in_use, _, fragmentation = drawn.timeline.series(figures.device)
        assert max(in_use) == figures.peak_bytes_requested  # the picture draws the live data
        assert max(fragmentation, default=0.0) == pytest.approx(figures.worst_fragmentation or 0.0, abs=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_the_out_of_memory_result_is_the_same_with_or_without_a_timeline(seed: int) -> None:
    trace = random_trace(seed)
    setups, spec = setups_for(PREALLOC, 2 * GiB), machine(2 * GiB)
    plain, drawn = run_machine(trace, setups, spec), run_machine(trace, setups, spec, timeline=True)
    assert plain.oom is not None and plain.oom == drawn.oom and plain.failure == drawn.failure
    assert plain.devices == drawn.devices
    assert drawn.timeline is not None and len(drawn.timeline) == drawn.events_replayed == plain.events_replayed
