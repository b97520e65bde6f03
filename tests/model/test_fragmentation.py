"""Fragmentation you can act on: every out-of-memory result has a kind, a fragmentation failure names
the buffers that pin the holes and says what defragmentation (a compacting allocator, as TPU runtimes
have) and the other proven settings would do, each claim replayed; `max_fragmentation` gates it."""

from __future__ import annotations

import json

import pytest

from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.fragmentation import long_lived_first, pinning_buffers
from pytest_devmem.model.frameworks import AllocatorSetup, setups_for
from pytest_devmem.model.machine import MachineSpec, run_machine
from pytest_devmem.model.pool import Policy, make_pool
from pytest_devmem.model.pool.compacting import CompactingPool
from pytest_devmem.model.trace import Trace, TraceEvent
from pytest_devmem.model.whatif import proven_fixes
from pytest_devmem.units import GiB, MiB

SPEC = MachineSpec(GiB, "sim:1GiB")

FRAGMENTED = """
MiB = 2**20

def test_fragmented(devmem):
    buffers = [devmem.pool.alloc(100 * MiB) for _ in range(7)]
    for handle in buffers[1::2]:
        devmem.pool.free(handle)
    devmem.pool.alloc(200 * MiB)
"""


def seven_then_every_other_freed_then_200_mib() -> Trace:
    trace = Trace()
    for i in range(7):
        trace.add(0, i + 1, 100 * MiB, float(i), source="pool", label=f"test.py:4 buffer {i}")
    for i in (2, 4, 6):
        trace.add(1, i, 100 * MiB, 10.0 + i, source="pool")
    trace.add(0, 8, 200 * MiB, 20.0, source="pool", label="test.py:7")
    return trace


def test_a_compacting_pool_moves_live_buffers_together_and_keeps_their_handles() -> None:
    pool = make_pool(SimulatedDevice(GiB), Policy.of("compact"))
    assert isinstance(pool, CompactingPool)
    handles = [pool.alloc(100 * MiB) for _ in range(7)]
    for handle in handles[1::2]:
        pool.free(handle)
    big = pool.alloc(200 * MiB)  # no block of 200 MiB until the live buffers move together
    assert pool.compactions == 1 and pool.moved_bytes > 0
    assert pool.check_invariants() == []
    for handle in handles[0::2]:
        assert pool.size_of(handle) == 100 * MiB
        pool.free(handle)
    pool.free(big)
    assert pool.stats()["bytes_in_use"] == 0 and pool.check_invariants() == []


def test_the_fixture_case_is_a_fragmentation_failure_with_its_pins_and_proven_fixes() -> None:
    trace = seven_then_every_other_freed_then_200_mib()
    setups = setups_for(Policy.of("prealloc"), GiB)
    run = run_machine(trace, setups, SPEC)
    oom = run.oom
    assert oom is not None and oom.kind == "fragmentation" and oom.source == "pool"
    # bfc_allocator.cc: the 7th buffer takes the whole 168 MiB tail (under twice the request, wasting
    # under 128 MiB): 300 MiB are free in three 100 MiB blocks, 200 MiB of them outside the largest
    assert oom.pool_bytes - oom.in_use == 300 * MiB and oom.largest_free_block == 100 * MiB
    assert oom.fragmentation == pytest.approx(2 / 3)
    # the allocator counts the 168 MiB tail whole (768 MiB in use, the pool); 700 MiB is the live data
    assert (run.devices[0].peak_bytes_in_use, run.devices[0].peak_bytes_requested) == (768 * MiB, 700 * MiB)
    pins = pinning_buffers(run.failure, trace)
    assert [(pin.size, pin.free_before, pin.free_after) for pin in pins] == [(100 * MiB, 100 * MiB, 100 * MiB)] * 2
    assert (
        pins[0]
        .text()
        .startswith(
            "a 100.00 MiB buffer of test.py:4 buffer 2 (pool, allocated at event 2) sits between free blocks of 100.00 MiB and 100.00 MiB"
        )
    )
    fixes = proven_fixes(trace, setups, SPEC, run)
    assert fixes.defragmentation is not None and fixes.defragmentation.fits and fixes.defragmentation.moved_bytes > 0
    offered = fixes.settings
    assert any("mode 'ondemand'" in fix for fix in offered) and not any("mode 'growth'" in fix for fix in offered)
    assert any(fix.startswith("allocate the long-lived buffers first") for fix in offered)
    assert any(fix.startswith("a defragmenting allocator (regime compact) would fit it") for fix in offered)
    # every claim, replayed here again: what is offered fits, what is not does not
    assert run_machine(trace, {**setups, "pool": AllocatorSetup("pool", "ondemand", 1.0)}, SPEC).fits
    assert not run_machine(trace, {**setups, "pool": AllocatorSetup("pool", "growth")}, SPEC).fits
    assert run_machine(long_lived_first(trace, run), setups, SPEC).fits
    assert run_machine(trace, {**setups, "pool": AllocatorSetup("pool", "compact")}, SPEC).fits


@pytest.mark.parametrize(
    ("sizes", "capacity", "kind"),
    [
        ((600 * MiB, 600 * MiB), GiB, "capacity"),  # 1.2 GiB of live data on a 1 GiB device
        ((500 * MiB, 400 * MiB), 2 * GiB, "limit"),  # 900 MiB fit the device, not the 819 MiB pool of fraction 0.4
    ],
)
def test_every_out_of_memory_has_a_kind(sizes: tuple[int, ...], capacity: int, kind: str) -> None:
    trace = Trace([TraceEvent("allocate", i + 1, size, float(i), source="jax") for i, size in enumerate(sizes)])
    policy = Policy.of("fraction", 0.4) if kind == "limit" else Policy.of("prealloc")
    run = run_machine(trace, setups_for(policy, capacity), MachineSpec(capacity, "sim"))
    assert run.oom is not None and run.oom.kind == kind


def test_the_fixture_test_fails_saying_fragmentation_with_every_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_fragmented=FRAGMENTED)
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-device=sim:1GiB", "--devmem-report=r.json"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the devmem pool could not allocate 200.00 MiB (209715200 bytes) for test_fragmented.py:* in test_fragmented on cpu:0 -- fragmentation*",
            "*300.00 MiB of it free, largest free block 100.00 MiB, fragmentation 0.67*",
            "*cpu:0 (1.00 GiB): 400.00 MiB of live data*",
            "*a 100.00 MiB buffer of test_fragmented.py:* in * sits between free blocks of 100.00 MiB and 100.00 MiB*",
            "*fix (each replayed on this trace):*a defragmenting allocator (regime compact) would fit it*",
            "*fragmentation 0.67*failed*",
        ]
    )
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["oom"]["kind"] == "fragmentation" and record["oom"]["fragmentation"] == pytest.approx(2 / 3)
    assert record["oom"]["defragmentation"]["fits"] is True and record["oom"]["real"] is True
    assert record["peak_bytes_requested"] <= 700 * MiB and record["peak_bytes_in_use"] <= 768 * MiB
    assert record["worst_fragmentation"] >= record["oom"]["fragmentation"] - 1e-9
    assert record["baseline"]["status"] == "out of memory"


def test_the_compact_regime_runs_the_whole_test_that_way(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fragmented=FRAGMENTED.replace(
            "def test_fragmented(devmem):", "def test_fragmented(devmem):\n    assert devmem.regime.label == 'compact'"
        )
    )
    result = pytester.runpytest_inprocess("--devmem-mode=compact", "--devmem-device=sim:1GiB", "--devmem-report=r.json")
    result.assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    pool = record["devices"][0]["allocators"][0]
    assert pool["compactions"] == 1 and pool["moved_bytes"] > 0 and record["oom"] is None


def test_a_compact_test_over_its_limit_is_offered_a_compact_fraction_that_the_replay_proves(
    pytester: pytest.Pytester,
) -> None:
    """400 MiB asked beside 400 MiB live in a 768 MiB compacting pool: its limit is too low; a fraction
    alone would mean mode 'fraction', which does not defragment, so the fix names the mode too."""
    pytester.makepyfile(test_fragmented=FRAGMENTED.replace("alloc(200 * MiB)", "alloc(400 * MiB)"))
    result = pytester.runpytest_inprocess("--devmem-mode=compact", "--devmem-device=sim:1GiB")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*its regime's limit is too low*",
            "*fix (each replayed on this trace): run it under mode 'compact' with fraction 0.78 (marker devmem(mode='compact', fraction=0.78)*",
        ]
    )
    assert (
        "or use mode 'growth'" not in result.stdout.str()
    )  # growth is capped at the same fraction: never offered for a limit
    pytester.makepyfile(
        test_fragmented=FRAGMENTED.replace("alloc(200 * MiB)", "alloc(400 * MiB)").replace(
            "def test_fragmented",
            "import pytest\n\n@pytest.mark.devmem(mode='compact', fraction=0.78)\ndef test_fragmented",
        )
    )
    pytester.runpytest_inprocess("--devmem-device=sim:1GiB").assert_outcomes(passed=1)  # the fix, taken, fits


def test_max_fragmentation_fails_a_test_naming_the_pinning_buffers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        MiB = 2**20

        @pytest.mark.devmem(max_fragmentation=0.3)
        def test_fragments(devmem):
            buffers = [devmem.pool.alloc(100 * MiB) for _ in range(7)]
            for handle in buffers[1::2]:
                devmem.pool.free(handle)

        def test_within(devmem):
            devmem.pool.alloc(100 * MiB)
        """
    )
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-device=sim:1GiB", "--devmem-max-fragmentation=0.5"
    )
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*device memory fragmented: fragmentation reached 0.667 on cpu:0 after event *, above max_fragmentation 0.3*",
            "*the holes were pinned by:*",
            "*- a 100.00 MiB buffer of * sits between free blocks of 100.00 MiB and 100.00 MiB*",
        ]
    )


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "lots"])
def test_a_bad_max_fragmentation_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess(f"--devmem-max-fragmentation={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "max_fragmentation=" in result.stderr.str() and "(from --devmem-max-fragmentation)" in result.stderr.str()


def test_a_bad_max_fragmentation_marker_errors_that_test_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.devmem(max_fragmentation=2)
        def test_bad():
            pass

        def test_good():
            pass
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc")
    result.assert_outcomes(errors=1, passed=1)
    result.stdout.fnmatch_lines(["*max_fragmentation=2: must be from 0 to 1*"])
