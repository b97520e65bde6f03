"""A small Keras/TensorFlow suite with the plugin off and on, and what TensorFlow's capture costs per test.

    python -m benchmarks.bench_tensorflow [--tests 5] [--repeat 3] [--quick]

The suite holds `--tests` tests of each kind: a GradientTape train step in a tf.function, a Keras
`fit`, a tf.data pipeline and a few eager ops. Runs alternate off/on so drift hits both equally; the
fastest of each counts. `session` is the time pytest reports (it includes importing TensorFlow at
collection), `tests` the time from each test's start to its end summed over the suite, so
`(on - off) / tests` is what the plugin adds to a test. A third configuration runs the plugin with
TensorFlow's capture replaced by one that captures nothing: the difference between the two "on"
rows is what TensorFlow's capture costs a test in all, its profiler recording while the test runs
included. Its `begin` (start a profiler session) and `end` (collect, read and convert the events)
are also timed inside the run, per test, by kind.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = """
import numpy as np
import pytest
import tensorflow as tf

COUNT = range({count})


def model():
    return tf.keras.Sequential([tf.keras.layers.Input((64,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)])


@pytest.mark.parametrize("n", COUNT)
def test_train_step(n):
    net, optimizer = model(), tf.keras.optimizers.SGD(0.01)
    x, y = tf.random.normal((256, 64), seed=n), tf.range(256) % 10
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
        return loss

    for _ in range(5):
        loss = step()
    assert float(loss) > 0


@pytest.mark.parametrize("n", COUNT)
def test_fit(n):
    net = model()
    net.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = net.fit(np.ones((512, 64), np.float32), np.arange(512) % 10, batch_size=64, epochs=1, verbose=0)
    assert history.history["loss"]


@pytest.mark.parametrize("n", COUNT)
def test_input_pipeline(n):
    images = tf.random.uniform((1024, 28, 28), maxval=255, dtype=tf.int32, seed=n)
    dataset = tf.data.Dataset.from_tensor_slices(images).map(lambda x: tf.cast(x, tf.float32) / 255.0).batch(64).prefetch(2)
    assert sum(1 for _ in dataset) == 16


@pytest.mark.parametrize("n", COUNT)
def test_eager_ops(n):
    a = tf.random.normal((512, 512), seed=n)
    for _ in range(10):
        a = tf.nn.relu(tf.matmul(a, a) / 512.0)
    assert a.shape == (512, 512)
"""

TIMING_CONFTEST = """
import json
import os
import time

import pytest

TIMES = {"tests": 0.0, "capture": {}}
_started = {}


def pytest_runtest_logstart(nodeid, location):
    _started[nodeid] = time.perf_counter()


def pytest_runtest_logfinish(nodeid, location):
    TIMES["tests"] += time.perf_counter() - _started.pop(nodeid)


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    manager = config.pluginmanager.get_plugin("devmem-manager")
    if manager is None:
        return
    capture = manager.measurement.tensorflow_capture
    if os.environ.get("DEVMEM_BENCH_NO_TF_CAPTURE"):
        from pytest_devmem.capture.tensorflow import TensorFlowWindow
        from pytest_devmem.model.trace import Trace

        capture.begin = lambda: None
        capture.end = lambda reading=None: TensorFlowWindow(Trace(), [])
        return
    begin, end = capture.begin, capture.end
    current = {}

    def timed_begin():
        start = time.perf_counter()
        begin()
        current["begin"] = time.perf_counter() - start

    def timed_end(reading=None):
        start = time.perf_counter()
        window = end(reading)
        spent = current.pop("begin", 0.0) + time.perf_counter() - start
        kind = os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split("[")[0]
        TIMES["capture"].setdefault(kind, []).append([spent, len(window.events or ())])
        return window

    capture.begin, capture.end = timed_begin, timed_end


def pytest_unconfigure(config):
    with open(os.environ["DEVMEM_BENCH_TIMES"], "w") as file:
        json.dump(TIMES, file)
"""

COMMON = ["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist"]
ON = "on (prealloc, in-process)"
NO_CAPTURE = "on, no TensorFlow capture"
CONFIGURATIONS = {
    "off": ["-p", "no:devmem"],
    ON: ["--devmem-mode=prealloc"],
    NO_CAPTURE: ["--devmem-mode=prealloc"],
}


def run_once(directory: Path, name: str) -> tuple[float, float, dict[str, object]]:
    times = directory / "times.json"
    # bytecode caching on, as in a normal install (see bench_plugin); TensorFlow's C++ log lines off
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONDONTWRITEBYTECODE", "DEVMEM_BENCH_NO_TF_CAPTURE")
    }
    environment.update(DEVMEM_BENCH_TIMES=str(times), TF_CPP_MIN_LOG_LEVEL=environment.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    if name == NO_CAPTURE:
        environment["DEVMEM_BENCH_NO_TF_CAPTURE"] = "1"
    extra = CONFIGURATIONS[name]
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", *COMMON, *extra, str(directory)],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        cwd=directory,
    )
    wall = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"benchmark suite failed:\n{completed.stdout}\n{completed.stderr}")
    session = float(re.findall(r" in ([0-9.]+)s", completed.stdout)[-1])
    return wall, session, json.loads(times.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=5, help="Tests of each of the 4 kinds (default 5)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="Runs of each configuration; the fastest counts (default 3)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="One test of each kind, one run, the plugin on only (no reference run): a check that it runs",
    )
    args = parser.parse_args(argv)
    names = [ON] if args.quick else list(CONFIGURATIONS)  # --quick: the capture runs, no reference
    if args.quick:
        args.tests, args.repeat = 1, 1
    if importlib.util.find_spec("tensorflow") is None:  # the runs import it; this process need not
        print("TensorFlow is not installed: the TensorFlow benchmark is skipped")
        return 0
    count = 4 * args.tests
    print(
        f"TensorFlow suite: {count} tests (train step, Keras fit, tf.data, eager ops; {args.tests} each), best of {args.repeat}"
    )
    best: dict[str, tuple[float, float, float]] = {name: (float("inf"),) * 3 for name in names}
    captures: dict[str, list[list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="devmem-bench-tf-") as scratch:
        directory = Path(scratch)
        (directory / "test_keras_suite.py").write_text(SUITE.format(count=args.tests))
        (directory / "conftest.py").write_text(TIMING_CONFTEST)
        for _ in range(args.repeat):
            for name in names:
                wall, session, times = run_once(directory, name)
                tests = float(times["tests"])  # type: ignore[arg-type]
                if tests < best[name][2]:
                    best[name] = (wall, session, tests)
                    if name == ON:
                        captures = times["capture"]  # type: ignore[assignment]
    off_tests = best["off"][2] if "off" in best else None
    print(
        f"{'configuration':<28} {'wall s':>8} {'session s':>10} {'tests s':>8} {'tests ratio':>12} {'ms/test added':>14}"
    )
    for name, (wall, session, tests) in best.items():
        ratio, added = (
            (f"{tests / off_tests:>11.3f}x", f"{(tests - off_tests) / count * 1000:>14.1f}")
            if off_tests
            else (f"{'(no off run)':>12}", f"{'':>14}")
        )
        print(f"{name:<28} {wall:>8.3f} {session:>10.3f} {tests:>8.3f} {ratio} {added}")
    if NO_CAPTURE in best:
        print(
            f"TensorFlow's capture in all, per test: {(best[ON][2] - best[NO_CAPTURE][2]) / count * 1000:.1f} ms (the two \"on\" rows' difference)"
        )
    print(
        "TensorFlow capture per test (begin + end: profiler session, XSpace read, trace events), from the fastest run:"
    )
    print(f"{'kind':<22} {'tests':>6} {'median ms':>10} {'max ms':>8} {'events':>8}")
    everything = [entry for entries in captures.values() for entry in entries]
    for kind, entries in sorted(captures.items()) + [("all", everything)]:
        spent = sorted(entry[0] * 1000 for entry in entries)
        events = sum(entry[1] for entry in entries) / max(len(entries), 1)
        median = statistics.median(spent) if spent else 0.0
        print(f"{kind:<22} {len(entries):>6} {median:>10.2f} {max(spent, default=0.0):>8.2f} {events:>8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
