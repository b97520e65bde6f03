"""Order never changes a verdict or a figure: one test file, with TensorFlow tests and `max_compiles`
tests in it, run forward, in reverse, each test alone, in two pytest-split shards and under
`-n 2`, gives the same records (verdicts and figures) in its JSON reports.

TensorFlow's figures are the same in any order and from one run to the next, byte for byte: its
first test in a process no longer differs, its graphs' ops run in one order (capture/tensorflow/
warmup.py), and a NumPy array made a tensor is always copied into its allocator (capture/tensorflow/
conversion.py). A `tf.data` pipeline is the exception, and none runs here: its producer runs on its
own threads, ahead of the test (docs/order-independence.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SUITE = """
import pytest

MiB = 2**20


@pytest.mark.devmem(max_compiles=1)
def test_jax_builtins_and_a_jitted_step():
    import jax
    import jax.numpy as jnp

    noise = jax.random.normal(jax.random.key(0), (256, 256))  # JAX's own small executables
    zeros = jnp.zeros((256, 256))
    step = jax.jit(lambda a, b: jnp.tanh(a @ b) + b)
    for _ in range(3):
        zeros = step(noise, zeros)
    zeros.block_until_ready()


@pytest.mark.devmem(max_compiles=1)
def test_jax_retraced_on_every_call():
    import jax
    import jax.numpy as jnp

    scale = jax.jit(lambda x: x * 2)
    for n in (64, 128):
        scale(jnp.ones(n)).block_until_ready()  # a new shape: a second executable


@pytest.mark.devmem(max_compiles=2)
def test_jax_same_builtins_again():
    import jax
    import jax.numpy as jnp

    noise = jax.random.normal(jax.random.key(1), (256, 256))
    (noise + jnp.zeros((256, 256))).block_until_ready()


def test_tf_matmul():
    tf = pytest.importorskip("tensorflow")
    x = tf.random.normal((128, 128), seed=1)
    w = tf.Variable(tf.ones((128, 128)))
    assert tf.reduce_sum(tf.matmul(x, w)).shape == ()


def test_tf_train_step():
    tf = pytest.importorskip("tensorflow")
    model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def train(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    for _ in range(2):
        train(tf.ones((16, 32)), tf.zeros((16, 1)))


def test_pool(devmem):
    handles = [devmem.pool.alloc(MiB) for _ in range(4)]
    for handle in handles[::2]:
        devmem.pool.free(handle)
"""

REVERSE = """
import os


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("DEVMEM_TEST_REVERSE") == "1":
        items.reverse()
"""

COMPARED = (
    "outcome",
    "peak_bytes_in_use",
    "peak_bytes_reserved",
    "fragmentation",
    "worst_fragmentation",
    "oom",
    "compiles",
    "leaked_bytes",
    "failed_by_devmem",
)


def same(found: dict[str, dict[str, object]], expected: dict[str, dict[str, object]]) -> bool:
    """Equal records, every figure and every holder at the peak, TensorFlow's as JAX's."""
    return found == expected


def figures(report: Path) -> dict[str, dict[str, object]]:
    """Per test: its verdict and figures, and what held memory at its peak (by name)."""
    records = json.loads(report.read_text())["records"]
    return {
        r["test_id"]: {
            **{key: r.get(key) for key in COMPARED},
            "at_peak": (r.get("trace") or {}).get("at_peak"),
            "devices": r.get("devices"),
            "needed": (r.get("trace") or {}).get("needed"),
        }
        for r in records
    }


@pytest.mark.slow  # seven fresh processes, each starting JAX and TensorFlow
def test_forward_reverse_alone_shards_and_xdist_give_the_same_records(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pytest_split", reason="pytest-split (the test-tools extra) is not installed")
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeconftest(REVERSE)
    common = ("--devmem-mode=prealloc", "-p", "no:cacheprovider", "-p", "no:randomly")

    def run(name: str, *args: str) -> Path:
        result = pytester.runpytest_subprocess(*common, f"--devmem-report={name}.json", *args)
        assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
        return pytester.path / f"{name}.json"

    forward = figures(run("forward"))
    monkeypatch.setenv("DEVMEM_TEST_REVERSE", "1")
    backward = figures(run("reverse"))
    monkeypatch.delenv("DEVMEM_TEST_REVERSE")
    assert len(forward) == 6 and forward["test_suite.py::test_jax_retraced_on_every_call"]["outcome"] == "failed"
    assert forward["test_suite.py::test_jax_builtins_and_a_jitted_step"]["outcome"] == "passed"
    assert forward["test_suite.py::test_jax_same_builtins_again"]["outcome"] == "passed"
    assert same(backward, forward), (backward, forward)
    first, second = (figures(run(f"shard{group}", "--splits", "2", "--group", str(group))) for group in (1, 2))
    assert first and second and same({**first, **second}, forward), (first, second, forward)
    xdist = figures(run("xdist", "-n", "2"))
    assert same(xdist, forward), (xdist, forward)
    for test in ("test_tf_train_step", "test_jax_same_builtins_again"):  # each alone, after nothing
        alone = figures(run(test, f"test_suite.py::{test}"))
        assert same(alone, {f"test_suite.py::{test}": forward[f"test_suite.py::{test}"]}), (alone, forward)
