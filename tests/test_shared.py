"""The shared-device model: frameworks and processes on one device, started in the order they
really allocate (tensorflow gpu_device.cc, xla gpu_helpers.cc and bfc_allocator.cc), and the fixes
it proves by simulating them."""

from __future__ import annotations

import pytest

from pytest_devmem.model.trace import TraceEvent
from pytest_devmem.model.regime import Regime
from pytest_devmem.model.sharing import (
    DEFAULT_CUDA_CONTEXT_BYTES,
    FrameworkSetup,
    Participant,
    check_sharing,
    jax_setup_from_env,
    simulate,
    tensorflow_memory_limit,
    tensorflow_setup_from_env,
    tensorflow_system_reserve,
)
from pytest_devmem.plugin.workers import plan_workers, worker_index

MiB, GiB = 2**20, 2**30
TF_DEFAULT = tensorflow_setup_from_env({})


def jax(fraction: float = 0.75, label: str = "") -> FrameworkSetup:
    return FrameworkSetup("jax", "prealloc", fraction, label=label)


def tf_first_then_jax(tf_setup: FrameworkSetup = TF_DEFAULT, jax_setup: FrameworkSetup | None = None, jax_needs: int = 2 * GiB) -> list[Participant]:
    """A tf.data pipeline (64 MiB) before a JAX step that needs `jax_needs`, in one process."""
    return [Participant.holding(tf_setup, 64 * MiB, at=0.0), Participant.holding(jax_setup or jax(), jax_needs, at=1.0)]


def test_tensorflow_first_on_4gib_starves_jax_and_the_proven_fix_is_tensorflow_growth() -> None:
    verdict = check_sharing(4 * GiB, tf_first_then_jax(), "sim:4GiB")
    assert not verdict.fits and verdict.failed == "JAX"
    assert verdict.order == ["TensorFlow", "JAX"]
    tensorflow, jax_outcome = verdict.outcomes
    # 4 GiB less the 512 MiB context leaves 3.5 GiB; TensorFlow keeps 1536 MiB (compute capability 8) and takes 2 GiB
    assert tensorflow.limit == tensorflow.reserved == 2 * GiB
    # JAX asks 75% of the total, backs off by x0.9 to what is left (1.5 GiB), and runs on: no failure yet
    assert jax_outcome.asked == 3 * GiB and 1.3 * GiB < jax_outcome.reserved <= 1.5 * GiB
    assert "out of memory allocating 2.00 GiB" in jax_outcome.problem and "the other frameworks held 2.00 GiB" in jax_outcome.problem
    assert verdict.fixes == ["set TF_FORCE_GPU_ALLOW_GROWTH=true", 'hide the GPU from TensorFlow (tf.config.set_visible_devices([], "GPU"))']
    assert simulate(4 * GiB, tf_first_then_jax(tensorflow_setup_from_env({"TF_FORCE_GPU_ALLOW_GROWTH": "true"}))).fits
    message = verdict.message()
    assert message.startswith("TensorFlow and JAX cannot share sim:4GiB (4.00 GiB): JAX ran out of memory")
    assert "started in this order: TensorFlow, then JAX" in message
    assert "asked 3.00 GiB, backed off: the device had no more" in message


def test_jax_first_with_a_small_tensorflow_step_fits() -> None:
    participants = [Participant.holding(jax(), 2 * GiB, at=0.0), Participant.holding(TF_DEFAULT, 16 * MiB, at=1.0)]
    verdict = check_sharing(4 * GiB, participants)
    assert verdict.fits and verdict.order == ["JAX", "TensorFlow"]
    tensorflow = verdict.outcomes[1]
    # JAX took 3 GiB of 4 and the context 512 MiB: 512 MiB free, under 2 GiB, so TensorFlow keeps 225 MiB
    assert tensorflow.limit == 512 * MiB - 225 * MiB


def test_the_order_comes_from_the_events_not_from_the_list() -> None:
    tensorflow_first = [Participant.holding(jax(), 2 * GiB, at=1.0), Participant.holding(TF_DEFAULT, 64 * MiB, at=0.0)]
    assert simulate(4 * GiB, tensorflow_first).order == ["TensorFlow", "JAX"]
    assert not simulate(4 * GiB, tensorflow_first).fits


def test_a_framework_fails_only_at_an_allocation_that_cannot_be_served() -> None:
    events = (TraceEvent("allocate", 1, GiB, 0.0), TraceEvent("free", 1, GiB, 0.1), TraceEvent("allocate", 2, GiB, 0.2))
    small_device = simulate(2 * GiB, [Participant(jax(), events)])  # JAX gets 1.5 GiB: enough, one GiB at a time
    assert small_device.fits
    held = (TraceEvent("allocate", 1, GiB, 0.0), TraceEvent("allocate", 2, GiB, 0.2))
    both = simulate(2 * GiB, [Participant(jax(), held)])
    assert both.failed == "JAX" and "out of memory allocating 1.00 GiB" in both.outcomes[0].problem


def test_two_jax_processes_at_three_quarters_the_second_backs_off_and_passes_when_its_work_fits() -> None:
    fits = check_sharing(16 * GiB, [Participant.holding(jax(label=f"JAX process {i}"), GiB, process=i, at=float(i)) for i in (1, 2)])
    assert fits.fits
    second = fits.outcomes[1]
    assert second.asked == 12 * GiB and second.reserved <= 16 * GiB - 12 * GiB - 2 * DEFAULT_CUDA_CONTEXT_BYTES
    crowded = check_sharing(16 * GiB, [Participant.holding(jax(label=f"JAX process {i}"), 4 * GiB, process=i, at=float(i)) for i in (1, 2)])
    assert crowded.failed == "JAX process 2"
    assert crowded.fixes[0].startswith("set XLA_CLIENT_MEM_FRACTION=0.") and crowded.fixes[0].endswith(" in each of the JAX processes")


def test_each_process_holds_one_cuda_context_and_users_can_size_it() -> None:
    one_process = simulate(8 * GiB, [Participant.holding(jax(), GiB), Participant.holding(TF_DEFAULT, MiB, at=1.0)])
    two_processes = simulate(8 * GiB, [Participant.holding(jax(), GiB), Participant.holding(TF_DEFAULT, MiB, process=1, at=1.0)])
    assert one_process.outcomes[1].limit == 8 * GiB - 6 * GiB - DEFAULT_CUDA_CONTEXT_BYTES - 225 * MiB
    assert two_processes.outcomes[1].limit == one_process.outcomes[1].limit - DEFAULT_CUDA_CONTEXT_BYTES
    no_context = simulate(8 * GiB, [Participant.holding(jax(), GiB), Participant.holding(TF_DEFAULT, MiB, at=1.0)], context_bytes=0)
    assert no_context.outcomes[1].limit == 2 * GiB - 1536 * MiB  # 2 GiB free: the reserve for compute capability 8


def test_the_computed_fraction_is_the_largest_that_fits() -> None:
    participants = [Participant.holding(jax(), 2 * GiB, at=0.0), Participant.holding(TF_DEFAULT, 3 * GiB, at=1.0)]
    verdict = check_sharing(16 * GiB, participants)
    assert not verdict.fits and verdict.failed == "TensorFlow"
    fraction = float(verdict.fixes[0].split("=")[1])
    assert simulate(16 * GiB, [Participant.holding(jax(fraction), 2 * GiB), participants[1]]).fits
    assert not simulate(16 * GiB, [Participant.holding(jax(fraction + 0.01), 2 * GiB), participants[1]]).fits


def test_no_setting_fits_says_so() -> None:
    verdict = check_sharing(GiB, [Participant.holding(jax(), 900 * MiB), Participant.holding(TF_DEFAULT, 900 * MiB, at=1.0)])
    assert not verdict.fits and verdict.fixes == []
    assert "no setting makes them fit" in verdict.message()


@pytest.mark.parametrize(
    ("available", "capability", "environ", "reserve"),
    [(GiB, 8, {}, 225 * MiB), (40 * GiB, 6, {}, 500 * MiB), (40 * GiB, 7, {}, 1050 * MiB), (40 * GiB, 8, {}, 1536 * MiB), (80 * GiB, 9, {}, 1800 * MiB), (40 * GiB, 8, {"TF_DEVICE_MIN_SYS_MEMORY_IN_MB": "64"}, 64 * MiB)],
)
def test_tensorflow_system_reserve(available: int, capability: int, environ: dict[str, str], reserve: int) -> None:
    assert tensorflow_system_reserve(available, capability, environ) == reserve


def test_a_reserve_not_smaller_than_what_is_free_is_ignored() -> None:
    """gpu_device.cc: `if (min_system_memory < allocated_memory) allocated_memory -= min_system_memory`."""
    assert tensorflow_memory_limit(100 * MiB, 8) == 100 * MiB
    assert tensorflow_memory_limit(GiB, 8) == GiB - 225 * MiB


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
    assert tensorflow_setup_from_env({"TF_FORCE_GPU_ALLOW_GROWTH": "True"}).mode == "default"  # matched exactly, as TensorFlow does
    assert tensorflow_setup_from_env({"TF_GPU_ALLOCATOR": "cuda_malloc_async"}).mode == "ondemand"
    assert tensorflow_setup_from_env({}, limit=GiB).mode == "limit"
    limited = simulate(16 * GiB, [Participant.holding(jax(0.5), GiB), Participant.holding(tensorflow_setup_from_env({}, limit=10 * GiB), GiB, at=1.0)])
    assert limited.fits  # its 10 GiB region backs off to what is free; its 1 GiB fits in that
    assert limited.outcomes[1].reserved < 10 * GiB


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


def test_real_oom_message_offers_the_settings_even_when_the_model_fitted() -> None:
    participants = [Participant.holding(jax_setup_from_env({}), MiB), Participant.holding(TF_DEFAULT, MiB, at=1.0)]
    verdict = check_sharing(80 * GiB, participants, "cuda:0 (NVIDIA H100)")
    assert verdict.fits
    text = verdict.real_oom_message()
    assert text.startswith("JAX and TensorFlow cannot share cuda:0 (NVIDIA H100) (80.00 GiB): a real out-of-memory error")
    assert "set TF_FORCE_GPU_ALLOW_GROWTH=true" in text and "XLA_PYTHON_CLIENT_PREALLOCATE=false" in text
