"""Whose compile sizes each JAX executable's buffers: the CPU's the tests run on, or the GPU's or
TPU's the simulated device stands for (compiled deviceless: capture/jax/gpu_compile.py,
capture/jax/tpu_compile.py). XLA:GPU and XLA:TPU assign buffers differently from XLA:CPU (an attention
step's temp is 0 on the CPU, 256 MiB on an H100 and 128 MiB on a TPU v5e), and a TPU lays arrays out
in tiles, so a `sim:` GPU or TPU preset is sized as that device by default. A baseline made with one
compile's sizes is never compared with another's: the device class says which, where it is not the
device's own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ..capture.jax.gpu_compile import GpuSizer
from ..capture.jax.tpu_compile import TpuSizer
from ..capture.measurement import Measurement
from ..compile_store import changed_entries
from ..errors import DevmemError
from ..model.device import Device, DeviceKind
from ..model.gpu_targets import GPU_SPECS, GpuSpec, gpu_spec
from ..model.tpu_targets import TpuSpec, tpu_spec


@dataclass(frozen=True)
class CompileTarget:
    """What sizes the session's JAX executables, and how the device class says so."""

    label: str  # "cpu", "native" (a real GPU's own compile), or the GPU or TPU compiled for
    spec: GpuSpec | TpuSpec | None  # the device to compile for; None: the executables' own sizes
    note: str  # why it is this one, for the summary and the report
    class_suffix: str = ""  # added to the device class where the sizes are not the device's own

    @property
    def said(self) -> bool:
        """Whether the header and the summary name it: where the sizes are not the device's own."""
        return self.spec is not None or bool(self.class_suffix)

    @property
    def platform(self) -> str:
        return "tpu" if isinstance(self.spec, TpuSpec) else "gpu" if self.spec is not None else "cpu"

    def to_json(self) -> dict[str, object]:
        return {"target": self.label, "note": self.note}


def compilers_needed(device_spec: str, setting: str | None) -> tuple[str, ...]:
    """The deviceless compilers (`gpu`, `tpu`) a session on `device_spec` under the compile-target
    `setting` (None: auto) sizes with, as `resolve` will choose them: read before any device is
    opened, so that the compilers' folder is on sys.path before JAX starts (capture/jax/compilers.py)."""
    choice = setting or "auto"
    if choice == "cpu":
        return ()
    name = device_spec if choice == "auto" else choice
    if tpu_spec(name) is not None:
        return ("tpu",)
    text = name.strip().lower()
    if choice == "auto" and not text.startswith("sim:"):
        return ()  # a real GPU compiles for itself; `sim` and `sim:SIZE` keep the CPU's sizes
    presets = {preset.lower() for preset in GPU_SPECS}
    return ("gpu",) if text.removeprefix("sim:") in presets else ()


def resolve(
    setting: str | None,
    device: Device,
    compiler_problem: str | None,
    tpu_compiler_problem: str | None = None,
    source: str = "",
) -> CompileTarget:
    """The compile target for `device` under `setting` (None: auto), given whether XLA:GPU's and
    XLA:TPU's compilers are installed (`compiler_problem`, `tpu_compiler_problem` say why not).
    `source`: the setting as the user wrote it (`DEVMEM_COMPILE_TARGET=cpu`), named in the note."""
    choice = setting or "auto"
    given = source or f"--devmem-compile-target={choice}"
    if device.kind is DeviceKind.CUDA:
        unused = "" if choice in ("auto", "native") else f" ({given} sizes simulated devices only, not a real GPU)"
        return CompileTarget("native", None, f"JAX compiles for the real GPU: its own sizes{unused}")
    preset = device.preset
    if choice == "auto" and preset is None:
        return CompileTarget(
            "cpu",
            None,
            f"{device.name} states a capacity, not a GPU: JAX's sizes are the CPU compile's (--devmem-compile-target=GPU, or a sim: GPU preset, sizes them for a GPU)",
        )

    def cpu_sizes(note: str) -> CompileTarget:  # a preset's device class says its sizes are the CPU's
        return CompileTarget("cpu", None, note, "-cpu-sizes" if preset is not None else "")

    if choice == "cpu":
        return cpu_sizes(f"JAX's sizes are the CPU compile's ({given})")
    name = str(preset if choice == "auto" else choice)
    natural = choice == "auto" or name == preset
    suffix = "" if natural else f"-{name}-sizes"
    tpu = tpu_spec(name)
    if tpu is not None:
        if tpu_compiler_problem is not None:
            return cpu_sizes(f"JAX's sizes stay the CPU compile's, not a {tpu.description}'s: {tpu_compiler_problem}")
        return CompileTarget(
            name,
            tpu,
            f"JAX's executables and arrays are sized as the {tpu.description} compiler (libtpu, deviceless) sizes them, where they compile for it",
            suffix,
        )
    spec = gpu_spec(name)  # that GPU as its data sheet has it: the model's devices keep their own capacity
    if compiler_problem is not None:
        return cpu_sizes(f"JAX's sizes stay the CPU compile's, not {name}'s: {compiler_problem}")
    chosen = f" ({given})" if source else ""
    return CompileTarget(
        name,
        spec,
        f"JAX's executables are sized as {name}'s compile sizes them (deviceless, so without the autotuning a real GPU does), where they compile for it{chosen}",
        suffix,
    )


def sizer_counts(measurement: Measurement) -> dict[str, float | int] | None:
    """What the session's GPU or TPU sizer compiled, and found stored: None where none sized anything."""
    sizer = measurement.jax_capture.sizer
    if sizer is None or not getattr(sizer, "installed", False):
        return None
    counts: dict[str, float | int] = sizer.counts()
    return counts


def gpu_sizer(
    config: pytest.Config,
    target: CompileTarget,
    user_cache: Path | None = None,
    store: Path | None = None,
    verify: str | None = None,
) -> object | None:
    """The GPU or TPU sizer for the session's compile target, its results cached on disk in pytest's
    cache directory where there is one, and in `user_cache` (--devmem-cache-dir) where it is given,
    and read from the entries stored beside the baselines (`store`, compile_store.py), but those git
    revision `verify` does not hold; None where JAX keeps its own sizes."""
    if target.spec is None:
        return None

    name = "devmem-tpu-sizes" if target.platform == "tpu" else "devmem-gpu-sizes"
    cache = getattr(config, "cache", None)
    directory = None
    if cache is not None:
        try:
            directory = cache.mkdir(name)
        except OSError:
            directory = None
    user_directory = user_cache_directory(user_cache, name) if user_cache is not None else None
    if isinstance(target.spec, TpuSpec):
        sizer: GpuSizer = TpuSizer(target.spec, directory, beside=True, user_cache_dir=user_directory, store_dir=store)
    else:
        sizer = GpuSizer(target.spec, directory, user_cache_dir=user_directory, store_dir=store)
    try:
        sizer.distrusted = changed_entries(store, verify) if store is not None and verify else set()
    except DevmemError as exc:
        raise pytest.UsageError(f"invalid --devmem-verify-entries: {exc}") from None
    return sizer


def user_cache_directory(root: Path, name: str) -> Path:
    """`name` in the user's cache (made where missing); a usage error naming the directory where it
    cannot be made."""
    directory = root / name
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise pytest.UsageError(
            f"invalid devmem cache directory {str(root)!r}: it cannot hold the compiled sizes ({exc.strerror or exc}); "
            "name a directory you can write, or leave --devmem-cache-dir unset to keep them in pytest's cache only"
        ) from None
    return directory
