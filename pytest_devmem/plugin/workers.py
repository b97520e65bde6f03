"""pytest-xdist workers on one device: how much each may take, or which GPU each gets, and whether
their largest tests fit side by side. No pytest here.

N workers preallocating 75% each cannot share one GPU. Unless the user chose a fraction, each worker
gets the regime's fraction split N ways; a chosen fraction that cannot fit N times is kept, with a
warning. With several GPUs, worker k sees only GPU k mod count through CUDA_VISIBLE_DEVICES.

A suite whose tests each fit can still fail when N workers run N large tests at once on one device.
Each worker keeps the traces of the largest tests it ran in its own process (`LargestTests`) and
sends them to the controller, which replays the suite's largest (as many as workers share a device)
side by side on the model of the machine: each in its own process with its own CUDA context and
allocators under the worker's share, every test at its peak at the same moment (`side_by_side`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..hardware.driver_info import proc_gpu_count, query_nvml
from ..model.regime import Regime
from ..model.trace import Trace


@dataclass(frozen=True)
class WorkerPlan:
    regime: Regime | None
    cuda_visible_devices: str | None = None
    note: str = ""
    warning: str = ""


def gpu_count() -> int:
    """GPUs the NVIDIA driver lists, without initialising CUDA (which would fix CUDA_VISIBLE_DEVICES
    for this process before it can be set): NVML's count where NVML loads (Linux and Windows), else
    the entries of Linux's /proc/driver/nvidia/gpus, else 0 (macOS, or no driver)."""
    nvml = query_nvml()
    if nvml is not None and nvml.gpus is not None:
        return nvml.gpus
    return proc_gpu_count() or 0


def worker_index(worker_id: str) -> int:
    """`gw3` -> 3."""
    digits = "".join(ch for ch in worker_id if ch.isdigit())
    return int(digits) if digits else 0


def plan_workers(
    regime: Regime | None, fraction_chosen: bool, index: int, count: int, gpus: int, uses_gpu: bool
) -> WorkerPlan:
    """What worker `index` of `count` should run under."""
    if count <= 1 or regime is None:
        return WorkerPlan(regime)
    if uses_gpu and gpus > 1:
        device = index % gpus
        return WorkerPlan(
            regime, str(device), note=f"{count} workers over {gpus} GPUs: one GPU each (CUDA_VISIBLE_DEVICES)"
        )
    if fraction_chosen:
        total = regime.fraction * count
        if total > 1.0 + 1e-9:
            return WorkerPlan(
                regime,
                warning=(
                    f"{count} pytest-xdist workers x fraction {regime.fraction:g} = {total:.2f} of one device: they cannot all "
                    f"fit; use --devmem-fraction={math.floor(100 / count) / 100:.2f} or less, or drop --devmem-fraction to let "
                    f"pytest-devmem split the regime's fraction {count} ways"
                ),
            )
        return WorkerPlan(
            regime, note=f"{count} workers share one device, each with the chosen fraction {regime.fraction:g}"
        )
    share = math.floor(regime.fraction / count * 10000) / 10000
    mode = "fraction" if regime.policy.preallocates else regime.mode
    return WorkerPlan(
        Regime.of(mode, share),
        note=f"{count} workers share one device: each gets fraction {share:g} ({regime.label}'s {regime.fraction:g} split {count} ways)",
    )


def workers_per_device(workers: int, gpus: int, uses_gpu: bool) -> int:
    """How many workers share one device: all of them, or with several GPUs those given the same GPU."""
    if uses_gpu and gpus > 1:
        return math.ceil(workers / gpus)
    return workers


@dataclass
class LargestTests:
    """The `limit` largest tests (peak in use) a worker ran in its own process, with their traces."""

    limit: int
    kept: list[tuple[int, str, Trace]] = field(default_factory=list)

    def offer(self, test_id: str, peak: int | None, trace: Trace | None) -> None:
        if peak is None or trace is None or not len(trace) or self.limit < 1:
            return
        self.kept.append((peak, test_id, trace))
        self.kept.sort(key=lambda item: (-item[0], item[1]))
        del self.kept[self.limit :]

    def to_json(self) -> list[dict[str, object]]:
        return [
            {"test_id": test_id, "peak_bytes_in_use": peak, "trace": trace.to_columns()}
            for peak, test_id, trace in self.kept
        ]

    @staticmethod
    def from_json(data: object) -> list[tuple[int, str, Trace]]:
        """What a worker sent; entries that are not its plain data are left out."""
        found = []
        for entry in data if isinstance(data, list) else []:
            if (
                isinstance(entry, dict)
                and isinstance(entry.get("test_id"), str)
                and isinstance(entry.get("peak_bytes_in_use"), int)
            ):
                try:
                    found.append((entry["peak_bytes_in_use"], entry["test_id"], Trace.from_columns(entry.get("trace"))))
                except ValueError:
                    continue
        return found
