"""What differs on Windows and macOS, simulated so that it runs on every OS: no SIGKILL (a crashed
child process must not end the session), the CUDA driver's library under another name (or none at
all), and no /proc to count GPUs with. Needs pytest alone: the portable CI job runs it."""

from __future__ import annotations

import ctypes
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_devmem.errors import DeviceError
from pytest_devmem.hardware import cuda_driver, driver_info
from pytest_devmem.hardware.cuda_driver import LibCuda, driver_library_names
from pytest_devmem.hardware.devices import cuda_device_count
from pytest_devmem.hardware.driver_info import DriverInfo, cuda_version_text, nvml_library_names, query_nvml
from pytest_devmem.plugin.isolation import describe_exit, looks_like_out_of_memory
from pytest_devmem.plugin.workers import gpu_count

# -- no SIGKILL --------------------------------------------------------------------------------


def test_exit_statuses_are_described_without_sigkill(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(signal, "SIGKILL", raising=False)  # as on Windows
    assert looks_like_out_of_memory(-9) is False  # no AttributeError: there is no such signal to compare with
    assert looks_like_out_of_memory(3) is False
    assert describe_exit(3) == "exit status 3"
    # Windows reports a crash as an NTSTATUS exit code (ntstatus.h), never as a signal
    assert describe_exit(0xC0000005) == "exit status 0xC0000005 (STATUS_ACCESS_VIOLATION)"
    assert describe_exit(0xC0000017) == "exit status 0xC0000017 (STATUS_NO_MEMORY)"
    assert describe_exit(0xC0001234) == "exit status 0xC0001234"
    assert looks_like_out_of_memory(0xC0000017) and looks_like_out_of_memory(0xC000012D)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is a POSIX signal")
def test_sigkill_is_still_named_where_it_exists() -> None:
    assert looks_like_out_of_memory(-signal.SIGKILL)
    assert describe_exit(-signal.SIGKILL) == f"killed by SIGKILL (signal {int(signal.SIGKILL)})"


def test_a_child_that_dies_fails_its_test_and_the_session_goes_on_without_sigkill(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        """
        import os
        import pytest

        @pytest.mark.devmem(mode="growth")
        def test_a_dies():
            os._exit(7)

        @pytest.mark.devmem(mode="growth")
        def test_b_after_the_crash():
            pass

        def test_c_in_process():
            pass
        """
    )
    monkeypatch.delattr(signal, "SIGKILL", raising=False)  # the parent runs as on Windows
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the child process for regime growth died while running this test: exit status 7*",
            "*isolated regimes: growth (2 child process(es))*",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str()


# -- the CUDA driver's library -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "names"),
    [("linux", ("libcuda.so.1", "libcuda.so")), ("win32", ("nvcuda.dll",)), ("darwin", ())],
)
def test_the_cuda_driver_library_is_named_per_system(platform: str, names: tuple[str, ...]) -> None:
    assert driver_library_names(platform) == names


class FakeCudaLibrary:
    """Answers the calls LibCuda makes on load and a cuDriverGetVersion."""

    def __init__(self, name: str) -> None:
        self.name = name

    def cuInit(self, flags: int) -> int:
        return 0

    def cuDriverGetVersion(self, pointer: Any) -> int:
        pointer._obj.value = 12040
        return 0


def loads_only(monkeypatch: pytest.MonkeyPatch, available: set[str]) -> list[str]:
    """ctypes.CDLL that finds only the libraries in `available`; the names it was asked for."""
    asked: list[str] = []

    def cdll(name: str, *args: object, **kwargs: object) -> FakeCudaLibrary:
        asked.append(name)
        if name not in available:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        return FakeCudaLibrary(name)

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    return asked


def test_linux_falls_back_to_the_unversioned_libcuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    asked = loads_only(monkeypatch, {"libcuda.so"})  # a toolkit's development link, no soname
    assert LibCuda()._lib.name == "libcuda.so"  # type: ignore[attr-defined]
    assert asked == ["libcuda.so.1", "libcuda.so"]


def test_windows_loads_nvcuda_dll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    asked = loads_only(monkeypatch, {"nvcuda.dll"})
    assert LibCuda()._lib.name == "nvcuda.dll"  # type: ignore[attr-defined]
    assert asked == ["nvcuda.dll"]


def test_a_missing_driver_names_every_library_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    loads_only(monkeypatch, set())
    with pytest.raises(
        DeviceError, match=r"cannot load the CUDA driver library: tried 'libcuda.so.1': .*; 'libcuda.so': "
    ):
        LibCuda()


def test_macos_has_no_cuda_driver_and_loads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    asked = loads_only(monkeypatch, {"libcuda.so.1", "nvcuda.dll"})
    with pytest.raises(DeviceError, match="there is no CUDA driver library on darwin"):
        LibCuda()
    assert cuda_device_count() == 0
    assert asked == []


# -- GPUs and driver versions without /proc and without initialising CUDA -------------------------


class FakeNvml:
    """NVML's calls as ctypes would make them: results written through byref pointers and buffers."""

    def __init__(self, gpus: int = 3, driver: bytes = b"550.54.15", cuda: int = 12040) -> None:
        self.gpus, self.driver, self.cuda = gpus, driver, cuda
        self.shut_down = False

    def nvmlInit_v2(self) -> int:
        return 0

    def nvmlDeviceGetCount_v2(self, pointer: Any) -> int:
        pointer._obj.value = self.gpus
        return 0

    def nvmlSystemGetDriverVersion(self, buffer: Any, size: int) -> int:
        buffer.value = self.driver
        return 0

    def nvmlSystemGetCudaDriverVersion_v2(self, pointer: Any) -> int:
        pointer._obj.value = self.cuda
        return 0

    def nvmlShutdown(self) -> int:
        self.shut_down = True
        return 0


def no_library(names: tuple[str, ...], what: str) -> Any:
    raise DeviceError(f"cannot load the {what}")


@pytest.mark.parametrize(("platform", "first"), [("linux", "libnvidia-ml.so.1"), ("win32", "nvml.dll")])
def test_nvml_is_named_per_system(platform: str, first: str) -> None:
    assert nvml_library_names(platform)[0] == first
    assert nvml_library_names("darwin") == ()


def test_gpu_count_asks_nvml_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nvml = FakeNvml(gpus=3)
    monkeypatch.setattr(driver_info, "load_library", lambda names, what: nvml)
    monkeypatch.setattr(driver_info, "NVIDIA_PROC_DIR", str(tmp_path / "no-proc"))
    assert gpu_count() == 3
    assert nvml.shut_down


def test_gpu_count_without_nvml_reads_the_driver_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / "gpus" / bus).mkdir(parents=True)
    monkeypatch.setattr(driver_info, "load_library", no_library)
    monkeypatch.setattr(driver_info, "NVIDIA_PROC_DIR", str(tmp_path))
    assert gpu_count() == 2


def test_gpu_count_without_nvml_and_without_proc_is_zero(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(driver_info, "load_library", no_library)
    monkeypatch.setattr(driver_info, "NVIDIA_PROC_DIR", str(tmp_path / "missing"))  # Windows, macOS: no /proc
    assert gpu_count() == 0


def test_driver_versions_come_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_info, "load_library", lambda names, what: FakeNvml())
    assert driver_info.driver_info() == DriverInfo(gpus=3, driver_version="550.54.15", cuda_version="12.4")


def test_driver_versions_without_nvml_come_from_proc_and_cu_driver_get_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version:  gcc version 12.2.0\n"
    )
    monkeypatch.setattr(sys, "platform", "linux")

    def load(names: tuple[str, ...], what: str) -> Any:
        if "NVML" in what:
            raise DeviceError("no NVML")
        return FakeCudaLibrary(names[0])  # answers cuDriverGetVersion; cuInit is never called

    monkeypatch.setattr(driver_info, "load_library", load)
    monkeypatch.setattr(driver_info, "NVIDIA_PROC_DIR", str(tmp_path))
    assert driver_info.driver_info() == DriverInfo(gpus=None, driver_version="535.104.05", cuda_version="12.4")


def test_driver_versions_are_none_where_nothing_can_tell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(driver_info, "NVIDIA_PROC_DIR", str(tmp_path / "missing"))
    asked = loads_only(monkeypatch, set())
    assert driver_info.driver_info() == DriverInfo(None, None, None)
    assert query_nvml() is None
    assert asked == []  # macOS: neither NVML nor a CUDA driver is looked for


@pytest.mark.parametrize(("encoded", "text"), [(12040, "12.4"), (11080, "11.8"), (13000, "13.0")])
def test_cuda_versions_read_as_people_write_them(encoded: int, text: str) -> None:
    assert cuda_version_text(encoded) == text


def test_the_real_driver_lookup_never_fails_here() -> None:
    info = driver_info.driver_info()  # whatever this machine has: figures or None, never an exception
    assert info.gpus is None or info.gpus >= 0
    assert cuda_driver.driver_library_names() is not None
