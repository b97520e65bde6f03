"""The simulated TPUs: one `TpuSpec` per preset, with its HBM and the topology N JAX devices form.

Each JAX device a test uses stands for one TPU device as libtpu's compile-only topologies give them
(`jax.experimental.topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu")`): one per
chip on v5e, v5p and v6e; on v4, one per TensorCore (two per chip: libtpu 0.0.42's compile-only v4
topologies have two devices per chip, each with half the chip's HBM). N devices are compiled for
that generation's topology of N devices; a count with no such topology is refused.

HBM per chip is the Cloud TPU data sheet's (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e: v4
32 GiB, v5e 16 GiB, v5p 95 GiB, v6e 32 GiB). The usable part is what the TPU compiler itself states
when it refuses a program for HBM ("... exceeds available HBM (15.75G)"), measured with libtpu
0.0.42.1 (jax[tpu] 0.10.2) by `scripts/tpu_figures.py --hbm` and checked against the installed
compiler by tests/capture/test_tpu_compile.py. Pure data: no framework is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidSettingError

GiB = 2**30
MiB = 2**20

MEASURED_WITH = "libtpu 0.0.42.1"
"""The libtpu whose compiler stated the usable HBM figures below."""


@dataclass(frozen=True)
class TpuSpec:
    """One TPU generation, as the presets name it and libtpu compiles for it."""

    preset: str  # the name users type after `sim:`
    generation: str  # libtpu's topology prefix: "v5e" in "v5e:2x2"
    description: str  # what users call it: "TPU v5e"
    hbm_per_chip: int  # data sheet
    devices_per_chip: int  # JAX devices per chip in libtpu's compile-only topology
    usable_bytes: int  # per device: the compiler's "available HBM"
    usable_text: str  # that figure as the compiler prints it
    topologies: tuple[tuple[int, str], ...]  # (devices, topology name), smallest first

    @property
    def hbm_per_device(self) -> int:
        return self.hbm_per_chip // self.devices_per_chip

    @property
    def memory_per_device(self) -> int:
        """What one JAX device of the target holds: no size the compiler states for it is larger."""
        return self.hbm_per_device

    def topology_for(self, devices: int) -> tuple[str, tuple[int, int, int] | None, int]:
        """(topology name, chips_per_host_bounds or None, devices to take from it) for `devices`
        JAX devices; InvalidSettingError naming the counts this generation has."""
        for count, name in self.topologies:
            if count == devices:
                return name, (1, 1, 1) if count <= self.devices_per_chip else None, devices
        if self.devices_per_chip > 1 and 0 < devices < self.devices_per_chip:  # part of one chip: its first cores
            return self.topologies[0][1], (1, 1, 1), devices
        counts = ", ".join(str(count) for count, _ in self.topologies)
        raise InvalidSettingError(
            f"{self.description} has no topology of {devices} device(s): a test may use {counts} JAX devices on sim:{self.preset}"
        )


def _usable(text: str) -> int:
    """`15.75G` as the TPU compiler prints it (XLA's HumanReadableNumBytes: powers of 1024) in bytes."""
    return round(float(text.rstrip("G")) * GiB)


_TWO_D = ((1, "1x1"), (4, "2x2"), (8, "2x4"), (16, "4x4"), (32, "4x8"), (64, "8x8"), (128, "8x16"), (256, "16x16"))
_THREE_D = (
    (1, "1x1x1"),
    (4, "2x2x1"),
    (8, "2x2x2"),
    (16, "2x2x4"),
    (32, "2x4x4"),
    (64, "4x4x4"),
    (128, "4x4x8"),
    (256, "4x8x8"),
)


def _spec(
    preset: str,
    generation: str,
    description: str,
    hbm_gib: int,
    devices_per_chip: int,
    usable: str,
    shapes: tuple[tuple[int, str], ...],
) -> TpuSpec:
    return TpuSpec(
        preset=preset,
        generation=generation,
        description=description,
        hbm_per_chip=hbm_gib * GiB,
        devices_per_chip=devices_per_chip,
        usable_bytes=_usable(usable),
        usable_text=usable,
        topologies=tuple((chips * devices_per_chip, f"{generation}:{shape}") for chips, shape in shapes),
    )


TPU_SPECS: dict[str, TpuSpec] = {
    spec.preset: spec
    for spec in (
        # preset, topology prefix, name, HBM GiB per chip (data sheet), devices per chip, available HBM per device (compiler)
        _spec("TPU-v4", "v4", "TPU v4", 32, 2, "15.25G", _THREE_D),
        _spec("TPU-v5e", "v5e", "TPU v5e", 16, 1, "15.75G", _TWO_D),
        _spec("TPU-v5p", "v5p", "TPU v5p", 95, 1, "95.74G", _THREE_D),
        _spec("TPU-v6e", "v6e", "TPU v6e", 32, 1, "31.25G", _TWO_D),
    )
}
"""The TPU presets: `sim:TPU-v4`, `sim:TPU-v5e`, `sim:TPU-v5p`, `sim:TPU-v6e`."""


def tpu_spec(preset: object) -> TpuSpec | None:
    """The TPU a preset name (any case, with or without `sim:`) names; None for anything else."""
    if not isinstance(preset, str):
        return None
    text = preset.strip().lower().removeprefix("sim:")
    return next((spec for name, spec in TPU_SPECS.items() if name.lower() == text), None)


def tpu_regime_refusal(spec: TpuSpec, asked: str) -> str:
    """Why a GPU regime cannot apply to a TPU: what the TPU runtime does instead."""
    return (
        f"{asked} is a GPU regime, and sim:{spec.preset} is a {spec.description}: JAX does not preallocate on a TPU and "
        "XLA_PYTHON_CLIENT_* do not apply there; the TPU runtime takes HBM on demand and defragments it when an "
        "allocation does not fit, which the `compact` regime models (the default on a TPU preset; `ondemand` leaves "
        "out the defragmentation). Leave the mode and fraction out, or use --devmem-mode=compact"
    )


def tpu_min_fraction_refusal(spec: TpuSpec, asked: str = "--devmem-find-min-fraction") -> str:
    """Why the search for the smallest JAX memory fraction has no meaning on a TPU, and what to ask
    instead: the fraction is what JAX preallocates on a GPU (XLA_CLIENT_MEM_FRACTION), and JAX sets
    no fraction on a TPU (jax-ml/jax #9064: HBM is taken on demand, defragmented when needed)."""
    return (
        f"{asked} searches the smallest JAX memory fraction (what XLA_CLIENT_MEM_FRACTION preallocates on a GPU), "
        f"and sim:{spec.preset} is a {spec.description}: JAX does not preallocate on a TPU and no fraction applies there; "
        "the TPU runtime takes HBM on demand and defragments it when an allocation does not fit. What a test needs "
        f"on a chip is its peak in use (each record's peak_bytes_in_use, against {spec.usable_text} of usable HBM per "
        "device); to see whether it fits a chip with less HBM, use --devmem-what-if=SIZE, which replays each test "
        "under the TPU runtime's regime (defragmenting) on a chip of SIZE. Leave --devmem-find-min-fraction out"
    )


def require_count(spec: TpuSpec, devices: int) -> None:
    """InvalidSettingError where `devices` JAX devices form no topology of this generation."""
    if devices <= 0:
        raise InvalidSettingError(f"invalid device count {devices!r} for {spec.description}: must be 1 or more")
    spec.topology_for(devices)


__all__ = [
    "MEASURED_WITH",
    "TPU_SPECS",
    "TpuSpec",
    "require_count",
    "tpu_min_fraction_refusal",
    "tpu_regime_refusal",
    "tpu_spec",
]
