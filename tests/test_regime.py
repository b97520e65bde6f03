"""Regimes set the documented JAX and TensorFlow variables and undo them; TensorFlow's own choices stay."""

from __future__ import annotations

import pytest

from pytest_devmem.regime import FRAMEWORK_VARIABLES, Regime, restore
from pytest_devmem.shared import SharingVerdict, check_sharing, jax_setup_from_env, tensorflow_setup_from_env


@pytest.mark.parametrize(
    ("regime", "expected"),
    [
        (Regime.of("prealloc"), {"XLA_PYTHON_CLIENT_PREALLOCATE": "true", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.75", "XLA_CLIENT_MEM_FRACTION": "0.75", "TF_FORCE_GPU_ALLOW_GROWTH": "false"}),
        (Regime.of("fraction", 0.5), {"XLA_PYTHON_CLIENT_PREALLOCATE": "true", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5", "XLA_CLIENT_MEM_FRACTION": "0.5", "TF_FORCE_GPU_ALLOW_GROWTH": "false"}),
        (Regime.of("platform"), {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "TF_FORCE_GPU_ALLOW_GROWTH": "true", "TF_ENABLE_GPU_GARBAGE_COLLECTION": "true"}),
        (Regime.of("growth"), {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}),
        (Regime.of("growth", 0.6), {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.6", "XLA_CLIENT_MEM_FRACTION": "0.6", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}),
    ],
)
def test_regime_variables(regime: Regime, expected: dict[str, str]) -> None:
    assert regime.environment() == expected
    environ = {"XLA_PYTHON_CLIENT_ALLOCATOR": "stale", "PATH": "/bin"}
    previous = regime.apply(environ)
    assert {k: v for k, v in environ.items() if k in FRAMEWORK_VARIABLES} == expected
    restore(previous, environ)
    assert environ == {"XLA_PYTHON_CLIENT_ALLOCATOR": "stale", "PATH": "/bin"}


def test_tensorflow_variables_the_user_set_are_kept() -> None:
    environ = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    Regime.of("fraction", 0.4).apply(environ)
    assert environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.4"


def test_tensorflow_memory_limit() -> None:
    assert Regime.of("fraction", 0.5).tensorflow_memory_limit(16 * 2**30) == 8 * 2**30
    assert Regime.of("growth").tensorflow_memory_limit(16 * 2**30) is None


def test_real_oom_message_offers_the_settings_even_when_the_model_fitted() -> None:
    verdict: SharingVerdict = check_sharing(80 * 2**30, [(jax_setup_from_env({}), 2**20), (tensorflow_setup_from_env({}), 2**20)], "cuda:0 (NVIDIA H100)")
    assert verdict.fits
    text = verdict.real_oom_message()
    assert text.startswith("JAX and TensorFlow cannot share cuda:0 (NVIDIA H100) (80.00 GiB): a real out-of-memory error")
    assert "set TF_FORCE_GPU_ALLOW_GROWTH=true" in text and "XLA_PYTHON_CLIENT_PREALLOCATE=false" in text
