"""libtpu on a machine without a TPU: whether a TPU is present, and what it reads
at start-up, set only while it starts here.

libtpu, where no TPU is present, logs the accelerator type and worker hostnames it cannot find, and
takes /tmp/libtpu_lockfile, which guards a real TPU against two processes. For a compile-only
client none of these apply: while the TPU plugin starts here the TPU sizer (tpu_compile.py) sets
what libtpu reads (`QUIET_LIBTPU`) where the user set nothing, then puts the environment back; the
plugin's environment (`environment_for_libtpu`) sets it before JAX starts. Imports no framework.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

from . import compilers, internals

__all__ = ["QUIET_LIBTPU", "environment_for_libtpu", "quiet_libtpu", "tpu_present"]

QUIET_LIBTPU: Mapping[str, str] = {
    # several processes (xdist workers, a child per regime) may each load libtpu to compile: the
    # lock guards a real TPU's chips, which a compile-only client never opens
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    # without them libtpu asks the cloud metadata service and logs "could not determine TPU
    # accelerator type" and an INVALID_ARGUMENT for the worker hostnames on every start
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_ACCELERATOR_TYPE": "v5litepod-1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_WORKER_ID": "0",
}
"""What libtpu reads at start-up, set only while a compile-only TPU client starts on a machine
without a TPU, and only where the user set none of them. The compile target is named by the
topology (`v5p:2x2x1`...), not by TPU_ACCELERATOR_TYPE: the sizes of every generation were checked
with it set (tests/capture/test_tpu_compile.py)."""


def environment_for_libtpu(environ: Mapping[str, str]) -> dict[str, str]:
    """`QUIET_LIBTPU`, less what the user set, where libtpu is installed and no TPU is present: to
    set before JAX starts. JAX's own start tries a TPU backend whenever libtpu is installed
    (xla_bridge.py registers `tpu` with priority 300), and that start loads libtpu with the same
    warnings and lock as a compile-only client's. Nothing where a TPU is present or libtpu missing."""
    if not compilers.in_environment("tpu") or tpu_present():
        return {}
    return {name: value for name, value in QUIET_LIBTPU.items() if name not in environ}


TPU_DEVICE_PATHS = ("/dev/accel0", "/dev/vfio")
"""Where a Cloud TPU VM's driver puts its chips' device files (/dev/accel*, or VFIO on later
generations); without either there is no TPU to find, and the PCI scan is skipped."""


@functools.lru_cache(maxsize=1)
def tpu_present() -> bool:
    """Whether this machine has TPU chips, as JAX's own check reads the PCI devices
    (jax/_src/hardware_utils.py, a module of the standard library only: loaded from its file, so
    that asking imports no JAX before the session has set what JAX reads). Once per process."""
    if not any(os.path.exists(path) for path in TPU_DEVICE_PATHS):
        return False  # no TPU driver's device files: no PCI scan (slow on a busy machine) needed
    try:
        module = internals.hardware_utils()
    except Exception:
        return False
    if module is None:
        return False
    try:
        return int(module.num_available_tpu_chips_and_device_id()[0]) > 0
    except Exception:
        return False


class quiet_libtpu:
    """Sets `QUIET_LIBTPU` (those the user did not set) while the TPU plugin starts on a machine
    without a TPU; puts the environment back after."""

    def __enter__(self) -> None:
        self._previous: dict[str, str | None] = {}
        if tpu_present():
            return
        for name, value in QUIET_LIBTPU.items():
            if name not in os.environ:
                self._previous[name] = None
                os.environ[name] = value

    def __exit__(self, *exc: object) -> None:
        for name in self._previous:
            os.environ.pop(name, None)
