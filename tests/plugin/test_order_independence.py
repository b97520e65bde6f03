"""Every selection gives the same record: the project of `benchmarks/bench_selection.py` (a JAX
model module with a module-level jit, params built in a fixture, an unmarked test that runs the same
programs first, JAX's eager helpers, `max_compiles` tests, TensorFlow tests sharing a tf.function,
JAX and TensorFlow in one test, the fixture's pool, a step sharded over four devices) with every
test measured and with only the marked ones measured (no `--devmem-mode`), where a marked test
after an unmeasured one once lost most of its figure. The benchmark runs the other seven selections
(reversed, two pytest-split shards, `-n 2`, three tests alone): `python -m
benchmarks.bench_selection`. TensorFlow's tf.functions in any order and under `-n 2`:
tests/capture/test_tensorflow_order.py."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_selection import COMMON, CONFTEST, JAX_TESTS, MLP, TF_TESTS, differences, figures


@pytest.mark.slow  # two fresh processes, each starting JAX and TensorFlow
def test_measuring_only_the_marked_tests_gives_each_the_record_of_measuring_all(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(mlp=MLP, test_jax=JAX_TESTS, test_tf=TF_TESTS)

    def run(name: str, *args: str) -> dict[str, dict[str, object]]:
        result = pytester.runpytest_subprocess(*COMMON, f"--devmem-report={name}.json", *args)
        assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
        return figures(pytester.path / f"{name}.json")

    every = run("all", "--devmem-mode=prealloc")
    assert len(every) == 9
    assert every["test_jax.py::test_jax_retraced_on_every_call"]["outcome"] == "failed"
    assert every["test_jax.py::test_train_step_compiles_once"]["outcome"] == "passed"  # JAX's helpers do not count
    inference = every["test_jax.py::test_inference_fits"]  # init_params' arrays are alive at its peak
    assert inference["outcome"] == "passed" and inference["peak_bytes_in_use"] > 6 * 2**20, inference
    marked = run("marked")
    assert set(marked) == set(every) - {"test_jax.py::test_train_step", "test_tf.py::test_tf_matmul"}
    problems = differences(marked, every)
    assert not problems, json.dumps(problems, indent=1)
