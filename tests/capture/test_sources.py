"""Measurement sources. NVML cannot run without a GPU, so it is faked here behind pynvml's functions;
the GPU-marked test at the end runs the real one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_devmem.capture.sources import Reading, Sampler
from pytest_devmem.capture.sources.jax import JaxSource
from pytest_devmem.capture.sources.nvml import NvmlSource
from pytest_devmem.capture.sources.pool import PoolSource
from pytest_devmem.capture.sources.tensorflow import TensorFlowSource
from pytest_devmem.gate.record import TestRecord
from pytest_devmem.model.pool import Policy
from pytest_devmem.units import GiB, MiB


class FakeNvml:
    """pynvml's functions, over a device whose used memory the test sets."""

    def __init__(self, total: int = 80 * GiB, per_process: bool = True, fail_init: bool = False) -> None:
        self.total = total
        self.used = 1 * GiB  # the driver and other tenants
        self.mine = 0
        self.per_process = per_process
        self.fail_init = fail_init
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return {"GPU-aaaa": "gpu0", "GPU-dddd": "gpu3"}[uuid]

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        if handle != "gpu0":  # only physical GPU 0 is busy in these tests
            return SimpleNamespace(total=self.total, used=0, free=self.total)
        return SimpleNamespace(total=self.total, used=self.used + self.mine, free=self.total - self.used - self.mine)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        if not self.per_process:
            raise RuntimeError("Insufficient Permissions")
        return [
            SimpleNamespace(pid=12345, usedGpuMemory=5 * GiB),
            SimpleNamespace(pid=os.getpid(), usedGpuMemory=self.mine),
        ]


def test_nvml_sampler_catches_a_short_peak() -> None:
    sampler = Sampler(interval=0.001)
    nvml = FakeNvml()
    source = NvmlSource(sampler, 0, nvml=nvml)
    source.start()
    sampler.resume()
    nvml.mine = 6 * GiB  # a burst that is gone before the test ends
    time.sleep(0.05)
    nvml.mine = 1 * GiB
    time.sleep(0.01)
    sampler.pause()
    reading = source.stop()
    assert reading.available and reading.note == ""
    assert reading.peak_bytes_reserved == 6 * GiB  # what the driver gave the process: held, not "in use"
    assert reading.peak_bytes_in_use is None  # what its allocators handed out of it: NVML cannot see
    assert reading.figures["process_used_peak_bytes"] == 6 * GiB
    assert reading.figures["device_used_peak_bytes"] == 7 * GiB
    assert reading.figures["device_total_bytes"] == 80 * GiB
    source.close()
    sampler.close()
    assert nvml.shut_down


def test_nvml_finds_the_gpu_by_uuid_not_by_cuda_ordinal() -> None:
    """Under CUDA_VISIBLE_DEVICES=3, CUDA's device 0 is NVML's device 3: the UUID says which."""
    nvml = FakeNvml(per_process=False)
    visible_three = NvmlSource(Sampler(), 0, nvml=nvml, uuid="GPU-dddd")
    by_ordinal = NvmlSource(Sampler(), 0, nvml=nvml)
    for source in (visible_three, by_ordinal):
        source.start()
    nvml.mine = 2 * GiB  # the work happens on physical GPU 0
    assert visible_three.stop().peak_bytes_reserved == 0  # physical GPU 3, rightly idle
    assert by_ordinal.stop().peak_bytes_reserved == 2 * GiB


def test_nvml_falls_back_to_device_figures_without_per_process_data() -> None:
    sampler = Sampler(interval=0.001)
    nvml = FakeNvml(per_process=False)
    source = NvmlSource(sampler, 0, nvml=nvml)
    source.start()
    nvml.mine = 2 * GiB
    reading = source.stop()
    assert reading.peak_bytes_reserved == 2 * GiB
    assert "no per-process figure" in reading.note
    sampler.close()


def test_nvml_that_cannot_start_says_why_and_reports_no_number() -> None:
    source = NvmlSource(Sampler(), 0, nvml=FakeNvml(fail_init=True))
    source.start()
    reading = source.stop()
    assert not reading.available
    assert reading.peak_bytes_in_use is None
    assert "NVML is not usable here: NVML Shared Library Not Found" in reading.note


def test_nvml_without_the_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    reading = NvmlSource(Sampler(), 0).stop()
    assert not reading.available and "pip install nvidia-ml-py" in reading.note


def test_sampler_drops_a_probe_that_raises() -> None:
    sampler = Sampler(interval=0.001)
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise RuntimeError("boom")

    sampler.add(broken)
    sampler.resume()
    time.sleep(0.02)
    sampler.pause()
    sampler.close()
    assert len(calls) == 1


def test_pool_source_reads_the_fixture_pool() -> None:
    from pytest_devmem.model.device import SimulatedDevice
    from pytest_devmem.model.pool import Policy, make_pool

    source = PoolSource()
    source.start()
    assert source.stop().unused
    pool = make_pool(SimulatedDevice(GiB), Policy.of("growth"))
    keep = pool.alloc(MiB)
    source.start()
    source.attach(pool)
    pool.free(pool.alloc(3 * MiB))
    reading = source.stop()
    # the test's own peak above the 1 MiB it found in use: the 3 MiB request got a whole 4 MiB region
    # (less than twice the request, so BFC does not split it)
    assert reading.peak_bytes_in_use == 4 * MiB
    assert reading.figures["peak_pool_bytes"] == 6 * MiB
    pool.free(keep)


def test_tensorflow_source_is_unused_when_tensorflow_is_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    source = TensorFlowSource()
    source.start()
    reading = source.stop()
    assert reading.unused and not reading.available


def gpu_counters(*readings: dict[str, int]):
    """A GPU's memory_stats() over time, as JAX's CUDA client reports them (faked: no GPU here)."""
    remaining = list(readings)
    return lambda: ("gpu", remaining.pop(0))


def test_jax_source_reports_the_test_s_own_peak_above_what_it_began_with() -> None:
    source = JaxSource(
        gpu_counters(
            {"bytes_in_use": 2 * MiB, "peak_bytes_in_use": 3 * MiB},
            {"bytes_in_use": 2 * MiB, "peak_bytes_in_use": 10 * MiB},
        )
    )
    source.start()
    reading = source.stop()
    assert reading.peak_bytes_in_use == 8 * MiB and "autotuning scratch" in reading.note


def test_jax_source_says_a_peak_below_an_earlier_test_s_is_unknown_never_a_zero() -> None:
    """memory_stats()'s peak is the process's and cannot be reset (measured on an H200): a test that
    stays below an earlier test's peak has no peak to read, only what it held at its end."""
    source = JaxSource(
        gpu_counters(
            {"bytes_in_use": 2 * MiB, "peak_bytes_in_use": 110 * MiB},
            {"bytes_in_use": 3 * MiB, "peak_bytes_in_use": 110 * MiB},
        )
    )
    source.start()
    reading = source.stop()
    assert reading.available and reading.peak_bytes_in_use is None
    assert "peak is unknown" in reading.note and reading.figures["held_at_least_bytes"] == MiB
    assert "peak_bytes_in_use" not in reading.to_json()


def test_jax_source_on_a_device_that_never_allocated_reads_a_true_zero() -> None:
    source = JaxSource(
        gpu_counters({"bytes_in_use": 0, "peak_bytes_in_use": 0}, {"bytes_in_use": 0, "peak_bytes_in_use": 0})
    )
    source.start()
    assert source.stop().peak_bytes_in_use == 0


def test_record_figures_come_from_the_machine_and_the_raw_sources_stay_beside() -> None:
    from pytest_devmem.model.frameworks import setups_for
    from pytest_devmem.model.machine import MachineSpec, run_machine
    from pytest_devmem.model.trace import Trace, TraceEvent

    trace = Trace(
        [
            TraceEvent("allocate", 1, 3 * 2**20, source="jax"),
            TraceEvent("allocate", 2, 1000, source="pool"),
            TraceEvent("free", 1, 3 * 2**20, source="jax"),
        ]
    )
    run = run_machine(trace, setups_for(Policy.of("growth"), 2**30), MachineSpec(2**30, "sim:1GiB"))
    nvml = Reading("nvml", True, peak_bytes_reserved=64 * 2**20)
    record = TestRecord.from_run("t", "growth", "sim:1GiB", "sim-1GiB", run, [nvml], notes=[], outcome="passed")
    # live data: 3 MiB and 1000 B (rounded to 1 KiB) at once; each framework grows its own pool:
    # JAX's first region doubles to 4 MiB for the 3 MiB request, the devmem pool's is 2 MiB. The
    # allocators count whole chunks: the 4 MiB region is handed out unsplit for the 3 MiB (the 1 MiB
    # rest is under the request and under 128 MiB, bfc_allocator.cc), the pool's 2 MiB is split
    assert (record.peak_bytes_in_use, record.peak_bytes_requested, record.peak_bytes_reserved) == (
        4 * 2**20 + 1024,
        3 * 2**20 + 1024,
        6 * 2**20,
    )
    assert record.peak_device == "cpu:0" and record.devices is not None
    assert [(a["allocator"], a["peak_bytes_reserved"]) for a in record.devices[0]["allocators"]] == [
        ("jax", 4 * 2**20),
        ("pool", 2 * 2**20),
    ]  # type: ignore[index]
    assert record.sources["nvml"].peak_bytes_reserved == 64 * 2**20  # raw, for validating the replay
    assert record.trace is not None and record.trace.by_source == {
        "jax": {"allocations": 1, "peak_live_bytes": 3 * 2**20},
        "pool": {"allocations": 1, "peak_live_bytes": 1000},
    }
    untraced = TestRecord.from_run(
        "t", "growth", "sim:1GiB", "sim-1GiB", None, [], notes=["JAX 0.1 lacks its hooks"], outcome="passed"
    )
    assert (
        untraced.peak_bytes_in_use is None and untraced.fragmentation is None
    )  # never a zero in place of a measurement
    assert TestRecord.from_json(record.to_json()).to_json() == record.to_json()


@pytest.mark.gpu
def test_real_nvml_sees_jax_preallocate_75_percent(tmp_path) -> None:
    """On a GPU: NVML's figure for a JAX process under prealloc is about 75% of the GPU."""
    script = tmp_path / "probe.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "from pytest_devmem.capture.sources import Sampler\n"
        "from pytest_devmem.capture.sources.nvml import NvmlSource\n"
        "source = NvmlSource(Sampler(), 0)\n"
        "source.start()\n"
        "jnp.ones(1).block_until_ready()\n"
        "reading = source.stop()\n"
        "print(reading.figures['device_total_bytes'], reading.figures.get('process_used_peak_bytes', reading.figures['device_used_peak_bytes']))\n"
    )
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="true", XLA_PYTHON_CLIENT_MEM_FRACTION=".75")
    output = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    total, used = int(output[-2]), int(output[-1])
    assert 0.70 * total < used < 0.80 * total


def test_the_tensorflow_source_states_no_reserved_figure_since_tensorflow_gives_none(tensorflow_loaded: Any) -> None:
    """get_memory_info has `current` and `peak` only; the source stated its peak in use as its reserved
    bytes too, a figure shown as measured that was not (the allocator held whole regions beyond it)."""
    source = TensorFlowSource()
    source.start()
    kept = tensorflow_loaded.ones((256, 1024))
    reading = source.stop()
    assert reading.peak_bytes_reserved is None, reading
    assert int(kept.shape[0]) == 256
