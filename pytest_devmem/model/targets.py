"""The other targets a run measures its tests on (`--devmem-targets`): which simulated devices they
are, and the regime a test runs under on each. Pure rules: no pytest, no framework.

A target is a simulated device as `--devmem-device` names one (`sim:SIZE` or `sim:PRESET`): its
capacity, and, for a GPU or TPU preset, the compile that sizes JAX's executables for it. A real GPU
is no target: the session's own device is the only one a run holds.
"""

from __future__ import annotations

from ..errors import InvalidSettingError
from .device import PRESETS, open_simulated
from .regime import TPU_RUNTIME, Regime
from .tpu_targets import TPU_SPECS

TPU_PREFIX = "TPU-"
"""Presets whose name starts so are TPU chips (`sim:TPU-v5e`): their runtime's regime is `compact`."""

TARGETS_HELP = "a comma-separated list of simulated devices: sim:SIZE (e.g. sim:16GiB) or sim:PRESET"


def allowed_targets() -> str:
    """What a target may be, with the presets known now (GPU and, where present, TPU ones)."""
    return f"{TARGETS_HELP} ({', '.join([*PRESETS, *TPU_SPECS])})"


def parse_targets(value: str) -> tuple[str, ...]:
    """`sim:H100-80GB, sim:t4,sim:16GiB` -> ("sim:H100-80GB", "sim:T4", "sim:16GiB"): each target
    by its device's own name, in the order given; an empty value is no target. InvalidSettingError
    naming the bad entry and what is allowed: not a simulated device, unknown, or given twice."""
    names: list[str] = []
    for entry in (part.strip() for part in str(value).split(",")):
        if not entry:
            continue
        if not entry.lower().startswith("sim"):
            raise InvalidSettingError(
                f"invalid devmem target {entry!r}: a target is simulated (the session's own device is --devmem-device); allowed: {allowed_targets()}"
            )
        try:
            device = open_simulated(entry)
        except InvalidSettingError as exc:
            raise InvalidSettingError(f"invalid devmem target {entry!r}: {exc}; allowed: {allowed_targets()}") from None
        if device.name in names:
            raise InvalidSettingError(f"invalid devmem targets {value!r}: {device.name} is given twice")
        names.append(device.name)
    return tuple(names)


def is_tpu(target: str) -> bool:
    """`sim:TPU-v5e` is a TPU chip; `sim:H100-80GB` and `sim:16GiB` are not."""
    return target.removeprefix("sim:").upper().startswith(TPU_PREFIX.upper())


def regime_on_target(target: str, regime: Regime) -> Regime:
    """The regime a test runs under on `target`, given its own (the session's, or its marker's).

    A TPU has one regime, its runtime's: HBM taken on demand and defragmented when an allocation
    does not fit (the `compact` pool; JAX does not preallocate on a TPU). Every other target keeps
    the test's regime. Extend here for a device kind with a regime of its own."""
    if is_tpu(target):
        return TPU_RUNTIME  # compact over all usable HBM: a TPU preset refuses any other fraction
    return regime
