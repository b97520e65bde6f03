"""The pool model against TensorFlow's real BFC allocator (benchmarks/bfc_oracle.py): random sequences
run on the allocator, captured through the plugin's TensorFlow capture and replayed through the
model's pool made as TensorFlow's CPU allocator; and the model pinned in both of the allocator's
configurations it serves, TensorFlow's CPU one and XLA's on a GPU."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from benchmarks.bfc_oracle import (
    Group,
    GroupResult,
    build_group,
    compare_group,
    largest_free_visible,
    run_on_tensorflow,
    six_digits,
    summarize,
)
from pytest_devmem.errors import OutOfMemoryError
from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.frameworks import (
    setup_for_policy,
    tensorflow_cpu_setup,
    tensorflow_growth_pool,
    tensorflow_setup,
)
from pytest_devmem.model.machine import MachineSpec, run_machine
from pytest_devmem.model.pool import BFCPool, Policy
from pytest_devmem.model.trace import ALLOCATE_CODE, FREE_CODE, Trace
from pytest_devmem.units import MiB

needs_tensorflow = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"
)


def _agree(groups: list[Group], parallel: int = 16) -> None:
    results = [compare_group(result) for result in run_on_tensorflow(groups, parallel=parallel)]
    assert all(not r.disagreements for r in results), summarize(results)
    assert sum(r.sequences for r in results) == sum(len(g.sequences) for g in groups)


# -- the oracle ---------------------------------------------------------------------------------


@pytest.mark.slow  # about 17 s: 150 allocators of TensorFlow's in subprocesses (the fixed cases below stay fast)
@needs_tensorflow
@settings(
    max_examples=1, phases=[Phase.generate], deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
@given(st.data())
def test_a_hundred_random_sequences_agree_with_tensorflows_allocator(data: st.DataObject) -> None:
    """50 allocators, two sequences each (thousands more: `python -m benchmarks.bench_oracle`) (the second starts with the regions the first left),
    sizes from 1 B to 64 MiB freed in random order, under limits from 2 MiB to 2 GiB: every figure
    after every event agrees, and so does every allocation that fails."""

    def draw(low: int, high: int) -> int:
        return data.draw(st.integers(low, high))

    _agree([build_group(draw, 2) for _ in range(50)])


SEVEN_THEN_LARGER = [100 * MiB] * 7 + [-1, -2, -3, -4] + [200 * MiB] + [-1] * 4
"""The README's fragmentation case: 100 MiB seven times, every other freed, then 200 MiB."""
EQUAL_FREE_CHUNKS = [2 * MiB, 2 * MiB, -1, 1 * MiB, -1, -1, 1 * MiB, -1]
"""2 MiB takes a 2 MiB region, the next 2 MiB half of a 4 MiB one; the first freed, each region
holds a free 2 MiB chunk when 1 MiB comes."""
FIXED_GROUPS = {
    "seven arrays, 1024 MiB": Group(1024, [[100 * MiB] * 7]),
    "readme, 1024 MiB": Group(1024, [SEVEN_THEN_LARGER]),
    "readme, 760 MiB": Group(760, [SEVEN_THEN_LARGER]),
    "equal free chunks": Group(1024, [EQUAL_FREE_CHUNKS, EQUAL_FREE_CHUNKS]),
}


@pytest.fixture(scope="module")
def fixed_cases() -> dict[str, GroupResult]:
    """The named cases, run on TensorFlow together (one import, the failures' waits at once)."""
    results = run_on_tensorflow(list(FIXED_GROUPS.values()))
    return {name: compare_group(result) for name, result in zip(FIXED_GROUPS, results)}


@needs_tensorflow
def test_readme_fragmentation_case_agrees_under_both_limits(fixed_cases: dict[str, GroupResult]) -> None:
    """Under 1024 MiB the 200 MiB fits in what the frees left; under 760 MiB the seventh fails."""
    fits, fails = fixed_cases["readme, 1024 MiB"], fixed_cases["readme, 760 MiB"]
    assert not fits.disagreements and not fails.disagreements, summarize([fits, fails])
    assert (fits.failures, fails.failures) == (0, 1)
    assert fits.checks["the machine's headline peak in use"] == 1  # compared where nothing failed


@needs_tensorflow
def test_the_records_headline_is_tensorflows_own_peak_where_chunks_are_handed_out_whole(
    fixed_cases: dict[str, GroupResult],
) -> None:
    """Seven 100 MiB tensors in TensorFlow's growing CPU allocator: regions of 128, 256 and 512 MiB,
    and a 100 MiB request takes a 128 MiB chunk whole where the rest is under the request and under
    128 MiB (bfc_allocator.cc). The machine's headline, replayed from the captured trace, is
    TensorFlow's own `peak_bytes_in_use` to the byte, above the 700 MiB requested."""
    result = fixed_cases["seven arrays, 1024 MiB"]
    assert not result.disagreements, summarize([result])
    assert result.checks["the machine's headline peak in use"] == 1


@needs_tensorflow
def test_equal_free_chunks_in_two_regions_go_to_the_lower_address(fixed_cases: dict[str, GroupResult]) -> None:
    """Found by the oracle: the system places each new region *below* the last, a simulated device
    above, and best fit breaks ties by address, so with a free 2 MiB chunk in each of two regions
    the allocator serves 1 MiB from the later region. The model agrees given the allocator's
    addresses (and the carried regions in the second run)."""
    result = fixed_cases["equal free chunks"]
    assert not result.disagreements, summarize([result])
    assert result.checks["chunk address"] == 16  # 4 tensors a run, each with the 4-byte shape it was given


# -- reading the allocator's figures ------------------------------------------------------------


def test_fragmentation_is_compared_with_the_six_digits_tensorflow_writes() -> None:
    assert six_digits(0.012656712345) == 0.0126567
    assert six_digits(0.5) == 0.5


def test_largest_free_chunk_is_read_from_the_fragmentation_only_where_it_is_determined() -> None:
    free, largest = 10 * MiB, 4 * MiB
    fragmentation = six_digits((free - largest) / free)
    assert largest_free_visible(free, fragmentation) == largest
    assert largest_free_visible(64 * 2**30, six_digits(0.3)) is None  # six digits of 64 GiB: many candidates
    assert largest_free_visible(0, float("nan")) is None


# -- the two configurations of the allocator ----------------------------------------------------


def test_tensorflows_cpu_allocator_grows_from_2_mib_under_its_own_limit() -> None:
    """process_state.cc: allow_growth always, the limit TF_CPU_BFC_MEM_LIMIT_IN_MB MiB (64 GiB unset),
    no garbage collection."""
    setup = tensorflow_cpu_setup({"TF_CPU_BFC_MEM_LIMIT_IN_MB": "1024"})
    assert (setup.mode, setup.limit, setup.collect) == ("growth", 1024 * MiB, False)
    assert tensorflow_cpu_setup({}).limit == 64 * 2**30
    assert (
        tensorflow_cpu_setup({"TF_CPU_BFC_MEM_LIMIT_IN_MB": "lots"}).limit == 64 * 2**30
    )  # TensorFlow keeps its default
    pool = tensorflow_growth_pool(setup, SimulatedDevice(2**40), 1024 * MiB)
    pool.alloc(4)
    assert pool.regions()[0][1] == 2 * MiB
    pool.alloc(100 * MiB)  # the region size doubles until it fits: 128 MiB
    assert [size for _, size in pool.regions()] == [2 * MiB, 128 * MiB]
    small = tensorflow_growth_pool(
        tensorflow_cpu_setup({"TF_CPU_BFC_MEM_LIMIT_IN_MB": "1"}), SimulatedDevice(2**40), MiB
    )
    small.alloc(4)
    assert small.regions()[0][1] == MiB  # min(limit, 2 MiB)


def test_tensorflows_cpu_allocator_keeps_free_regions_when_an_allocation_fails() -> None:
    """Without garbage collection, a free 2 MiB region stays: 7 MiB under an 8 MiB limit fails
    (a GPU allocator of TensorFlow's would give the region back and fit it)."""
    cpu = tensorflow_growth_pool(
        tensorflow_cpu_setup({"TF_CPU_BFC_MEM_LIMIT_IN_MB": "8"}), SimulatedDevice(2**40), 8 * MiB
    )
    cpu.free(cpu.alloc(MiB))
    with pytest.raises(OutOfMemoryError):
        cpu.alloc(7 * MiB)
    gpu_setup = tensorflow_setup(Policy.of("growth"), 8 * MiB, {})
    assert gpu_setup.collect
    gpu = tensorflow_growth_pool(gpu_setup, SimulatedDevice(2**40), 8 * MiB)
    gpu.free(gpu.alloc(MiB))
    gpu.alloc(7 * MiB)
    assert [size for _, size in gpu.regions()] == [8 * MiB]


def test_xlas_gpu_allocator_takes_its_whole_limit_at_once_unless_it_grows() -> None:
    """XLA on a GPU (gpu_helpers.cc): preallocation takes fraction x memory in one region; growth
    starts at 2 MiB as TensorFlow's CPU allocator does, but under fraction x memory."""
    device = SimulatedDevice(1024 * MiB)
    prealloc = BFCPool(device, setup_for_policy("jax", Policy.of("prealloc")).policy)
    prealloc.alloc(4)
    assert [size for _, size in prealloc.regions()] == [768 * MiB]
    grow = BFCPool(SimulatedDevice(1024 * MiB), setup_for_policy("jax", Policy.of("growth")).policy)
    grow.alloc(4)
    assert [size for _, size in grow.regions()] == [2 * MiB]
    assert grow.bytes_limit == 768 * MiB


def test_the_machine_replays_tensorflows_cpu_allocator_with_its_own_limit() -> None:
    """The machine's TensorFlow allocator under the CPU setup: limit from the setting, not the
    memory free, so the seventh 100 MiB fails under 760 MiB as on the real allocator."""
    trace = Trace()
    for buffer in range(1, 8):
        trace.add(ALLOCATE_CODE, buffer, 100 * MiB, float(buffer), source="tensorflow", device="cpu:0")
    trace.add(FREE_CODE, 1, 100 * MiB, 9.0, source="tensorflow", device="cpu:0")
    spec = MachineSpec(capacity=64 * 2**30)
    fits = run_machine(trace, {"tensorflow": tensorflow_cpu_setup({"TF_CPU_BFC_MEM_LIMIT_IN_MB": "1024"})}, spec)
    assert fits.oom is None
    fails = run_machine(trace, {"tensorflow": tensorflow_cpu_setup({"TF_CPU_BFC_MEM_LIMIT_IN_MB": "760"})}, spec)
    assert fails.oom is not None and fails.oom.event == 6
