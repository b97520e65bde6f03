"""Every selection gives the same record: a differential harness over one small project as users
write it (a JAX model module with a module-level jit, params built in a fixture, an unmarked test
that runs the same programs first, JAX's eager helpers, `max_compiles` tests, TensorFlow tests
sharing a tf.function (first called by either), JAX and TensorFlow in one test, the fixture's pool,
and a step sharded over four devices).

    python -m benchmarks.bench_selection [--keep DIR]

The project runs as users run it: every test measured, only the marked ones (no `--devmem-mode`),
reversed, in two pytest-split shards, under `-n 2`, and three tests alone, after nothing: nine
fresh sessions. Every test's record must be the same in each: its verdicts, every figure, the
number of events in its trace, who held the memory at its peak and the lines that made it. Prints each selection with the
records that differ from the all-measured session's (none is the target) and exits 1 where any
does. The test suite runs the two sessions that matter most (all measured, marked only) on the
same project (`tests/plugin/test_order_independence.py`); `benchmarks/bench_gate.py` runs the same
check on a third-party suite.

Everything is held exactly, TensorFlow's figures too (the plugin runs its executor in a deterministic
order, TF_DETERMINISTIC_ORDER, and copies NumPy arrays into its allocator), but a `tf.data`
pipeline's peak: the pipeline runs ahead of the test on its own threads, so its figure may move by
up to TF_DATA_RUN_TO_RUN from one run to the next (docs/order-independence.md); its verdict not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFTEST = """
import os

# four CPU devices for the sharded test, set before JAX is imported (examples/conftest.py does the same)
FLAG = "--xla_force_host_platform_device_count=4"
if FLAG.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FLAG}".strip()


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("DEVMEM_TEST_REVERSE") == "1":
        items.reverse()
"""

MLP = """
import jax
import jax.numpy as jnp


def init_params(key, sizes):
    params = []
    keys = jax.random.split(key, len(sizes) - 1)
    for k, m, n in zip(keys, sizes[:-1], sizes[1:]):
        params.append({"w": jax.random.normal(k, (m, n)) * (2 / m) ** 0.5, "b": jnp.zeros((n,))})
    return params


def forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(forward(params, x)) * y, axis=-1))


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss
"""

JAX_TESTS = """
import jax
import jax.numpy as jnp
import pytest

from mlp import forward, init_params, train_step


def batch(n=128):
    return jnp.ones((n, 784)), jax.nn.one_hot(jnp.zeros((n,), jnp.int32), 10)


@pytest.fixture
def params():
    return init_params(jax.random.PRNGKey(0), [784, 512, 10])


def test_train_step():  # unmarked: runs the same programs first, measured only with --devmem-mode
    p = init_params(jax.random.PRNGKey(0), [784, 512, 512, 10])
    p, loss = train_step(p, *batch())
    assert jnp.isfinite(loss)


@pytest.mark.devmem(max_compiles=1)
def test_train_step_compiles_once(params):
    x, y = batch()
    for _ in range(3):
        params, loss = train_step(params, x, y)
    assert jnp.isfinite(loss)


@pytest.mark.devmem(limit="64MiB")
def test_inference_fits():
    p = init_params(jax.random.PRNGKey(0), [784, 512, 10])
    out = jax.jit(forward)(p, jnp.ones((512, 784)))
    assert out.shape == (512, 10)


@pytest.mark.devmem(max_compiles=1)
def test_jax_retraced_on_every_call():
    scale = jax.jit(lambda x: x * 2)
    for n in (64, 128):
        scale(jnp.ones(n)).block_until_ready()  # a new shape: a second executable


@pytest.mark.devmem
def test_sharded_step():
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(jax.devices()[:4], ("data",))
    batch = jax.device_put(jnp.ones((1024, 256)), NamedSharding(mesh, PartitionSpec("data", None)))
    weights = jax.device_put(jnp.full((256, 256), 0.01), NamedSharding(mesh, PartitionSpec()))
    step = jax.jit(lambda w, b: w - 0.1 * jax.grad(lambda w: jnp.mean(jnp.tanh(b @ w) ** 2))(w))
    for _ in range(3):
        weights = step(weights, batch)
    weights.block_until_ready()


@pytest.mark.devmem
def test_pool(devmem):
    handles = [devmem.pool.alloc(2**20) for _ in range(4)]
    for handle in handles[::2]:
        devmem.pool.free(handle)
"""

TF_TESTS = """
import pytest

tf = pytest.importorskip("tensorflow")


@tf.function
def project(x):  # first called by whichever TensorFlow test runs first: traced, optimised, its kernels built
    return tf.reduce_sum(tf.matmul(x, x) * 2.0)


def test_tf_matmul():  # unmarked: TensorFlow's first run in the process, measured only with --devmem-mode
    x = tf.random.normal((128, 128), seed=1)
    w = tf.Variable(tf.ones((128, 128)))
    assert tf.reduce_sum(tf.matmul(x, w)).shape == () == project(x).shape


@pytest.mark.devmem
def test_tf_train_step():
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
    project(tf.ones((128, 128)))


@pytest.mark.devmem(frameworks=("jax", "tf"))
def test_tf_pipeline_feeds_a_jax_step():
    import jax
    import jax.numpy as jnp

    data = tf.data.Dataset.from_tensor_slices(tf.ones((64, 128))).batch(16)
    step = jax.jit(lambda a: jnp.tanh(a) @ jnp.ones((128, 64)))
    for chunk in data:
        step(jnp.asarray(chunk.numpy())).block_until_ready()
"""

COMPARED = (
    "outcome",
    "peak_bytes_in_use",
    "peak_bytes_requested",
    "peak_bytes_reserved",
    "fragmentation",
    "worst_fragmentation",
    "oom",
    "compiles",
    "leaked_bytes",
    "failed_by_devmem",
    "devices",
)

TF_DATA_RUN_TO_RUN = 2048
"""Bytes a test with a `tf.data` pipeline may see its peak move by from one run to the next: the
pipeline's threads prefetch ahead of the test (docs/order-independence.md)."""


def figures(report: Path) -> dict[str, dict[str, object]]:
    """Per test: its verdict and figures, the events in its trace, what held memory at its peak and the
    lines that made it."""
    records = json.loads(report.read_text())["records"]
    return {
        r["test_id"]: {
            **{key: r.get(key) for key in COMPARED},
            "events": (r.get("trace") or {}).get("events"),
            "at_peak": (r.get("trace") or {}).get("at_peak"),
            "lines_at_peak": (r.get("trace") or {}).get("lines_at_peak"),
            "needed": (r.get("trace") or {}).get("needed"),
        }
        for r in records
    }


def differences(found: dict[str, dict[str, object]], expected: dict[str, dict[str, object]]) -> list[str]:
    """What differs, test by test (a `tf.data` pipeline's peaks within TF_DATA_RUN_TO_RUN)."""
    problems = []
    for test, record in found.items():
        wanted = expected.get(test)
        if wanted is None:
            problems.append(f"{test}: not in the reference run")
            continue
        for key in sorted(set(record) | set(wanted)):
            a, b = record.get(key), wanted.get(key)
            if "pipeline" in test and key not in ("outcome", "failed_by_devmem", "oom"):
                if key in ("peak_bytes_in_use", "peak_bytes_requested") and isinstance(a, int) and isinstance(b, int):
                    if abs(a - b) > TF_DATA_RUN_TO_RUN:
                        problems.append(f"{test}: {key} {a} here, {b} in the reference run")
                continue
            if a != b:
                problems.append(f"{test}: {key} {a!r} here, {b!r} in the reference run")
    return problems


def write_project(directory: Path) -> None:
    """The project's files in `directory`."""
    for name, text in (
        ("conftest.py", CONFTEST),
        ("mlp.py", MLP),
        ("test_jax.py", JAX_TESTS),
        ("test_tf.py", TF_TESTS),
    ):
        (directory / name).write_text(text.lstrip("\n"))


COMMON = ("-p", "no:cacheprovider", "-p", "no:randomly")

ALONE = ("test_jax.py::test_inference_fits", "test_tf.py::test_tf_train_step", "test_jax.py::test_sharded_step")
"""Tests run alone, after nothing: the selection a developer makes while fixing one."""


def session(directory: Path, name: str, *args: str, reverse: bool = False) -> dict[str, dict[str, object]]:
    """One fresh pytest session over the project; each test's figures from its report."""
    environment = dict(os.environ)
    environment.pop("DEVMEM_TEST_REVERSE", None)
    if reverse:
        environment["DEVMEM_TEST_REVERSE"] = "1"
    report = directory / f"{name}.json"
    command = [sys.executable, "-m", "pytest", *COMMON, f"--devmem-report={report}", *args]
    done = subprocess.run(command, cwd=directory, env=environment, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1) or not report.exists():
        raise SystemExit(
            f"{name}: the project did not run ({' '.join(command)}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
        )
    return figures(report)


def selections(directory: Path) -> tuple[dict[str, dict[str, object]], dict[str, dict[str, dict[str, object]]]]:
    """The all-measured session's figures, and each other selection's."""
    every = session(directory, "all", "--devmem-mode=prealloc")
    found = {"marked tests only": session(directory, "marked")}
    found["reversed"] = session(directory, "reverse", "--devmem-mode=prealloc", reverse=True)
    found["-n 2"] = session(directory, "xdist", "--devmem-mode=prealloc", "-n", "2")
    shards = [
        session(directory, f"shard{group}", "--devmem-mode=prealloc", "--splits", "2", "--group", str(group))
        for group in (1, 2)
    ]
    found["two shards"] = {**shards[0], **shards[1]}
    for test in ALONE:
        found[f"{test} alone"] = session(directory, test.split("::")[-1], "--devmem-mode=prealloc", test)
    return every, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, default=None, help="Write the project and its reports here (kept)")
    args = parser.parse_args(argv)
    try:
        import pytest_split  # noqa: F401  # the shards' selection
    except ImportError:
        raise SystemExit("pytest-split is not installed: pip install -e '.[test]'") from None
    with tempfile.TemporaryDirectory(prefix="devmem-selection-") as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        write_project(directory)
        start = time.perf_counter()
        every, found = selections(directory)
        seconds = time.perf_counter() - start
    sessions = len(found) + 2  # the all-measured one, and the two shards compared as one selection
    print(f"every selection gives the same record: {len(every)} tests, {sessions} sessions in {seconds:.0f} s")
    print(f"{'selection':<44} {'tests':>5}  records that differ from every test measured")
    status = 0
    for name, records in found.items():
        problems = differences(records, every)
        status = status or int(bool(problems))
        print(f"{name:<44} {len(records):>5}  {len(problems)}")
        for problem in problems:
            print(f"    {problem}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
