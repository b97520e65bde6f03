"""What a test holds at its peak, down to the line: an array a test keeps names the user's line that
made it (the call site of the put, of the eager op, of the jitted step), in a regression's message,
in `devmem show` and in the report, the same in every selection."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pytest_devmem.files import frames_from

KEEP = """
import jax
import jax.numpy as jnp
import numpy as np

ROWS = {rows}

def test_keep():
    kept = jax.device_put(np.ones((ROWS, 256), np.float32))
    sines = jnp.sin(kept)
    assert kept.shape == sines.shape
"""
PUT_LINE, SIN_LINE = (
    "mymodel.py:" + str(next(n for n, line in enumerate(KEEP.strip().splitlines(), 1) if marker in line))
    for marker in ("device_put(", "jnp.sin(")
)


def test_a_kept_put_and_an_eager_output_name_their_lines_when_they_grow(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(mymodel=KEEP.format(rows=256))
    pytester.runpytest_inprocess("mymodel.py", "--devmem-mode=ondemand", "--devmem-update").assert_outcomes(passed=1)
    stored = json.loads(next((pytester.path / "baselines").rglob("*.json")).read_text())
    entry = stored["records"]["mymodel.py::test_keep"]["ondemand"]
    assert entry["lines_at_peak"] == {"device_put": {PUT_LINE: 262144}, "jit(sin)": {SIN_LINE: 262144}}

    shown = subprocess.run(
        [sys.executable, "-m", "pytest_devmem.cli", "show", "baselines"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"| device_put | {PUT_LINE} | 256.00 KiB |" in shown
    assert f"| jit(sin) | {SIN_LINE} | 256.00 KiB |" in shown

    pytester.makepyfile(mymodel=KEEP.format(rows=256 * 16))
    result = pytester.runpytest_inprocess("mymodel.py", "--devmem-mode=ondemand", "--devmem-report=now.json")
    result.assert_outcomes(failed=1)
    grew = result.stdout.str().split("what grew at the peak:")[1].split("\n")[0]
    assert f"device_put 256.00 KiB → 4.00 MiB: made at {PUT_LINE} (256.00 KiB → 4.00 MiB)" in grew
    assert f"jit(sin) 256.00 KiB → 4.00 MiB: made at {SIN_LINE} (256.00 KiB → 4.00 MiB)" in grew
    record = json.loads((pytester.path / "now.json").read_text())["records"][0]
    assert record["trace"]["lines_at_peak"]["device_put"] == {PUT_LINE: 4194304}
    compared = subprocess.run(
        [sys.executable, "-m", "pytest_devmem.cli", "compare", "baselines", "now.json"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
    ).stdout
    assert f"device_put 256.00 KiB → 4.00 MiB: made at {PUT_LINE}" in compared.split("What grew at the peak:")[1]
    assert record["baseline"]["lines"]["baseline"]["device_put"] == {PUT_LINE: 262144}


def test_a_holder_absent_from_the_baseline_names_its_line_not_a_guess(
    jax_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        mymodel="""
        import jax, jax.numpy as jnp, numpy as np, os

        def test_keep():
            kept = jax.device_put(np.ones((1024, 1024), np.float32))
            if os.environ.get("MORE"):
                extra = jnp.cos(kept) + 1
            assert kept.shape == (1024, 1024)
        """
    )
    pytester.runpytest_inprocess("mymodel.py", "--devmem-mode=ondemand", "--devmem-update").assert_outcomes(passed=1)
    monkeypatch.setenv("MORE", "1")
    result = pytester.runpytest_inprocess("mymodel.py", "--devmem-mode=ondemand")
    result.assert_outcomes(failed=1)
    grew = result.stdout.str().split("what grew at the peak:")[1].split("\n")[0]
    assert "jit(add) 0 B → 4.00 MiB: made at mymodel.py:6 (4.00 MiB)" in grew  # the baseline listed every holder


WRAPS_JIT = """
import functools
import os

import jax
{register}

def jit(function):  # a library's jit, as Flax's nnx.jit wraps jax.jit
    compiled = jax.jit(function)

    @functools.wraps(function)
    def call(*args):
        return compiled(*args)

    return call


def scale(x):  # an eager op inside the library, as Flax's layers run them
    return x * 3.0
"""
REGISTERS = "from jax._src import source_info_util\n\nsource_info_util.register_exclusion(os.path.dirname(__file__))"
USES_A_LIBRARY = """
import jax.numpy as jnp
import {library}

step = {library}.jit(lambda x: x * 2.0)


def test_step():
    x = jnp.ones((256, 1024))
    y = step(x)
    z = {library}.scale(x)
    assert y.shape == z.shape
"""


def test_a_librarys_wrapped_jit_names_the_users_call_not_the_library(
    jax_loaded: object, pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 53.7: a library inside the project that registers its files for JAX to skip (as Flax
    does), and one installed outside the project that does not: each step's and eager op's line is
    the test's call."""
    outside = tmp_path_factory.mktemp("installed")
    (outside / "outlib.py").write_text(WRAPS_JIT.format(register=""))
    pytester.mkpydir("inlib").joinpath("__init__.py").write_text(WRAPS_JIT.format(register=REGISTERS))
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(outside)!r})")
    for library in ("inlib", "outlib"):
        pytester.makepyfile(**{f"test_{library}": USES_A_LIBRARY.format(library=library)})
    result = pytester.runpytest_inprocess("--devmem-mode=ondemand", "--devmem-report=r.json")
    result.assert_outcomes(passed=2)
    for record in json.loads((pytester.path / "r.json").read_text())["records"]:
        test = record["test_id"].split("::")[0]
        lines = record["trace"]["lines_at_peak"]
        assert lines["jit(<lambda>)"] == {f"{test}:9": 2**20}, lines
        assert lines["jit(multiply)"] == {f"{test}:10": 2**20}, lines


TF_STEP = """
import tensorflow as tf


@tf.function
def inner(x):
    return tf.concat([x] * 4, axis=0)


@tf.function
def step(x, w):
    y = tf.matmul(x, w)
    return inner(y), y


def test_tf():
    x = tf.ones((256, 256))
    kept, y = step(x, x)
    eager = tf.matmul(x, x)

    @tf.function
    def local(x):
        return tf.concat([x, x], axis=0) * 2.0

    doubled = local(eager)
    assert kept.shape[0] == 1024 and doubled.shape[0] == 512
"""


def test_tensorflow_names_a_functions_ops_by_their_lines_and_an_eager_op_by_none(
    tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    def line(marker: str) -> str:
        return "mymodel.py:" + str(next(n for n, text in enumerate(TF_STEP.strip().splitlines(), 1) if marker in text))

    pytester.makepyfile(mymodel=TF_STEP)
    result = pytester.runpytest_inprocess("mymodel.py", "--devmem-mode=growth", "--devmem-report=now.json")
    result.assert_outcomes(passed=1)
    lines = json.loads((pytester.path / "now.json").read_text())["records"][0]["trace"]["lines_at_peak"]
    assert lines["MatMul in step"] == {line("tf.matmul(x, w)"): 262144}  # the op's node in the function's graph
    assert lines["PartitionedCall/concat in step"] == {line("tf.concat("): 1048576}  # inlined from `inner`
    assert lines["MatMul"] == {"": 262144}  # an eager op: TensorFlow records no line, none is guessed
    # a function local to the test, which the runtime removes when the test returns: read before it goes
    assert line("tf.concat([x, x]") in json.dumps(lines)


def test_a_stored_line_reads_the_same_from_any_checkout_and_environment(tmp_path: Path) -> None:
    """A line in an installed package (an optimizer's `zeros_like`) is named from the packages' folder,
    a project's from the project's root: a baseline written from one checkout and virtual environment
    reads the same from another's."""
    installed = Path(sysconfig.get_paths()["purelib"])
    frames = (
        f"{installed / 'optax' / 'tree_utils' / '_tree_math.py'}:335, {tmp_path / 'tests' / 'test_m.py'}:7, /opt/x.py:3"
    )
    assert frames_from(tmp_path, frames) == "optax/tree_utils/_tree_math.py:335, tests/test_m.py:7, /opt/x.py:3"


def test_a_traces_sites_are_named_from_the_project_as_the_reports_lines_are(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(mymodel=KEEP.format(rows=256))
    pytester.runpytest_inprocess(
        "mymodel.py", "--devmem-mode=ondemand", "--devmem-traces=traces", "--devmem-report=r.json"
    ).assert_outcomes(passed=1)
    (trace,) = (pytester.path / "traces").glob("*.csv")
    from pytest_devmem.model.trace import Trace

    read = Trace.read_csv(trace)
    sites = {read.names[code] for code in read.sites} - {""}
    lines = json.loads((pytester.path / "r.json").read_text())["records"][0]["trace"]["lines_at_peak"]
    assert {PUT_LINE, SIN_LINE} <= sites and not any(str(pytester.path) in site for site in sites), sites
    assert {site for held in lines.values() for site in held} <= sites  # CI paths stay out of the artifacts
