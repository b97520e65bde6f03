"""A regime: a pool policy plus the JAX and TensorFlow settings that make the frameworks follow it.

JAX reads its XLA_PYTHON_CLIENT_* variables when its backend starts, TensorFlow reads
TF_FORCE_GPU_ALLOW_GROWTH when it first touches a GPU; both are fixed for the process from then on,
which is why a test under another regime runs in a child process (see isolation.py).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Mapping, MutableMapping

from .pool.policy import Mode, Policy

FRAMEWORK_VARIABLES = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_ENABLE_GPU_GARBAGE_COLLECTION",
)
"""Every variable a regime may set; the others are removed so no stale setting leaks in."""


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

    def environment(self) -> dict[str, str]:
        """The JAX and TensorFlow variables this regime sets (the table in DESIGN.md)."""
        fraction = f"{self.fraction:.4g}"
        if self.mode in (Mode.PREALLOC, Mode.FRACTION):
            return {
                "XLA_PYTHON_CLIENT_PREALLOCATE": "true",
                "XLA_PYTHON_CLIENT_MEM_FRACTION": fraction,
                "XLA_CLIENT_MEM_FRACTION": fraction,
                "TF_FORCE_GPU_ALLOW_GROWTH": "false",
            }
        if self.mode is Mode.ONDEMAND:
            return {
                "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
                "TF_FORCE_GPU_ALLOW_GROWTH": "true",
                "TF_ENABLE_GPU_GARBAGE_COLLECTION": "true",
            }
        variables = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
        if self.fraction < 1.0:
            variables["XLA_PYTHON_CLIENT_MEM_FRACTION"] = variables["XLA_CLIENT_MEM_FRACTION"] = fraction
        return variables

    def apply(self, environ: MutableMapping[str, str] | None = None) -> dict[str, str | None]:
        """Set this regime's variables in `environ` (os.environ by default), clearing the other JAX ones.

        TensorFlow variables the user set are kept: TensorFlow's regime comes from its own variables
        (so JAX at a fraction beside TensorFlow with TF_FORCE_GPU_ALLOW_GROWTH=true can be tested);
        the regime's TensorFlow values apply where the user set none. Returns the previous values so
        `restore` can undo it.
        """
        target = os.environ if environ is None else environ
        previous = {name: target.get(name) for name in FRAMEWORK_VARIABLES}
        user_tensorflow = {name: value for name, value in previous.items() if name.startswith("TF_") and value is not None}
        for name in FRAMEWORK_VARIABLES:
            target.pop(name, None)
        target.update(self.environment())
        target.update(user_tensorflow)
        return previous

    def tensorflow_memory_limit(self, capacity: int) -> int | None:
        """Bytes TensorFlow's GPU memory should be limited to, or None where it grows freely."""
        if self.mode in (Mode.PREALLOC, Mode.FRACTION):
            return int(capacity * self.fraction)
        return None

    def __str__(self) -> str:
        return self.label


def restore(previous: Mapping[str, str | None], environ: MutableMapping[str, str] | None = None) -> None:
    """Put back the variables `Regime.apply` replaced."""
    target = os.environ if environ is None else environ
    for name, value in previous.items():
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value


def jax_backend_started() -> bool:
    """True once JAX has created a backend here, after which its memory settings no longer change."""
    if "jax" not in sys.modules:
        return False
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def configure_tensorflow_gpus(regime: Regime, capacity: int) -> str | None:
    """Apply the regime to TensorFlow's GPUs through tf.config, if TensorFlow is imported and has GPUs.

    `capacity` is the GPU's total memory (TensorFlow cannot tell it before initialising).
    Returns a warning when TensorFlow had already initialised its GPUs (the settings then cannot change).
    Does nothing, and imports nothing, when TensorFlow is not loaded.
    """
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None
    gpus = tf.config.list_physical_devices("GPU")
    try:
        for gpu in gpus:
            if regime.mode in (Mode.GROWTH, Mode.ONDEMAND):
                tf.config.experimental.set_memory_growth(gpu, True)
            else:
                limit = regime.tensorflow_memory_limit(capacity)
                if limit:
                    tf.config.set_logical_device_configuration(
                        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit // 2**20)]
                    )
    except RuntimeError as exc:  # "Physical devices cannot be modified after being initialized"
        return f"TensorFlow had already initialised its GPUs, so regime {regime.label} could not be applied to it: {exc}"
    return None
