"""Regimes set the documented JAX and TensorFlow variables and undo them; TensorFlow's own choices stay."""

from __future__ import annotations

import pytest

from pytest_devmem.model.pool.policy import Mode
from pytest_devmem.model.regime import FRAMEWORK_VARIABLES, Regime, jax_fraction_variable
from pytest_devmem.plugin.environment import restore

FRACTION = "XLA_CLIENT_MEM_FRACTION"  # the variable jaxlib 0.10 reads (XLA_PYTHON_CLIENT_MEM_FRACTION is deprecated)


@pytest.mark.parametrize(
    ("regime", "expected"),
    [
        (
            Regime.of("prealloc"),
            {"XLA_PYTHON_CLIENT_PREALLOCATE": "true", FRACTION: "0.75", "TF_FORCE_GPU_ALLOW_GROWTH": "false"},
        ),
        (
            Regime.of("fraction", 0.5),
            {"XLA_PYTHON_CLIENT_PREALLOCATE": "true", FRACTION: "0.5", "TF_FORCE_GPU_ALLOW_GROWTH": "false"},
        ),
        (
            Regime.of("platform"),
            {
                "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
                "TF_GPU_ALLOCATOR": "cuda_malloc_async",
            },
        ),
        (Regime.of("growth"), {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}),
        (
            Regime.of("growth", 0.6),
            {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", FRACTION: "0.6", "TF_FORCE_GPU_ALLOW_GROWTH": "true"},
        ),
    ],
)
def test_regime_variables(regime: Regime, expected: dict[str, str]) -> None:
    assert regime.environment() == expected
    environ = {"XLA_PYTHON_CLIENT_ALLOCATOR": "stale", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9", "PATH": "/bin"}
    previous = regime.apply(environ)
    assert {k: v for k, v in environ.items() if k in FRAMEWORK_VARIABLES} == expected
    restore(previous, environ)
    assert environ == {"XLA_PYTHON_CLIENT_ALLOCATOR": "stale", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9", "PATH": "/bin"}


def test_the_fraction_variable_is_the_one_the_installed_jaxlib_reads() -> None:
    pytest.importorskip("jaxlib")
    assert jax_fraction_variable() == FRACTION


@pytest.mark.parametrize(
    "regime",
    [
        Regime.of("prealloc"),
        Regime.of("fraction", 0.5),
        Regime.of("ondemand"),
        Regime.of("growth"),
        Regime.of("growth", 0.6),
    ],
    ids=str,
)
def test_jaxlibs_own_gpu_option_builder_accepts_every_regime(regime: Regime, monkeypatch: pytest.MonkeyPatch) -> None:
    """jaxlib/xla_client.py generate_pjrt_gpu_plugin_options: raises ValueError on both fraction
    variables (JAX then falls back to CPU); asked here under each regime's variables, on CPU."""
    xla_client = pytest.importorskip("jaxlib.xla_client")
    for name in FRAMEWORK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in regime.environment().items():
        monkeypatch.setenv(name, value)
    options = xla_client.generate_pjrt_gpu_plugin_options()
    if FRACTION in regime.environment():
        assert options["memory_fraction"] == pytest.approx(regime.fraction)
    else:  # jaxlib leaves XLA its default fraction, .75 (or none, for the platform allocator)
        assert "memory_fraction" not in options
    assert options["preallocate"] is regime.policy.preallocates
    assert options["allocator"] == ("platform" if regime.mode is Mode.ONDEMAND else "default")


def test_both_fraction_variables_are_what_jaxlib_refuses_and_a_conflict_here() -> None:
    environ = {"XLA_CLIENT_MEM_FRACTION": ".5", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}
    problems = Regime.of("fraction", 0.5).conflicts(environ)
    assert problems and "XLA_CLIENT_MEM_FRACTION=.5 and XLA_PYTHON_CLIENT_MEM_FRACTION=.5 are both set" in problems[0]


@pytest.mark.parametrize(
    ("environ", "regime", "conflict"),
    [
        (
            {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"},
            Regime.of("prealloc"),
            "XLA_PYTHON_CLIENT_MEM_FRACTION=.5 in the environment contradicts regime prealloc, which sets 0.75",
        ),
        (
            {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
            Regime.of("prealloc"),
            "XLA_PYTHON_CLIENT_PREALLOCATE=false in the environment contradicts regime prealloc, which sets true",
        ),
        (
            {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"},
            Regime.of("growth"),
            "XLA_PYTHON_CLIENT_ALLOCATOR=platform in the environment contradicts regime growth, which leaves it unset",
        ),
        ({"XLA_CLIENT_MEM_FRACTION": "0.75", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}, Regime.of("prealloc"), None),
        ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.75"}, Regime.of("growth"), None),
    ],
)
def test_user_jax_variables_that_contradict_the_regime(
    environ: dict[str, str], regime: Regime, conflict: str | None
) -> None:
    problems = regime.conflicts(environ)
    assert len(problems) == (1 if conflict else 0)
    if conflict:
        assert problems[0].startswith(conflict) and problems[0].endswith(
            "unset it or choose the regime that matches it"
        )


def test_tensorflow_variables_the_user_set_are_kept() -> None:
    environ = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    Regime.of("fraction", 0.4).apply(environ)
    assert environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert environ[FRACTION] == "0.4"


def test_tensorflow_gets_a_memory_limit_only_under_fraction() -> None:
    """prealloc leaves TensorFlow its default beside JAX's 75% (a limit of 75% more would be 150% of the device)."""
    assert Regime.of("fraction", 0.5).tensorflow_memory_limit(16 * 2**30) == 8 * 2**30
    assert Regime.of("prealloc").tensorflow_memory_limit(16 * 2**30) is None
    assert Regime.of("growth").tensorflow_memory_limit(16 * 2**30) is None
