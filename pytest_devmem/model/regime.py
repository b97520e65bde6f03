"""A regime: a pool policy plus the JAX and TensorFlow settings that make the frameworks follow it.

JAX reads its XLA_PYTHON_CLIENT_* variables when its backend starts, TensorFlow reads
TF_FORCE_GPU_ALLOW_GROWTH when it first touches a GPU; both are fixed for the process from then on,
which is why a test under another regime runs in a child process (see isolation.py).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from ..errors import InvalidSettingError
from .framework_rules import (
    DEPRECATED_FRACTION_VARIABLE,
    FRACTION_VARIABLE,
    FRAMEWORK_VARIABLES,
    JAX,
    RULES,
)
from .frameworks import tensorflow_fraction_limit
from .pool.policy import DEFAULT_PREALLOC_FRACTION, Mode, Policy
from .tpu_targets import tpu_regime_refusal, tpu_spec


@functools.cache
def jax_fraction_variable() -> str:
    """The one memory-fraction variable the installed jaxlib reads.

    jaxlib 0.10's `xla_client.generate_pjrt_gpu_plugin_options` reads XLA_CLIENT_MEM_FRACTION,
    falls back to the deprecated XLA_PYTHON_CLIENT_MEM_FRACTION, and raises ValueError when both
    are set (JAX then quietly runs on CPU). Older jaxlibs read only the deprecated name. The
    installed option builder's source says which it reads; it is looked at, not imported.
    """
    try:
        spec = importlib.util.find_spec("jaxlib")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        try:
            with open(os.path.join(location, "xla_client.py"), encoding="utf-8") as handle:
                if FRACTION_VARIABLE in handle.read():
                    return FRACTION_VARIABLE
        except OSError:
            continue
    return DEPRECATED_FRACTION_VARIABLE


@dataclass(frozen=True)
class Regime:
    """How one test (or a whole session) uses device memory."""

    policy: Policy

    @classmethod
    def of(cls, mode: str | Mode, fraction: object = None) -> Regime:
        return cls(Policy.of(mode, fraction))

    @property
    def label(self) -> str:
        return self.policy.label

    @property
    def mode(self) -> Mode:
        return self.policy.mode

    @property
    def fraction(self) -> float:
        return self.policy.fraction

    def environment(self, fraction_variable: str | None = None) -> dict[str, str]:
        """The JAX and TensorFlow variables this regime sets (the table in DESIGN.md).

        JAX gets exactly one fraction variable, the one its jaxlib reads. TensorFlow: `prealloc`
        leaves it its default (all free memory but the system reserve, no limit), `fraction` adds a
        memory limit through tf.config (plugin/environment.configure_tensorflow_gpus), `growth` is allow_growth
        (`TF_FORCE_GPU_ALLOW_GROWTH`, which TensorFlow matches exactly: `true` or `false`), and
        `ondemand` is TensorFlow's on-demand allocator, `TF_GPU_ALLOCATOR=cuda_malloc_async`.
        """
        name = fraction_variable or jax_fraction_variable()
        fraction = f"{self.fraction:.4g}"
        if self.mode in (Mode.PREALLOC, Mode.FRACTION, Mode.COMPACT):  # compaction is the model's: JAX preallocates
            return {"XLA_PYTHON_CLIENT_PREALLOCATE": "true", name: fraction, "TF_FORCE_GPU_ALLOW_GROWTH": "false"}
        if self.mode is Mode.ONDEMAND:
            return {
                "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
                "TF_GPU_ALLOCATOR": "cuda_malloc_async",
            }
        variables = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
        if self.fraction != DEFAULT_PREALLOC_FRACTION:  # JAX caps growth at .75 by itself
            variables[name] = fraction
        return variables

    def conflicts(self, environ: Mapping[str, str]) -> list[str]:
        """The JAX variables a user set that contradict this regime (or each other), as text.

        Both fraction variables at once is an error jaxlib raises itself; a preallocation,
        fraction or allocator that differs from the regime's would silently change what is measured.
        """
        problems = []
        if environ.get(FRACTION_VARIABLE) and environ.get(DEPRECATED_FRACTION_VARIABLE):
            problems.append(
                f"{FRACTION_VARIABLE}={environ[FRACTION_VARIABLE]} and {DEPRECATED_FRACTION_VARIABLE}={environ[DEPRECATED_FRACTION_VARIABLE]} "
                "are both set, which jaxlib refuses (JAX then runs on CPU); unset one"
            )
        wanted = self.environment(FRACTION_VARIABLE)
        for name in JAX.variables:
            value = environ.get(name)
            if not value:
                continue
            regime_value = wanted.get(FRACTION_VARIABLE if name == DEPRECATED_FRACTION_VARIABLE else name)
            if not _same_setting(name, value, regime_value, self):
                sets = f"sets {regime_value}" if regime_value is not None else "leaves it unset"
                problems.append(
                    f"{name}={value} in the environment contradicts regime {self.label}, which {sets}; unset it or choose the regime that matches it"
                )
        return problems

    def tensorflow_memory_limit(self, capacity: int) -> int | None:
        """Bytes TensorFlow's GPU memory should be limited to: only under `fraction`; else None."""
        if self.mode is Mode.FRACTION:
            return tensorflow_fraction_limit(capacity, self.fraction)
        return None

    def apply(self, environ: MutableMapping[str, str] | None = None) -> dict[str, str | None]:
        """Set this regime's variables in `environ` (os.environ by default), clearing the other JAX ones.

        TensorFlow variables the user set are kept: TensorFlow's regime comes from its own variables
        (so JAX at a fraction beside TensorFlow with TF_FORCE_GPU_ALLOW_GROWTH=true can be tested);
        the regime's TensorFlow values apply where the user set none. Returns the previous values so
        `plugin/environment.restore` can undo it.
        """
        target = os.environ if environ is None else environ
        previous = {name: target.get(name) for name in FRAMEWORK_VARIABLES}
        users = {  # a framework whose own variables win keeps those the user set
            name: value
            for rules in RULES
            if rules.user_wins
            for name in rules.variables
            if (value := previous[name]) is not None
        }
        for name in FRAMEWORK_VARIABLES:
            target.pop(name, None)
        target.update(self.environment())
        target.update(users)
        return previous

    def __str__(self) -> str:
        return self.label


TPU_RUNTIME = Regime.of(Mode.COMPACT, 1.0)
"""The TPU runtime's regime: HBM on demand, up to all the compiler says is available (the device's
capacity), defragmented when an allocation does not fit (jax-ml/jax #9064: the TPU runtime moves
live buffers). JAX does not preallocate on a TPU, so it sets no variable (plugin/settings.py
`sets_framework_variables`)."""

GPU_ONLY_MODES = (Mode.PREALLOC, Mode.FRACTION, Mode.GROWTH)
"""JAX's and TensorFlow's GPU allocator regimes: no TPU runtime has them."""


def on_tpu(regime: Regime | None) -> Regime | None:
    """A regime asked for on a TPU preset as the TPU runtime has it: `compact` over all usable HBM
    (a GPU regime is refused before this: see tpu_targets.tpu_regime_refusal)."""
    if regime is not None and regime.mode is Mode.COMPACT and regime.fraction == DEFAULT_PREALLOC_FRACTION:
        return TPU_RUNTIME
    return regime


def _same_setting(name: str, value: str, regime_value: str | None, regime: Regime) -> bool:
    """Whether a user's value says what the regime's value says (as jaxlib parses both)."""
    if name.endswith("MEM_FRACTION"):  # JAX's fraction applies whether or not the regime spells it out
        try:
            return abs(float(value) - regime.fraction) < 1e-9
        except ValueError:
            return False
    if name == "XLA_PYTHON_CLIENT_PREALLOCATE":
        return (value not in ("false", "False", "0")) == (regime_value not in ("false", None))
    return regime_value is not None and value.lower() == regime_value.lower()


def tpu_replay_policy(
    device_spec: str | None, policy: Policy, mode: str | None = None, fraction: str | None = None
) -> Policy:
    """The regime a recorded trace is replayed under on `device_spec`: on a TPU preset the TPU
    runtime's (`compact` at its default is all usable HBM, as the plugin's `--devmem-mode=compact`
    there), and a GPU regime or any fraction below all of HBM (given as `--mode`/`--fraction`, or
    read from the trace's name) raises InvalidSettingError with the words of `tpu_regime_refusal`,
    as the plugin refuses them on a TPU preset (`devmem replay`, `devmem plot`: the TPU runtime's
    regime, never a GPU regime applied silently). Anything else is returned as given."""
    spec = tpu_spec(device_spec)
    if spec is None:
        return policy
    if policy.mode is Mode.COMPACT and fraction is None and policy.fraction == DEFAULT_PREALLOC_FRACTION:
        return TPU_RUNTIME.policy  # compact at its default: all usable HBM, as the plugin's
    if policy.mode in GPU_ONLY_MODES or policy.fraction != 1.0:
        given = " ".join(f"--{name} {value}" for name, value in (("mode", mode), ("fraction", fraction)) if value)
        asked = given or f"the regime {policy.label} (from the trace's name)"
        raise InvalidSettingError(
            tpu_regime_refusal(spec, asked, "Leave --mode and --fraction out, or use --mode compact")
        )
    return policy
