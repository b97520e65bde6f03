from __future__ import annotations

import pytest

from pytest_devmem.errors import DevmemError, InvalidFreeError, InvalidSettingError
from pytest_devmem.hardware.devices import CudaDevice, cuda_device_count, open_device
from pytest_devmem.model.device import DEFAULT_SIM_CAPACITY, Device, SimulatedDevice
from pytest_devmem.model.pool import BFCPool, Policy
from pytest_devmem.units import GiB, MiB


def test_simulated_device_hands_out_disjoint_ranges_and_refuses_beyond_capacity() -> None:
    device = SimulatedDevice(10 * MiB)
    ranges = []
    for size in (3 * MiB, 1000, 4 * MiB):
        address = device.try_allocate(size)
        assert address is not None and address % 256 == 0
        ranges.append((address, address + size))
    ranges.sort()
    assert all(end <= start for (_, end), (start, _) in zip(ranges, ranges[1:]))
    assert device.try_allocate(3 * MiB) is None  # 10 MiB - 7 MiB - 1 KiB left
    assert device.free_bytes() == 10 * MiB - 7 * MiB - 1024
    device.free(ranges[0][0])
    assert device.try_allocate(3 * MiB) is not None
    assert device.peak_used == device.used


def test_simulated_device_refuses_a_foreign_free() -> None:
    device = SimulatedDevice(MiB)
    address = device.try_allocate(256)
    device.free(address)
    with pytest.raises(InvalidFreeError, match="was not allocated on this device"):
        device.free(address)


def test_simulated_device_describes_itself() -> None:
    device = SimulatedDevice()
    assert device.capacity == DEFAULT_SIM_CAPACITY == 16 * GiB
    assert device.name == "sim:16GiB"
    assert device.device_class == "sim-16GiB"
    assert isinstance(device, Device)


@pytest.mark.parametrize(
    ("spec", "capacity"),
    [("sim", 16 * GiB), ("sim:8GiB", 8 * GiB), ("sim:1.5GB", 1_500_000_000), ("SIM:512MiB", 512 * MiB)],
)
def test_open_device_parses_simulated_specs(spec: str, capacity: int) -> None:
    device = open_device(spec)
    assert isinstance(device, SimulatedDevice)
    assert device.capacity == capacity


@pytest.mark.parametrize(
    ("spec", "capacity", "capability", "device_class"),
    [
        ("sim:H100-80GB", 81559 * MiB, (9, 0), "sim-H100-80GB"),
        ("sim:a100-40gb", 40 * GiB, (8, 0), "sim-A100-40GB"),
        ("sim:T4", 15 * GiB, (7, 5), "sim-T4"),
        ("sim:16GiB", 16 * GiB, (8, 0), "sim-16GiB"),
    ],
)
def test_simulated_presets_know_their_capacity_and_compute_capability(
    spec: str, capacity: int, capability: tuple[int, int], device_class: str
) -> None:
    device = open_device(spec)
    assert isinstance(device, SimulatedDevice)
    assert (device.capacity, device.compute_capability, device.device_class) == (capacity, capability, device_class)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tpu", "invalid device 'tpu': allowed are auto, sim, sim:SIZE"),
        ("sim:H100", "invalid device 'sim:H100'"),
        ("sim:lots", "invalid device 'sim:lots': invalid size 'lots'"),
        ("sim:0B", "the capacity must be more than 0 bytes"),
        # larger failed deep in the replay as an INTERNALERROR, beyond the pool's 64-bit addresses
        ("sim:20000000TiB", "invalid device 'sim:20000000TiB': the capacity must be at most 256TiB"),
        ("sim:1e30GiB", "the capacity must be at most 256TiB"),
        ("sim:16G", "ambiguous size '16G'"),
        ("cuda:x", "invalid device 'cuda:x'"),
    ],
)
def test_open_device_rejects_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(InvalidSettingError) as info:
        open_device(spec)
    assert message in str(info.value)


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a GPU")
def test_auto_falls_back_to_a_simulated_device_without_gpu() -> None:
    assert isinstance(open_device("auto"), SimulatedDevice)
    with pytest.raises(DevmemError):
        open_device("cuda:0")


class FakeDriver:
    """Stands in for libcuda in unit tests: same calls as pytest_devmem.hardware.cuda_driver.LibCuda."""

    def __init__(self, total: int = 80 * GiB, gpus: int = 1) -> None:
        self.total = total
        self.gpus = gpus
        self.held: dict[int, int] = {}
        self._next = 0x7000_0000_0000

    def device_count(self) -> int:
        return self.gpus

    def device_name(self, index: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def mem_get_info(self, index: int) -> tuple[int, int]:
        return self.total - sum(self.held.values()), self.total

    def mem_alloc(self, index: int, nbytes: int) -> int | None:
        if nbytes > self.mem_get_info(index)[0]:
            return None
        address, self._next = self._next, self._next + nbytes
        self.held[address] = nbytes
        return address

    def mem_free(self, index: int, address: int) -> None:
        del self.held[address]

    def compute_capability(self, index: int) -> tuple[int, int]:
        return (9, 0)  # an H100's, as device_name says

    def device_uuid(self, index: int) -> str | None:
        return None  # a driver that cannot say: NVML goes by index


def test_cuda_device_asks_the_driver_for_its_compute_capability_and_uuid() -> None:
    class DriverWithDetails(FakeDriver):
        def device_uuid(self, index: int) -> str | None:
            return "GPU-12345678-abcd-ef01-2345-6789abcdef01"

    device = CudaDevice(0, driver=DriverWithDetails())
    assert device.compute_capability == (9, 0) and device.uuid == "GPU-12345678-abcd-ef01-2345-6789abcdef01"
    assert CudaDevice(0, driver=FakeDriver()).uuid is None  # a driver that cannot say: NVML goes by index


def test_cuda_device_through_a_fake_driver() -> None:
    driver = FakeDriver(total=GiB)
    device = CudaDevice(0, driver=driver)
    assert device.capacity == GiB
    assert device.name == "cuda:0 (NVIDIA H100 80GB HBM3)"
    assert device.device_class == "cuda-NVIDIA-H100-80GB-HBM3"
    pool = BFCPool(device, Policy.of("prealloc"))
    pool.alloc(MiB)
    assert device.free_bytes() == GiB // 4
    assert device.try_allocate(GiB) is None
    with pytest.raises(InvalidFreeError):
        device.free(0x1234)
    pool.close()
    assert driver.held == {}


def test_cuda_device_close_frees_everything_and_rejects_bad_index() -> None:
    driver = FakeDriver()
    device = CudaDevice(0, driver=driver)
    device.try_allocate(MiB)
    device.try_allocate(2 * MiB)
    device.close()
    assert driver.held == {}
    with pytest.raises(InvalidSettingError, match="cuda:3: this machine has 1 GPU"):
        CudaDevice(3, driver=driver)


@pytest.mark.gpu
def test_real_cuda_device_allocates_and_reports_free_memory() -> None:
    device = CudaDevice(0)
    free_before = device.free_bytes()
    pool = BFCPool(device, Policy.of("fraction", 0.05))
    pool.alloc(64 * MiB)
    assert pool.stats()["pool_bytes"] >= device.capacity * 0.05 - 256
    assert device.free_bytes() <= free_before - 64 * MiB
    pool.close()
    assert device.free_bytes() >= free_before - 64 * MiB
