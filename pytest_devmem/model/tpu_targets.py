"""The simulated TPUs: one `TpuSpec` per preset, with its HBM and the topology N JAX devices form.

Each JAX device a test uses stands for one device of that generation as `jax.devices()` shows it on
a TPU VM, and as libtpu's compile-only topologies give it
(`jax.experimental.topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu")`): one per
chip on every generation. v5e and v6e chips have one TensorCore. v4 and v5p chips have two, which a
TPU VM runs as one device ("megacore": JAX's `ChipVersion.supports_megacore`, jax/_src/pallas/mosaic/
tpu_info.py, is true for v4 and v5p only, and jax/_src/mesh_utils.py makes meshes on TPUs after v3 of
one device per chip, "megacore" mode; jax-ml/jax discussion #36155: "On TPU v4, a JAX logical device
is normally configured as a Megacore containing two physical TensorCores"). libtpu's compile-only v4
topologies default to the split mode, two devices per chip of half its HBM each; the megacore chip
config (`chip_config_name="megacore"`) gives one device per chip with all of it, as the TPU VM does.

N devices are compiled for the generation's slice of N chips where there is one (1, 4, 8, 16...:
`v5e:2x2`, `v4:2x2x1`), else for a line of N chips on one host (`v5e:2x1` with
`chips_per_host_bounds=(2, 1, 1)`: a 2-device mesh inside a host's 4 chips), as libtpu forms one for
any count up to `MAX_CHIPS_PER_HOST`; a count it cannot form is refused, naming those it can.

HBM per chip is the Cloud TPU data sheet's (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e: v4
32 GiB, v5e 16 GiB, v5p 95 GiB, v6e 32 GiB). The usable part is what the TPU compiler itself states
for that device when it refuses a program for HBM ("... exceeds available HBM (15.75G)"), measured
with libtpu 0.0.42.1 (jax[tpu] 0.10.2) by `scripts/tpu_figures.py --hbm` and checked against the
installed compiler by tests/capture/test_tpu_compile.py. Pure data: no framework is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidSettingError

GiB = 2**30
MiB = 2**20

MEASURED_WITH = "libtpu 0.0.42.1"
"""The libtpu whose compiler stated the usable HBM figures below."""

MEGACORE = "megacore"
"""libtpu's chip config of one device per chip over both TensorCores (v4, v5p), as a TPU VM runs them."""

MAX_CHIPS_PER_HOST = 4096
"""The most chips libtpu 0.0.42.1 puts on one host of a compile-only topology (`v5e:4097x1` with
`chips_per_host_bounds=(4097, 1, 1)`: "INVALID_ARGUMENT: Invalid chips per host")."""


@dataclass(frozen=True)
class TpuTopology:
    """What libtpu's `get_topology_desc` is asked for N devices of one generation."""

    name: str  # "v5e:2x2"
    chips_per_host_bounds: tuple[int, int, int] | None  # None: libtpu's default (2x2x1)
    chip_config_name: str | None  # "megacore" on v4 and v5p; None: the generation's default

    def options(self) -> dict[str, object]:
        """The keyword arguments of `get_topology_desc` beside the name and platform."""
        options: dict[str, object] = {}
        if self.chips_per_host_bounds is not None:
            options["chips_per_host_bounds"] = self.chips_per_host_bounds
        if self.chip_config_name is not None:
            options["chip_config_name"] = self.chip_config_name
        return options


@dataclass(frozen=True)
class TpuSpec:
    """One TPU generation, as the presets name it and libtpu compiles for it."""

    preset: str  # the name users type after `sim:`
    generation: str  # libtpu's topology prefix: "v5e" in "v5e:2x2"
    description: str  # what users call it: "TPU v5e"
    hbm_per_chip: int  # data sheet
    megacore: bool  # two TensorCores run as one device (v4, v5p): libtpu's "megacore" chip config
    usable_bytes: int  # per device (a chip): the compiler's "available HBM"
    usable_text: str  # that figure as the compiler prints it
    slices: tuple[tuple[int, str], ...]  # (chips, shape): the generation's slices, smallest first

    devices_per_chip = 1
    """JAX devices per chip on a TPU VM: one on every generation (v4 and v5p in megacore)."""

    @property
    def hbm_per_device(self) -> int:
        return self.hbm_per_chip // self.devices_per_chip

    @property
    def chip_config_name(self) -> str | None:
        return MEGACORE if self.megacore else None

    @property
    def topologies(self) -> tuple[tuple[int, str], ...]:
        """(devices, topology name) of the generation's slices."""
        return tuple((chips, f"{self.generation}:{shape}") for chips, shape in self.slices)

    def topology_for(self, devices: int) -> TpuTopology:
        """The topology `devices` JAX devices are compiled for: the generation's slice of that many
        chips, else a line of that many chips on one host; InvalidSettingError where libtpu forms
        none (`counts_text` names those it does)."""
        if not isinstance(devices, int) or isinstance(devices, bool) or devices <= 0:
            raise InvalidSettingError(f"invalid device count {devices!r} for {self.description}: must be 1 or more")
        for chips, shape in self.slices:
            if chips == devices:
                bounds = (1, 1, 1) if chips == 1 else None
                return TpuTopology(f"{self.generation}:{shape}", bounds, self.chip_config_name)
        if devices > MAX_CHIPS_PER_HOST:
            raise InvalidSettingError(self.no_topology(devices))
        line = "x".join([str(devices)] + ["1"] * (self.dimensions - 1))
        return TpuTopology(f"{self.generation}:{line}", (devices, 1, 1), self.chip_config_name)

    @property
    def dimensions(self) -> int:
        """2 for the 2D tori (v5e, v6e), 3 for the 3D ones (v4, v5p), as libtpu names their shapes."""
        return self.slices[0][1].count("x") + 1

    def counts_text(self) -> str:
        """The device counts libtpu forms a topology of for this generation, in words."""
        slices = ", ".join(f"{chips} ({self.generation}:{shape})" for chips, shape in self.slices)
        return f"1 to {MAX_CHIPS_PER_HOST} (the slice of that many chips where there is one: {slices}; else a line of chips on one host)"

    def no_topology(self, devices: int, why: str = "") -> str:
        """Why `devices` JAX devices cannot be sized for this generation, and the counts that can."""
        said = f" ({why})" if why else ""
        return (
            f"{self.description} has no topology of {devices} devices{said}: a test under sim:{self.preset} may run a "
            f"program on {self.counts_text()} JAX devices"
        )

    @property
    def memory_per_device(self) -> int:
        """What one JAX device of the target holds: no size the compiler states for it is larger."""
        return self.hbm_per_device


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
    megacore: bool,
    usable: str,
    slices: tuple[tuple[int, str], ...],
) -> TpuSpec:
    return TpuSpec(
        preset=preset,
        generation=generation,
        description=description,
        hbm_per_chip=hbm_gib * GiB,
        megacore=megacore,
        usable_bytes=_usable(usable),
        usable_text=usable,
        slices=slices,
    )


TPU_SPECS: dict[str, TpuSpec] = {
    spec.preset: spec
    for spec in (
        # preset, topology prefix, name, HBM GiB per chip (data sheet), megacore, available HBM per chip (compiler)
        _spec("TPU-v4", "v4", "TPU v4", 32, True, "30.75G", _THREE_D),
        _spec("TPU-v5e", "v5e", "TPU v5e", 16, False, "15.75G", _TWO_D),
        _spec("TPU-v5p", "v5p", "TPU v5p", 95, True, "95.74G", _THREE_D),
        _spec("TPU-v6e", "v6e", "TPU v6e", 32, False, "31.25G", _TWO_D),
    )
}
"""The TPU presets: `sim:TPU-v4`, `sim:TPU-v5e`, `sim:TPU-v5p`, `sim:TPU-v6e`."""


def tpu_spec(preset: object) -> TpuSpec | None:
    """The TPU a preset name (any case, with or without `sim:`) names; None for anything else."""
    if not isinstance(preset, str):
        return None
    text = preset.strip().lower().removeprefix("sim:")
    return next((spec for name, spec in TPU_SPECS.items() if name.lower() == text), None)


def tpu_regime_refusal(
    spec: TpuSpec, asked: str, instead: str = "Leave the mode and fraction out, or use --devmem-mode=compact"
) -> str:
    """Why a GPU regime cannot apply to a TPU: what the TPU runtime does instead, and what to write
    (`instead`: in the place the regime was asked for)."""
    return (
        f"{asked} is a GPU regime, and sim:{spec.preset} is a {spec.description}: JAX does not preallocate on a TPU and "
        "XLA_PYTHON_CLIENT_* do not apply there; the TPU runtime takes HBM on demand and defragments it when an "
        "allocation does not fit, which the `compact` regime models (the default on a TPU preset; `ondemand` models "
        f"no fragmentation at all). {instead}"
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
