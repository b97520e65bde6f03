"""TensorFlow allocates the same in every run and any order (real TensorFlow on CPU): a NumPy array
made a tensor is copied into TensorFlow's allocator wherever NumPy put it, and the executor takes a
graph's ops in one order (TF_DETERMINISTIC_ORDER=1, set unless the user set it)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_devmem.capture.tensorflow.warmup import ORDER_VARIABLE, prepare_order


def test_the_executor_order_variable_is_set_unless_the_user_set_it() -> None:
    environ: dict[str, str] = {}
    assert prepare_order(environ) and environ == {ORDER_VARIABLE: "1"}
    yours = {ORDER_VARIABLE: "0"}
    assert not prepare_order(yours) and yours == {ORDER_VARIABLE: "0"}


def test_the_session_sets_the_executor_order_before_tensorflow_starts_and_puts_it_back(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ORDER_VARIABLE, raising=False)
    pytester.makeconftest(
        "import os\n\n"
        "def pytest_unconfigure(config):\n"
        f"    print('after the session:', os.environ.get({ORDER_VARIABLE!r}))\n"
    )
    pytester.makepyfile(f"import os\n\ndef test_sees_it():\n    assert os.environ.get({ORDER_VARIABLE!r}) == '1'\n")
    result = pytester.runpytest_subprocess("--devmem-mode=prealloc", "-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["after the session: None"])


SMALL_ARRAYS = """
import numpy as np
import tensorflow as tf


def test_small_arrays():
    source = np.arange(2, dtype=np.int32)  # 8 bytes
    tensors = []
    for _ in range(4):
        # NumPy hands out the 8-byte buffer freed last: make it one on a 64-byte boundary, which
        # TensorFlow would take as the tensor's own memory (TF_NewTensor, tensorflow/c/tf_tensor.cc)
        spare = [np.empty(2, np.int32) for _ in range(256)]
        del spare[next(i for i, a in enumerate(spare) if a.ctypes.data % 64 == 0)]
        tensors.append(tf.constant(source))  # constant_op.convert_to_eager_tensor copies `source`
        del spare
    assert all(t.numpy().tolist() == [0, 1] for t in tensors)
"""


def test_a_small_numpy_array_made_a_tensor_is_always_one_allocation(
    tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_small=SMALL_ARRAYS)
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-traces=traces")
    result.assert_outcomes(passed=1)
    (trace,) = (pytester.path / "traces").glob("*.csv")
    with trace.open() as lines:
        constants = [
            row for row in csv.DictReader(lines) if row["Action"] == "allocate" and row["Label"] == "tf.constant"
        ]
    assert [int(row["Size"]) for row in constants] == [8] * 4, Path(trace).read_text()


FUNCTIONS_CONFTEST = """
import os


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("DEVMEM_TEST_REVERSE") == "1":
        items.reverse()
"""

FUNCTIONS = """
import tensorflow as tf


@tf.function
def step(x):
    return tf.reduce_sum(tf.matmul(x, x) * 2.0)


SCALAR = tf.ones(())


@tf.function
def same(x):  # allocates nothing when it runs
    return x


@tf.function
def shift(x):
    return tf.nn.relu(x * 3.0 + tf.ones((256, 256)))  # Grappler folds tf.ones into one 256 KiB constant


def test_tf_a():
    v = tf.Variable(tf.zeros([25 * 2**20]))
    x = tf.random.normal([1024, 1024], seed=1)
    step(x)
    shift(x[:256, :256])
    same(SCALAR)


def test_tf_b():
    x = tf.ones([1024, 1024])
    step(x)
    tf.nn.relu(tf.matmul(x, x))


def test_tf_c():
    @tf.function
    def local(x):  # made, traced and called in this test alone
        return tf.reduce_mean(x * 0.5)

    local(tf.ones((64, 64)))
    shift(tf.ones((256, 256)))


def test_tf_d():  # its window holds no allocation but when it calls same first
    same(SCALAR)
"""


def _records(pytester: pytest.Pytester, name: str, *args: str, reverse: bool = False) -> dict[str, object]:
    """Each test's record and its trace's events, from one fresh session. Left out: the test's duration,
    the trace file's folder, each event's time and the raw sources (TensorFlow's current bytes count
    what the whole process holds)."""
    traces = pytester.path / f"traces-{name}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEVMEM_TEST_REVERSE", "1" if reverse else "0")
        result = pytester.runpytest_subprocess(
            "--devmem-mode=prealloc",
            "--devmem-max-leak=0",  # what a first call keeps is no test's leak
            "-p",
            "no:cacheprovider",
            f"--devmem-report={name}.json",
            f"--devmem-traces={traces}",
            *args,
        )
    result.assert_outcomes(passed=4)
    found: dict[str, object] = {}
    for record in json.loads((pytester.path / f"{name}.json").read_text())["records"]:
        del record["sources"], record["duration_s"], record["trace"]["file"]
        found[record["test_id"]] = record
    for trace in traces.glob("*.csv"):
        with trace.open() as lines:
            found[trace.name] = [{k: v for k, v in row.items() if k != "Time"} for row in csv.DictReader(lines)]
    return found


@pytest.mark.slow  # three fresh sessions, each starting TensorFlow
def test_tf_functions_first_called_in_any_test_give_the_same_records_in_any_order(
    tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    """A tf.function's first call traces it, lets Grappler fold its constants on a CPU device of its
    own (grappler/optimizers/evaluation_utils.cc) and builds its kernels, whose constants it keeps:
    none of that is in the trace of whichever test called it first."""
    pytester.makeconftest(FUNCTIONS_CONFTEST)
    pytester.makepyfile(test_functions=FUNCTIONS)
    forward = _records(pytester, "forward")
    assert forward == _records(pytester, "reversed", reverse=True)
    assert forward == _records(pytester, "workers", "-n", "2")
    record = forward["test_functions.py::test_tf_b"]
    assert isinstance(record, dict) and record["peak_bytes_in_use"] == 12582912  # three 4 MiB tensors
    assert any(
        "kernels of same, shift, step hold" in note
        for note in forward["test_functions.py::test_tf_a"]["trace"]["notes"]
    )
    assert forward["test_functions.py::test_tf_d"]["trace"]["events"] == 0


@pytest.mark.slow  # two fresh sessions, each starting JAX and TensorFlow
def test_a_tensorflow_tests_jax_source_says_the_same_whether_jax_ran_before_it(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        test_a_jax="import jax.numpy as jnp\n\ndef test_jax():\n    assert float(jnp.ones(4).sum()) == 4\n",
        test_b_tf="import tensorflow as tf\n\ndef test_tf():\n    assert float(tf.reduce_sum(tf.ones(4))) == 4\n",
    )

    def jax_source(*selection: str) -> object:
        result = pytester.runpytest_subprocess("--devmem-mode=prealloc", "--devmem-report=r.json", *selection)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        records = json.loads((pytester.path / "r.json").read_text())["records"]
        return next(r["sources"]["jax"] for r in records if r["test_id"] == "test_b_tf.py::test_tf")

    alone = jax_source("test_b_tf.py")
    assert alone == jax_source("test_a_jax.py", "test_b_tf.py")
    assert alone == {"available": False, "unused": True, "note": "JAX ran nothing in this test"}


@pytest.mark.slow  # real TensorFlow's profiler
@pytest.mark.parametrize("options", [{}, {"constant_folding": False}, {"disable_meta_optimizer": True}])
def test_a_tf_functions_first_call_is_its_later_calls_once_its_first_call_work_is_left_out(
    tensorflow_loaded: Any, options: dict[str, bool]
) -> None:
    """With Grappler's constant folding on, off (the executor folds as it builds the kernels,
    common_runtime/constant_folding.cc) and with Grappler off."""
    from collections import Counter

    from pytest_devmem.capture.tensorflow.profiler import ProfilerRun
    from pytest_devmem.capture.tensorflow.xspace import read_profile

    tf = tensorflow_loaded
    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options(options)
    profiler = ProfilerRun()
    try:

        @tf.function
        def shift(x: Any) -> Any:
            return tf.reduce_sum(tf.nn.relu(tf.matmul(x, x) * 3.0 + tf.ones((64, 64))))

        x = tf.ones((64, 64))
        calls = []
        for _ in range(2):
            profiler.start()
            shift(x)
            calls.append(read_profile(profiler.stop()).events)
    finally:
        profiler.close()
        tf.config.optimizer.set_experimental_options(
            {"constant_folding": True, "disable_meta_optimizer": False, **saved}
        )
    first, later = ([(e.allocate, e.op, e.requested_bytes) for e in events if not e.first_call] for events in calls)
    assert Counter(first) == Counter(later) and any(e.first_call for e in calls[0])
    assert not any(e.first_call for e in calls[1])


@pytest.mark.slow  # real TensorFlow's profiler
def test_a_variable_made_by_a_tf_functions_first_trace_keeps_its_initial_buffer_in_the_trace(
    tensorflow_loaded: Any,
) -> None:
    """Its initializer runs once, in a function of its own whose folded constant becomes the variable's
    buffer (`initialize_variables`, polymorphic_function.py): no first-call work of a shared function."""
    from pytest_devmem.capture.tensorflow.profiler import ProfilerRun
    from pytest_devmem.capture.tensorflow.xspace import read_profile

    tf = tensorflow_loaded

    class Slots(tf.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self.slot = None

        @tf.function
        def __call__(self, x: Any) -> Any:
            if self.slot is None:
                self.slot = tf.Variable(tf.zeros((64, 64)))
            return self.slot.assign_add(x)

    profiler = ProfilerRun()
    try:
        profiler.start()
        Slots()(tf.ones((64, 64)))
        events = read_profile(profiler.stop()).events
    finally:
        profiler.close()
    kept = [(e.op, e.requested_bytes) for e in events if e.allocate and not e.first_call and e.requested_bytes > 64]
    assert ("zeros", 64 * 64 * 4) in kept, kept
