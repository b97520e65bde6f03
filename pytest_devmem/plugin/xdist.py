"""The session under pytest-xdist, as the plugin sees it: the controller's plan for how its workers
share the device (workers.py's rules), the number of workers, and a worker's quiet end."""

from __future__ import annotations

import warnings

import pytest

from ..model.device import Device, DeviceKind
from ..model.frameworks import AllocatorSetup
from ..model.whatif import process_shares
from ..units import format_size
from .recording import machine_spec
from .settings import Settings
from .workers import gpu_count, plan_workers


def controller_plan(config: pytest.Config, settings: Settings, device: Device) -> str:
    """On the xdist controller: how workers will share the device; a warning where they cannot."""
    if settings.regime is None:
        return ""
    if settings.tpu is not None:
        return ""  # a TPU's chips belong to one process: each worker is measured alone
    try:
        count = int(config.getoption("numprocesses", default=0) or 0)
    except (TypeError, ValueError):
        count = 0
    uses_gpu = device.kind is DeviceKind.CUDA
    plan = plan_workers(settings.regime, settings.fraction_chosen, 0, count, gpu_count() if uses_gpu else 0, uses_gpu)
    if not plan.warning:
        return plan.note
    warning = plan.warning + _crowding(settings, device, count)
    config.issue_config_time_warning(pytest.PytestWarning(warning), stacklevel=2)
    return warning


def _crowding(settings: Settings, device: Device, count: int) -> str:
    """What each worker's JAX would really hold on this device, started one after the other."""
    regime = settings.regime
    if regime is None or not regime.policy.preallocates:
        return ""
    shares = process_shares(
        machine_spec(device, settings.cuda_context_bytes), AllocatorSetup("jax", "prealloc", regime.fraction), count
    )
    held = ", ".join(f"worker {i + 1} {format_size(share)}" for i, share in enumerate(shares))
    return f"; on {device.name}, started one after the other, each JAX preallocation backs off to what is left: {held}"


def worker_count(config: pytest.Config) -> int:
    """The number of pytest-xdist workers, as a worker is told."""
    count = getattr(config, "workerinput", {}).get("workercount")
    return count if isinstance(count, int) and count > 0 else 1


def ignore_shutdown_interrupt_in_jax_gc() -> None:
    """An xdist worker that is still busy 5 s after its controller ended the session gets a SIGINT
    from execnet (`gateway_base._terminate_execution`); the KeyboardInterrupt lands wherever Python
    is, most often in JAX's `_xla_gc_callback` (jax/_src/lib/__init__.py, run on every garbage
    collection), where Python cannot raise it and pytest prints it as an unraisable-exception warning
    at exit. What keeps a worker busy then is not pytest-devmem (it happens with `-p no:devmem`):
    hypothesis's pytest plugin, for one, imports hypothesis in each worker's terminal summary, after
    the worker has reported its results, and every collection during that import runs JAX's
    callback. The worker has sent everything; only that one warning is dropped, in the worker, at
    its very end: any other unraisable exception is still reported."""
    warnings.filterwarnings(
        "ignore",
        message=r"(?s)Exception ignored in: <function _xla_gc_callback\b.*\bKeyboardInterrupt",
        category=pytest.PytestUnraisableExceptionWarning,
    )
