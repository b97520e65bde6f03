"""The regime a recorded trace is replayed under on a TPU preset (`devmem replay`, `devmem plot`):
the TPU runtime's, never a GPU regime applied silently. Pure model: no frameworks, no pytest."""

from __future__ import annotations

from ..errors import InvalidSettingError
from .pool.policy import DEFAULT_PREALLOC_FRACTION, Mode, Policy
from .tpu_targets import tpu_regime_refusal, tpu_spec

__all__ = ["tpu_replay_policy"]


def tpu_replay_policy(
    device_spec: str | None, policy: Policy, mode: str | None = None, fraction: str | None = None
) -> Policy:
    """The regime a recorded trace is replayed under on `device_spec`: on a TPU preset the TPU
    runtime's (`compact` at its default is all usable HBM, as the plugin's `--devmem-mode=compact`
    there), and a GPU regime or any fraction below all of HBM (given as `--mode`/`--fraction`, or
    read from the trace's name) raises InvalidSettingError with the words of `tpu_regime_refusal`,
    as the plugin refuses them on a TPU preset. Anything else is returned as given."""
    spec = tpu_spec(device_spec)
    if spec is None:
        return policy
    if policy.mode is Mode.COMPACT and fraction is None and policy.fraction == DEFAULT_PREALLOC_FRACTION:
        return Policy(Mode.COMPACT, 1.0)  # compact at its default: all usable HBM, as the plugin's
    if policy.mode in (Mode.PREALLOC, Mode.FRACTION, Mode.GROWTH) or policy.fraction != 1.0:
        given = " ".join(f"--{name} {value}" for name, value in (("mode", mode), ("fraction", fraction)) if value)
        asked = given or f"the regime {policy.label} (from the trace's name)"
        refusal = tpu_regime_refusal(spec, asked).replace("--devmem-mode=compact", "--mode compact")
        raise InvalidSettingError(refusal)
    return policy
