"""TensorFlow allocates the same in every run and any order (real TensorFlow on CPU): a NumPy array
made a tensor is copied into TensorFlow's allocator wherever NumPy put it, and the executor takes a
graph's ops in one order (TF_DETERMINISTIC_ORDER=1, set unless the user set it)."""

from __future__ import annotations

import csv
from pathlib import Path

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
