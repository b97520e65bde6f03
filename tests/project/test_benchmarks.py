"""The benchmark command runs and prints its table (timings are not asserted: they live in the benchmark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.reference import FirstFitPool
from benchmarks.workloads import training_loop
from pytest_devmem.model.pool import replay

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about 50 s: every benchmark once, in quick mode
def test_the_benchmarks_run_in_quick_mode() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    pool, machine, *_ = result.stdout.split("\n\n")
    lines = pool.splitlines()
    assert "ops/s" in lines[1] and "held/live" in lines[1]
    for trace in ("many-small", "mixed-small-huge", "training-loop"):
        policies = [line.split()[2] for line in lines if line.startswith(trace)]
        assert policies == ["first-fit", "prealloc", "growth", "ondemand"]
    assert "capture cost per executable run:" in result.stdout and "bytes held per event" in result.stdout
    step_table = result.stdout[result.stdout.index("jitted steps") : result.stdout.index("TensorFlow")]
    steps = [line.split()[0] for line in step_table.splitlines() if line.startswith(("off ", "on, traces written "))]
    assert steps == ["off", "on,"], result.stdout
    tpu = (
        result.stdout[result.stdout.index("\n\nJAX examples") :] if "\n\nJAX examples" in result.stdout else ""
    )  # the TPU sizing table, last
    tensorflow = result.stdout[
        result.stdout.index("TensorFlow") : len(result.stdout) - len(tpu)
    ]  # the TensorFlow suite's table
    if tpu:
        assert "sized by the CPU" in tpu and "sized by the TPU v5e" in tpu and "target 1.3x" in tpu
    assert tensorflow.startswith(("TensorFlow suite: 4 tests", "TensorFlow is not installed"))
    if tensorflow.startswith("TensorFlow suite"):
        assert "on (prealloc, in-process)" in tensorflow and "TensorFlow capture per test" in tensorflow
    lines = machine.splitlines()
    assert lines[0].startswith("model of the machine") and "events/s" in lines[1] and "vs pool" in lines[1]
    rows = {line.split()[0]: line.split() for line in lines[2:7]}
    assert list(rows) == ["jax-step-loop", "many-small", "mixed-small-huge", "training-loop", "sharded-steps"]
    assert rows["sharded-steps"][2:4] == ["4", "5"]  # devices, allocators
    assert all(row[-1] in ("yes", "no") for row in rows.values())
    assert "trace" in lines[8] and "B/event" in lines[8] and "recording" in lines[9] and "events/s" in lines[10]


def test_first_fit_reference_is_a_correct_allocator() -> None:
    trace = training_loop(steps=2, layers=6)
    pool = FirstFitPool(2**34)
    result = replay(trace, pool)  # type: ignore[arg-type]
    assert result.ok
    assert pool.peak_live >= trace.peak_live_bytes()
    for offset in list(pool._sizes):  # the weights stay live in the trace; free them here
        pool.free(offset + 1)
    assert pool._free == [[0, 2**34]]  # every free merged back into one block


def test_the_targets_table_shows_each_figure_beside_its_target_and_reference() -> None:
    from benchmarks import bench_read, targets

    rows = targets.reading_rows(3_000, 3_000, 1)
    assert [row[2] for row in rows] == [
        f">= {bench_read.TARGET_EVENTS_PER_SECOND:,} events/s",
        f"<= {bench_read.TARGET_MEMORY_RATIO:g}x at 10,000,000 events",
        f"<= {bench_read.TARGET_MEMORY_RATIO:g}x at 10,000,000 events",
    ]
    assert "Arrow file" in rows[0][0] and "its CSV" in rows[0][3] and "row reader" in rows[0][3]
    assert rows[0][4] in ("yes", "no") and "(CSV)" in rows[2][0]
    # a smaller trace than the target's says so rather than passing or failing it (where VmHWM is read)
    assert all(row[4].startswith("n/a") for row in rows[1:])
    rows += targets.model_rows({"many-small": lambda: bench_read.recorded_trace(2_000)}, 1)
    assert [row[0].rsplit(", ", 1)[1] for row in rows[3:]] == list(targets.POLICIES)
    lines = targets.table(rows).splitlines()
    assert lines[0] == "| figure | measured | target | reference (same run) | met |" and len(lines) == 2 + len(rows)
