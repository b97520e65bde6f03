"""The shared-device model: frameworks and processes on one device, and the fixes it computes."""

from __future__ import annotations

import pytest

from pytest_devmem.shared import (
    FrameworkSetup,
    check_sharing,
    jax_setup_from_env,
    simulate,
    tensorflow_setup_from_env,
    tensorflow_system_reserve,
)
from pytest_devmem.workers import plan_workers, worker_index
from pytest_devmem.regime import Regime

MiB, GiB = 2**20, 2**30


def jax(fraction: float = 0.75, label: str = "") -> FrameworkSetup:
    return FrameworkSetup("jax", "prealloc", fraction, label=label)


def test_jax_prealloc_and_tensorflow_default_fail_with_numbers_and_computed_fixes() -> None:
    verdict = check_sharing(16 * GiB, [(jax(), 2 * GiB), (tensorflow_setup_from_env({}), 3 * GiB)], "sim:16GiB")
    assert not verdict.fits and verdict.phase == "peak"
    tf = verdict.outcomes[1]
    assert tf.reserved == 4 * GiB - 1536 * MiB  # what JAX left, less TensorFlow's system reserve
    assert "out of memory at its peak: needs 3.00 GiB, its pool can give 2.50 GiB" in tf.problem
    assert verdict.fixes == ["set XLA_PYTHON_CLIENT_MEM_FRACTION=0.71", 'hide the GPU from TensorFlow (tf.config.set_visible_devices([], "GPU"))']
    message = verdict.message()
    assert "JAX and TensorFlow cannot share sim:16GiB (16.00 GiB): out of memory at peak" in message
    assert "JAX (prealloc, XLA_PYTHON_CLIENT_MEM_FRACTION=0.75): reserves 12.00 GiB at start-up, peak 2.00 GiB" in message


def test_the_computed_fraction_is_the_largest_that_fits() -> None:
    tf = (tensorflow_setup_from_env({}), 3 * GiB)
    assert simulate(16 * GiB, [(jax(0.71), 2 * GiB), tf]).fits
    assert not simulate(16 * GiB, [(jax(0.72), 2 * GiB), tf]).fits


def test_jax_at_point_four_with_tensorflow_growth_fits() -> None:
    setups = [(jax_setup_from_env({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".4"}), 2 * GiB), (tensorflow_setup_from_env({"TF_FORCE_GPU_ALLOW_GROWTH": "true"}), 3 * GiB)]
    verdict = check_sharing(16 * GiB, setups)
    assert verdict.fits and verdict.fixes == []
    assert "fit together" in verdict.message()


def test_three_jax_processes_at_three_quarters_fail_at_start_up_and_the_split_fits() -> None:
    crowded = check_sharing(16 * GiB, [(jax(0.75, f"JAX process {i}"), GiB) for i in (1, 2, 3)])
    assert crowded.phase == "start-up"
    assert "could preallocate only" in crowded.outcomes[1].problem
    assert crowded.fixes[0] == "set XLA_PYTHON_CLIENT_MEM_FRACTION=0.33 in each of the JAX processes"
    split = check_sharing(16 * GiB, [(jax(0.25, f"JAX process {i}"), GiB) for i in (1, 2, 3)])
    assert split.fits


def test_tensorflow_first_starves_jax_preallocation() -> None:
    verdict = simulate(16 * GiB, [(tensorflow_setup_from_env({}), GiB), (jax(), GiB)])
    assert verdict.phase == "start-up"
    assert "could preallocate only" in verdict.outcomes[1].problem


def test_no_setting_fits_says_so() -> None:
    verdict = check_sharing(GiB, [(jax(), 900 * MiB), (tensorflow_setup_from_env({}), 900 * MiB)])
    assert not verdict.fits and verdict.fixes == []
    assert "no setting makes them fit" in verdict.message()


@pytest.mark.parametrize(
    ("available", "capability", "environ", "reserve"),
    [(GiB, 8, {}, 225 * MiB), (40 * GiB, 6, {}, 500 * MiB), (40 * GiB, 7, {}, 1050 * MiB), (40 * GiB, 8, {}, 1536 * MiB), (80 * GiB, 9, {}, 1800 * MiB), (40 * GiB, 8, {"TF_DEVICE_MIN_SYS_MEMORY_IN_MB": "64"}, 64 * MiB)],
)
def test_tensorflow_system_reserve(available: int, capability: int, environ: dict[str, str], reserve: int) -> None:
    assert tensorflow_system_reserve(available, capability, environ) == reserve


@pytest.mark.parametrize(
    ("environ", "mode", "fraction"),
    [({}, "prealloc", 0.75), ({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}, "prealloc", 0.5), ({"XLA_CLIENT_MEM_FRACTION": ".3"}, "prealloc", 0.3),
     ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, "growth", 0.75), ({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, "ondemand", 1.0)],
)
def test_jax_setup_from_its_variables(environ: dict[str, str], mode: str, fraction: float) -> None:
    setup = jax_setup_from_env(environ)
    assert (setup.mode, setup.fraction) == (mode, fraction)


def test_tensorflow_setup_from_its_variables() -> None:
    assert tensorflow_setup_from_env({}).mode == "default"
    assert tensorflow_setup_from_env({"TF_FORCE_GPU_ALLOW_GROWTH": "true"}).mode == "growth"
    assert tensorflow_setup_from_env({}, limit=GiB).mode == "limit"
    limited = check_sharing(16 * GiB, [(jax(0.5), GiB), (tensorflow_setup_from_env({}, limit=10 * GiB), GiB)])
    assert limited.phase == "start-up" and "could reserve only" in limited.outcomes[1].problem


def test_worker_plans() -> None:
    prealloc = Regime.of("prealloc")
    split = plan_workers(prealloc, False, 0, 3, 0, False)
    assert split.regime == Regime.of("fraction", 0.25) and "0.75 split 3 ways" in split.note
    chosen = plan_workers(Regime.of("fraction", 0.75), True, 1, 3, 0, False)
    assert chosen.regime == Regime.of("fraction", 0.75)
    assert "3 pytest-xdist workers x fraction 0.75 = 2.25 of one device: they cannot all fit; use --devmem-fraction=0.33" in chosen.warning
    gpus = plan_workers(prealloc, False, 5, 8, 4, True)
    assert gpus.cuda_visible_devices == "1" and gpus.regime == prealloc
    assert plan_workers(prealloc, False, 0, 1, 0, False).regime == prealloc
    assert worker_index("gw12") == 12
