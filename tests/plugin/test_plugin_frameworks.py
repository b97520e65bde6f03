"""JAX and TensorFlow together in one test (real, on CPU): each framework's allocator on the device,
in the order they really start (the model of the machine); xdist workers on one device; and the
answers replayed from traces: the smallest fraction and what a smaller device would do."""

from __future__ import annotations

import importlib.util
import json

import pytest

from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.pool import Policy, TracingPool, make_pool, replay
from pytest_devmem.units import MiB

pytestmark = pytest.mark.slow  # JAX and TensorFlow together, xdist workers and subprocesses: 2-10 s a test


TF_FIRST = """
import pytest
import jax.numpy as jnp
import tensorflow as tf

@pytest.mark.devmem(frameworks=("jax", "tf"))
def test_tf_first():
    y = tf.ones((16 * 2**20,), dtype=tf.float32)                          # 64 MiB in TensorFlow, first
    x = jnp.ones((64 * 2**20,), dtype=jnp.float32).block_until_ready()   # then 256 MiB in JAX
    assert float(x[0]) + float(y[0]) == 2.0
"""

JAX_FIRST = """
import pytest
import jax.numpy as jnp
import tensorflow as tf

@pytest.mark.devmem(frameworks=("jax", "tf"))
def test_jax_first():
    x = jnp.ones((2 * 2**20,), dtype=jnp.float32).block_until_ready()   # 8 MiB in JAX, first
    y = tf.ones((4 * 2**20,), dtype=tf.float32)                           # then a small TensorFlow step
    assert float(x[0]) + float(y[0]) == 2.0
"""


def test_tensorflow_first_starves_jax_and_the_fix_is_proven(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    pytester.makepyfile(TF_FIRST)
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-device=sim:2GiB", "--devmem-report=r.json"
    )
    result.assert_outcomes(failed=1)
    # sim:2GiB: a 256 MiB context (an eighth of the device); TensorFlow then sees 1.75 GiB free, under
    # 2 GiB, so it keeps 225 MiB (gpu_device.cc MinSystemMemory) and takes the other 1.53 GiB
    result.stdout.fnmatch_lines(
        [
            "*out of device memory under regime prealloc on sim:2GiB: JAX could not allocate 256.00 MiB (268435456 bytes) for jit(broadcast_in_dim) on cpu:0 -- another tenant*",
            "*cpu:0 (2.00 GiB): *also held: TensorFlow 1.53 GiB, CUDA context 256.00 MiB*",
            "*started in this order: TensorFlow, then JAX*",
            "*TensorFlow (default: all free memory but the system reserve): limit 1.53 GiB, took 1.53 GiB at its first allocation*",
            "*JAX (preallocate, XLA_CLIENT_MEM_FRACTION=0.75): limit 1.50 GiB, took * at its first allocation (asked 1.50 GiB, backed off: the device had no more)*",
            "*fix (each replayed on this trace): set TF_FORCE_GPU_ALLOW_GROWTH=true, or hide the GPU from TensorFlow*",
            "*out of device memory: 1 test(s): *test_tf_first (tenant)*",
        ]
    )
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert (
        record["oom"]["kind"] == "tenant" and record["oom"]["allocator"] == "jax" and record["oom"]["device"] == "cpu:0"
    )
    assert record["trace"]["order"] == ["tensorflow", "jax"]
    assert [a["allocator"] for a in record["devices"][0]["allocators"]] == ["tensorflow", "jax"]
    assert record["baseline"]["status"] == "out of memory"  # never "new", "ok" or "improved"
    monkeypatch.setenv(
        "TF_FORCE_GPU_ALLOW_GROWTH", "true"
    )  # the proven fix; TensorFlow's own variable, which the regime keeps
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-device=sim:2GiB").assert_outcomes(passed=1)


def test_jax_first_with_a_small_tensorflow_step_passes(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    pytester.makepyfile(JAX_FIRST)
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-device=sim:4GiB", "--devmem-report=r.json"
    )
    result.assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["oom"] is None and record["trace"]["order"] == ["jax", "tensorflow"]
    jax, tensorflow = record["devices"][0]["allocators"]
    assert jax["setup"] == "preallocate, XLA_CLIENT_MEM_FRACTION=0.75" and jax["took"] == 3 * 2**30
    assert tensorflow["setup"] == "default: all free memory but the system reserve"
    # 4 GiB less JAX's 3 GiB and the 512 MiB context leaves 512 MiB: under 2 GiB, TensorFlow keeps 225 MiB
    assert tensorflow["limit"] == 512 * MiB - 225 * MiB


def test_the_cuda_context_size_is_the_users_to_set(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    pytester.makepyfile(JAX_FIRST)
    pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-device=sim:4GiB", "--devmem-cuda-context=300MiB", "--devmem-report=r.json"
    ).assert_outcomes(passed=1)
    device = json.loads((pytester.path / "r.json").read_text())["records"][0]["devices"][0]
    assert device["context_bytes"] == 300 * MiB
    assert device["allocators"][1]["limit"] == 4 * 2**30 - 3 * 2**30 - 300 * MiB - 225 * MiB
    result = pytester.runpytest_inprocess("--devmem-cuda-context=-1MiB")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "--devmem-cuda-context" in result.stderr.str()


def test_bad_frameworks_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("--devmem-frameworks=jax,torch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown framework 'torch'" in result.stderr.str() and "(from --devmem-frameworks)" in result.stderr.str()


WORKER_TEST = """
import os
import pytest

@pytest.mark.parametrize("n", range(6))
def test_share(devmem, n):
    print("FRACTION", os.environ["XLA_CLIENT_MEM_FRACTION"])
    assert devmem.pool.stats()["bytes_limit"] <= 16 * 2**30 * float(os.environ["XLA_CLIENT_MEM_FRACTION"])
"""


def test_three_xdist_workers_split_the_fraction_by_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(WORKER_TEST + "\n    assert os.environ['XLA_CLIENT_MEM_FRACTION'] == '0.25'\n")
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "-n", "3", "--devmem-report=r.json")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        ["*xdist: 3 workers share one device: each gets fraction 0.25 (prealloc's 0.75 split 3 ways)*"]
    )
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    assert {r["regime"] for r in records} == {"prealloc"}  # baselines keep the session regime's name


def test_three_xdist_workers_at_a_chosen_point_75_are_warned(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(WORKER_TEST)
    result = pytester.runpytest_inprocess("--devmem-mode=fraction", "--devmem-fraction=.75", "-n", "3")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [
            "*3 pytest-xdist workers x fraction 0.75 = 2.25 of one device: they cannot all fit; use --devmem-fraction=0.33 or less*"
            "each JAX preallocation backs off to what is left: worker 1 12.00 GiB, worker 2 2.75 GiB, worker 3 0 B*"  # the third cannot even create its context
        ]
    )


TRACE_TEST = """
def workload(pool):
    keep = [pool.alloc(size) for size in (96 * 2**20, 40 * 2**20, 3 * 2**20)]
    for step in range(3):
        temporary = pool.alloc((20 + step) * 2**20)
        pool.free(temporary)
    pool.free(keep[1])
    pool.alloc(50 * 2**20)

def test_small(devmem):
    devmem.pool.alloc(2**20)

def test_workload(devmem):
    workload(devmem.pool)
"""


def replay_workload(fraction: float | None, capacity: int, mode: str = "fraction") -> bool:
    namespace: dict[str, object] = {}
    exec(TRACE_TEST, namespace)
    recorder = TracingPool(make_pool(SimulatedDevice(16 * 2**30), Policy.of("ondemand")))
    namespace["workload"](recorder)  # type: ignore[operator]
    return replay(recorder.trace, make_pool(SimulatedDevice(capacity), Policy.of(mode, fraction))).ok


def test_min_fraction_and_what_if_are_confirmed_by_replay(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TRACE_TEST)
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc",
        "--devmem-device=sim:1GiB",
        "--devmem-find-min-fraction",
        "--devmem-what-if=160MiB",
        "--devmem-report=r.json",
    )
    result.assert_outcomes(passed=2)
    records = {r["test_id"].split("::")[-1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    answer = records["test_workload"]["analysis"]["min_fraction"]
    result.stdout.fnmatch_lines(
        [
            "*smallest prealloc fraction that passes (traces replayed on sim:1GiB):*",
            f"*test_workload ?prealloc?: {answer:.2f}*",
        ]
    )
    assert replay_workload(answer, 2**30)  # passes at the answer
    assert not replay_workload(round(answer - 0.01, 2), 2**30)  # and not one hundredth below
    assert records["test_small"]["analysis"]["min_fraction"] == 0.01  # the search's floor, and it says so
    assert records["test_small"]["analysis"]["min_fraction_at_floor"] is True
    assert records["test_workload"]["analysis"]["min_fraction_at_floor"] is False
    result.stdout.fnmatch_lines(["*test_small ?prealloc?: 0.01 or less (the search stops at 0.01)*"])
    result.stdout.fnmatch_lines(
        [
            "*what if the device had 160.00 MiB: 1 of 2 replayed test(s) would run out of memory*",
            "*test_workload ?prealloc?: event 1: pool could not allocate 40.00 MiB on cpu:0 (its regime's limit is too low)*",
        ]
    )
    assert records["test_workload"]["analysis"]["what_if"]["ok"] is False
    assert records["test_small"]["analysis"]["what_if"]["ok"] is True
    assert not replay_workload(None, 160 * MiB, "prealloc")
    assert replay_workload(None, 256 * MiB, "prealloc")


def test_bad_what_if_size_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("--devmem-what-if=16G")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ambiguous size '16G'" in result.stderr.str() and "(from --devmem-what-if)" in result.stderr.str()


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow's GPU build beside JAX's")
def test_real_tensorflow_first_jax_oom_on_a_gpu_is_reported_with_the_fix(pytester: pytest.Pytester) -> None:
    """On a GPU: a TensorFlow op first takes all free memory but TensorFlow's system reserve; JAX's
    75% preallocation then backs off to what is left, and a 16 GiB JAX array raises a real
    RESOURCE_EXHAUSTED, which the plugin reports with the model's order and fixes."""
    pytester.makepyfile(
        """
        import pytest
        import tensorflow as tf
        import jax.numpy as jnp

        @pytest.mark.devmem(frameworks=("jax", "tf"))
        def test_tf_first():
            assert float(tf.reduce_sum(tf.ones((1024,)))) == 1024.0  # TensorFlow's device and its allocation first
            big = jnp.ones((4 * 2**30,), dtype=jnp.float32).block_until_ready()  # then 16 GiB in JAX
            assert big.shape[0] > 0
        """
    )
    result = pytester.runpytest_subprocess("--devmem-mode=prealloc", "--devmem-device=cuda:0")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*RESOURCE_EXHAUSTED*", "*out of device memory*", "*started in this order: TensorFlow, then JAX*", "*fix*"]
    )


def test_a_test_that_fails_anyway_gets_the_out_of_memory_result_as_a_section(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    pytester.makepyfile(TF_FIRST.replace("== 2.0", "== 3.0"))
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-device=sim:2GiB")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*AssertionError*", "*pytest-devmem*", "*JAX could not allocate 256.00 MiB*another tenant*"]
    )


def test_what_jax_prints_as_its_backends_start_stays_in_the_tests_captured_output(pytester: pytest.Pytester) -> None:
    """JAX starts its backends at the first `jax.devices()`, which starting a test's measurement may
    call; with the CUDA plugin installed and no driver, that start logs `cudart_stub.cc ... Could not
    find cuda drivers` from C++. It belongs to the test's captured output, as without the plugin,
    never printed on every run. Here the start is made to print through the same file descriptor."""
    pytest.importorskip("jax")
    pytester.makeconftest(
        """
        import os
        import jax
        from jax._src import xla_bridge

        _backends = xla_bridge.backends

        def noisy_backends(*args, **kwargs):
            if not xla_bridge._backends:  # as JAX's backends log once, when they start
                os.write(2, b"BACKENDS STARTING\\n")
            return _backends(*args, **kwargs)

        xla_bridge.backends = noisy_backends
        """
    )
    pytester.makepyfile("import jax.numpy as jnp\n\ndef test_sum():\n    assert float(jnp.ones(3).sum()) == 3.0\n")
    result = pytester.runpytest_subprocess("--devmem-mode=prealloc", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "BACKENDS STARTING" not in result.stdout.str() + result.stderr.str()


def test_the_test_that_starts_jax_gets_the_record_of_any_other_when_a_plugin_logs_its_failure(
    pytester: pytest.Pytester,
) -> None:
    """Where a plugin fails as JAX's backends start (the CUDA plugin without its libraries), JAX logs
    the failure with its traceback (xla_bridge's `discover_pjrt_plugins`), in whichever test starts
    them; pytest keeps the record, and its frames held that test's first array past its window. The
    record keeps the traceback as text: printed the same, and both tests measured alike."""
    pytest.importorskip("jax")
    pytester.makeconftest(
        """
        import logging
        import jax
        from jax._src import xla_bridge

        _backends = xla_bridge.backends

        def failing_plugin_backends(*args, **kwargs):
            if not xla_bridge._backends:  # as JAX logs a plugin's failure once, when its backends start
                try:
                    raise RuntimeError("the plugin's library could not be loaded")
                except RuntimeError:
                    logging.getLogger("jax._src.xla_bridge").exception(
                        "Jax plugin configuration error: Exception when calling %s.initialize()", "a_plugin"
                    )
            return _backends(*args, **kwargs)

        xla_bridge.backends = failing_plugin_backends
        """
    )
    pytester.makepyfile(
        """
        import jax.numpy as jnp

        def test_first(caplog):
            x = jnp.ones((256, 256)).block_until_ready()
            assert x.shape == (256, 256)
            assert "Traceback" in caplog.text and "the plugin's library could not be loaded" in caplog.text

        def test_second(caplog):
            x = jnp.ones((256, 256)).block_until_ready()
            assert x.shape == (256, 256)
        """
    )
    result = pytester.runpytest_subprocess("--devmem-mode=prealloc", "-p", "no:cacheprovider", "--devmem-report=r.json")
    result.assert_outcomes(passed=2)
    first, second = (
        (record["peak_bytes_in_use"], *(record["trace"][key] for key in ("events", "by_source", "at_peak", "profile")))
        for record in json.loads((pytester.path / "r.json").read_text())["records"]
    )
    assert first == second  # the first compiled its programs, the second found them: the same allocations


def test_a_worker_interrupted_in_jaxs_gc_callback_at_shutdown_prints_no_warning(pytester: pytest.Pytester) -> None:
    """execnet sends a worker still busy 5 s after the session ended a SIGINT; it lands in JAX's
    `_xla_gc_callback` more often than not (see ignore_shutdown_interrupt_in_jax_gc). Made to happen
    here without waiting: each worker's last collection runs a callback of that name that raises
    KeyboardInterrupt; another unraisable exception is still reported."""
    pytest.importorskip("xdist")
    pytester.makeconftest(
        """
        import gc

        def _xla_gc_callback(*args):
            raise KeyboardInterrupt

        def another_callback(*args):
            raise ValueError("still reported")

        def pytest_unconfigure(config):
            if hasattr(config, "workerinput"):
                gc.callbacks.append(_xla_gc_callback)
                gc.callbacks.append(another_callback)
                gc.collect()
                gc.callbacks.remove(_xla_gc_callback)
                gc.callbacks.remove(another_callback)
        """
    )
    pytester.makepyfile(
        "def test_one(devmem):\n    devmem.pool.alloc(2**20)\n\ndef test_two(devmem):\n    devmem.pool.alloc(2**20)\n"
    )
    result = pytester.runpytest_subprocess("-n", "2", "--devmem-mode=ondemand", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    output = result.stdout.str() + result.stderr.str()
    assert "_xla_gc_callback" not in output and "still reported" in output


def test_the_header_says_when_the_plugin_set_tensorflows_inter_op_threads(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TF_NUM_INTEROP_THREADS=1 changes how TensorFlow runs a graph: set by the plugin, it is said,
    as the oneDNN setting is; set by the user, it is theirs and unsaid."""
    pytest.importorskip("tensorflow")
    monkeypatch.delenv("TF_NUM_INTEROP_THREADS", raising=False)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--devmem-mode=prealloc", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        ["devmem: TensorFlow's inter-op threads: 1 (TF_NUM_INTEROP_THREADS=1, set by pytest-devmem*"]
    )
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "4")
    yours = pytester.runpytest_subprocess("--devmem-mode=prealloc", "-p", "no:cacheprovider")
    assert "inter-op threads" not in yours.stdout.str()
