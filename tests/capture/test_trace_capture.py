"""Trace-first measurement with real JAX and TensorFlow on CPU: hand-made programs give exactly the
trace XLA's allocations imply, and the same work gives the same figures in any order or process."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from pytest_devmem.capture import TraceRecorder
from pytest_devmem.capture.jax import JaxCapture
from pytest_devmem.capture.measurement import merge
from pytest_devmem.model.trace import Trace


def shape(events: Any) -> list[tuple[str, int, int, str]]:
    return [(e.action, e.pointer, e.size, e.label) for e in events]


def test_installed_jax_is_hooked_not_left_to_a_fallback(capture: tuple[TraceRecorder, JaxCapture]) -> None:
    from pytest_devmem.supported import JAX

    _, jax_capture = capture
    assert jax_capture.installed and jax_capture.note == ""
    assert JAX.problem(jax_capture.version) is None  # every release the matrix runs this on is in the range


def test_a_jax_without_a_hook_is_not_traced_and_says_so(jax_loaded: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from jax._src import dispatch

    monkeypatch.delattr(dispatch, "_batched_device_put_impl")
    jax_capture = JaxCapture(TraceRecorder())
    assert not jax_capture.install()
    assert (
        "lacks dispatch._batched_device_put_impl" in jax_capture.note
        and "JAX allocations are not traced" in jax_capture.note
    )


def test_a_jitted_matmul_gives_exactly_its_outputs_temp_donation_and_deletions(
    capture: tuple[TraceRecorder, JaxCapture],
) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    recorder, _ = capture
    layer = jax.jit(lambda a, b: jnp.tanh(a @ b) @ b)
    step = jax.jit(lambda x: x + 1, donate_argnums=0)
    host = np.ones((256, 256), np.float32)
    temp = layer.lower(host, host).compile().memory_analysis().temp_size_in_bytes  # the package's own answer
    assert temp > 0
    recorder.begin()
    a = jax.device_put(host)
    b = jax.device_put(host)
    out = layer(a, b)
    stepped = step(out)  # `out` is donated: its buffer becomes the output, no new allocation
    a.delete()
    del b
    events = recorder.end()
    assert out.is_deleted() and not stepped.is_deleted()
    assert shape(events) == [
        ("allocate", 1, 262144, "device_put"),
        ("allocate", 2, 262144, "device_put"),
        ("allocate", 3, 262144, "jit(<lambda>)"),
        ("allocate", 4, temp, "jit(<lambda>) temp"),
        ("free", 4, temp, "jit(<lambda>) temp"),
        ("free", 1, 262144, "device_put"),  # a free carries its allocation's label
        ("free", 2, 262144, "device_put"),
    ]


def test_a_cache_hit_gives_the_same_trace_as_the_compile(capture: tuple[TraceRecorder, JaxCapture]) -> None:
    import jax
    import jax.numpy as jnp

    recorder, _ = capture
    layer = jax.jit(lambda a: jnp.tanh(a @ a.T) @ a)
    traces = []
    for _ in range(2):  # first run compiles, second hits the cache
        recorder.begin()
        layer(jnp.ones((300, 300))).block_until_ready()
        traces.append(shape(recorder.end()))
    assert traces[0] == traces[1]
    assert any(label == "jit(<lambda>) temp" for _, _, _, label in traces[0])


def test_memory_that_existed_before_the_window_stays_out_of_the_trace(
    capture: tuple[TraceRecorder, JaxCapture],
) -> None:
    import jax.numpy as jnp

    recorder, _ = capture
    before = jnp.ones((512, 512))
    recorder.begin()
    doubled = before * 2
    del before  # a free of memory the window never saw: ignored
    events = recorder.end()
    assert [(e.action, e.size) for e in events] == [("allocate", 512 * 512 * 4)]
    del doubled


def test_host_arguments_are_transferred_for_the_run_only(capture: tuple[TraceRecorder, JaxCapture]) -> None:
    import jax
    import numpy as np

    recorder, _ = capture
    double = jax.jit(lambda x: x * 2)
    recorder.begin()
    result = double(np.ones((128, 128), np.float32))
    events = recorder.end()
    assert shape(events) == [
        ("allocate", 1, 65536, "jit(<lambda>) argument"),
        ("allocate", 2, 65536, "jit(<lambda>)"),
        ("free", 1, 65536, "jit(<lambda>) argument"),
    ]
    del result


def test_merge_keeps_time_order_and_separate_ids() -> None:
    from pytest_devmem.model.trace import TraceEvent

    jax_events = [
        TraceEvent("allocate", 1, 10, 0.5, source="jax", site="model.py:3"),
        TraceEvent("free", 1, 10, 0.7, source="jax", site="model.py:3"),
    ]
    tf_events = [TraceEvent("allocate", 1, 99, 0.0, source="tensorflow")]
    merged = merge(jax_events, tf_events)
    assert [(e.action, e.pointer, e.source, e.site) for e in merged] == [
        ("allocate", 1, "tensorflow", ""),
        ("allocate", 2, "jax", "model.py:3"),  # each keeps the line that made its buffer
        ("free", 2, "jax", "model.py:3"),
    ]


SAME_WORK = """
import jax, jax.numpy as jnp

layer = jax.jit(lambda a, w: jnp.tanh(a @ w) @ w.T)

def work():
    a = jnp.ones((256, 512))
    w = jnp.ones((512, 1024))
    layer(a, w).block_until_ready()

def test_first():
    work()

def test_second():
    work()

def test_third():
    work()
"""

REVERSE_CONFTEST = """
import os
def pytest_collection_modifyitems(items):
    if os.environ.get("REVERSE_ORDER"):
        items.reverse()
"""


def peaks(pytester: pytest.Pytester, name: str = "r.json") -> dict[str, tuple[int, int, float]]:
    records = json.loads((pytester.path / name).read_text())["records"]
    return {
        r["test_id"].split("::")[-1]: (r["peak_bytes_in_use"], r["peak_bytes_reserved"], r["fragmentation"])
        for r in records
    }


def test_same_work_same_figures_compiled_cached_reversed_in_a_child_and_under_xdist(
    jax_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_work=SAME_WORK)
    pytester.makeconftest(REVERSE_CONFTEST)
    pytester.runpytest_inprocess("--devmem-mode=growth", "--devmem-report=r.json").assert_outcomes(passed=3)
    in_order = peaks(pytester)
    assert len(set(in_order.values())) == 1, in_order  # compiled in the first test, cache hits after
    assert in_order["test_first"][0] > 0
    monkeypatch.setenv("REVERSE_ORDER", "1")
    pytester.runpytest_inprocess("--devmem-mode=growth", "--devmem-report=reversed.json").assert_outcomes(passed=3)
    assert peaks(pytester, "reversed.json") == in_order
    monkeypatch.delenv("REVERSE_ORDER")
    pytester.runpytest_inprocess("--devmem-mode=growth", "-n", "2", "--devmem-report=xdist.json").assert_outcomes(
        passed=3
    )
    assert peaks(pytester, "xdist.json") == in_order
    pytester.makepyfile(test_work="import pytest\npytestmark = pytest.mark.devmem(mode='growth')\n" + SAME_WORK)
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=child.json")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*isolated regimes: growth (1 child process(es))*"])
    assert peaks(pytester, "child.json") == in_order


def test_growth_and_prealloc_reserve_differently_for_the_same_jax_test(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_work=SAME_WORK)
    pytester.runpytest_inprocess("--devmem-mode=growth", "--devmem-report=growth.json").assert_outcomes(passed=3)
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=prealloc.json").assert_outcomes(passed=3)
    growth, prealloc = peaks(pytester, "growth.json")["test_first"], peaks(pytester, "prealloc.json")["test_first"]
    assert growth[0] == prealloc[0]  # the same chunks in use
    assert prealloc[1] == 12 * 2**30  # 75% of the simulated 16 GiB, reserved at the first allocation
    assert growth[1] < 64 * 2**20  # growth took regions of 2 MiB, doubling
    assert growth[2] is not None and prealloc[2] is not None  # fragmentation, measured for framework code


def test_jax_imported_inside_the_test_body_is_measured(jax_loaded: object, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_late_import():
            import jax.numpy as jnp
            big = jnp.zeros((64, 2**20), dtype=jnp.float32)  # 256 MiB
            big.block_until_ready()
        """
    )
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=r.json").assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["peak_bytes_in_use"] >= 256 * 2**20
    assert record["trace"]["by_source"]["jax"]["peak_live_bytes"] >= 256 * 2**20


def test_a_module_scoped_fixture_is_nobodys_memory(jax_loaded: object, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import jax.numpy as jnp

        @pytest.fixture(scope="module")
        def weights():
            return jnp.ones((1024, 1024))

        @pytest.fixture
        def batch():
            return jnp.ones((256, 1024))

        def test_a(weights, batch):
            (batch @ weights).block_until_ready()

        def test_b(weights, batch):
            (batch @ weights).block_until_ready()
        """
    )
    pytester.runpytest_inprocess("--devmem-mode=growth", "--devmem-report=r.json").assert_outcomes(passed=2)
    figures = peaks(pytester)
    assert figures["test_a"] == figures["test_b"]
    assert 2 * 2**20 <= figures["test_a"][0] < 4 * 2**20  # the 1 MiB batch and product; never the 4 MiB weights


KEPT_BY_A_FIXTURE = """
import jax.numpy as jnp
import pytest

@pytest.fixture(scope="{scope}")
def params():
    return jnp.ones((100, 1024, 1024)).block_until_ready()  # 400 MiB, kept

def test_step(params):
    jnp.ones((100, 1024, 1024)).block_until_ready()  # 400 MiB more: 800 MiB of JAX's 768 MiB

def test_small(params):
    jnp.ones((16, 1024, 1024)).block_until_ready()  # 64 MiB more: fits
"""


def test_what_a_module_scoped_fixture_keeps_counts_for_what_fits_as_a_function_scoped_ones_does(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """JAX's pool on a 1 GiB device is 768 MiB; a step of 400 MiB beside 400 MiB of parameters does
    not fit, whether the parameters are the test's (function scope) or a module's: the module's are
    in no figure of the test's, but they are in the pool (a `start` holding them), alone or after
    the test that set them up. The step that fits is measured without them."""
    verdicts = {}
    for scope in ("function", "module"):
        pytester.makepyfile(test_kept=KEPT_BY_A_FIXTURE.format(scope=scope))
        for selection in ([], ["test_kept.py::test_step"]):
            report = f"{scope}{len(selection)}.json"
            pytester.runpytest_inprocess(
                "--devmem-mode=prealloc", "--devmem-device=sim:1GiB", f"--devmem-report={report}", *selection
            )
            for record in json.loads((pytester.path / report).read_text())["records"]:
                verdicts[scope, len(selection), record["test_id"].split("::")[-1]] = (
                    (record["oom"] or {}).get("kind"),
                    record["peak_bytes_in_use"],
                    (record["oom"] or {}).get("kept_before", 0),
                )
    assert verdicts["function", 0, "test_step"][0] == verdicts["module", 0, "test_step"][0] == "limit"
    assert verdicts["module", 0, "test_step"] == verdicts["module", 1, "test_step"]  # set up by it, or alone
    assert verdicts["module", 0, "test_step"][2] == 400 * 2**20  # what the fixture keeps, said
    kind, small, kept = verdicts["module", 0, "test_small"]
    assert kind is None and kept == 0 and 64 * 2**20 <= small < 65 * 2**20  # its own: the fixture's in no figure
    assert verdicts["function", 0, "test_small"][1] == small + 400 * 2**20  # the parameters are its memory there


SET_UP_UNMEASURED = """
import jax.numpy as jnp
import pytest

@pytest.fixture(scope="module")
def table():
    return jnp.ones((64, 2**20))  # 256 MiB, kept

def test_reads_table(table):  # unmarked: runs first, sets the table up
    assert table.shape == (64, 2**20)

@pytest.mark.devmem
def test_step(table):
    jnp.ones((144, 2**20)).block_until_ready()  # 576 MiB beside the table's 256: not in 768 MiB
"""


def test_a_shared_fixture_an_unmeasured_test_set_up_is_kept_in_every_selection(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """Issue 53.1: a measured test keeps what a module fixture holds when an unmarked test set it
    up (its setup is seen all the same), so the verdict is the one of measuring all, or of it alone."""
    pytester.makepyfile(test_unmeasured=SET_UP_UNMEASURED)
    for selection in (["--devmem-mode=prealloc"], [], ["test_unmeasured.py::test_step"]):
        result = pytester.runpytest_inprocess("--devmem-device=sim:1GiB", "-p", "no:randomly", *selection)
        result.assert_outcomes(passed=1 if "--devmem-mode=prealloc" in selection or not selection else 0, failed=1)
        result.stdout.fnmatch_lines(["*JAX could not allocate 576.00 MiB*"])


SHARED_WEIGHTS = """
import jax.numpy as jnp
import pytest

@pytest.fixture(scope="module")
def weights():
    return jnp.ones((1024, 1024))  # 4 MiB
"""
KEPT_BY_SEVERAL_FIXTURES = """
import jax
import jax.numpy as jnp
import pytest

@pytest.fixture(scope="session")
def cache():
    return jnp.ones((3, 1024, 1024)), jnp.ones((3, 1024, 1024))  # two buffers of 12 MiB

@pytest.fixture(scope="module", params=[1, 8], ids=["small", "large"])
def table(request):
    return jnp.ones((request.param, 1024, 1024))  # 4 or 32 MiB

@pytest.fixture(scope="module")
def params():
    key = jax.random.PRNGKey(0)
    return jax.random.normal(key, (2, 1024, 1024)) * 0.02  # 8 MiB: the array normal made is gone

def test_two(weights, cache):
    (weights * 2).block_until_ready()

def test_step(table):
    (table * 2).block_until_ready()

@pytest.mark.parametrize("table", [8], indirect=True)
def test_indirect(table):  # the large table's parameter at another index: pytest gives it the large one
    (table * 2).block_until_ready()

def test_random(params, request):
    request.getfixturevalue("weights")
    (params * 2).block_until_ready()

@pytest.fixture(scope="module")
def emb():
    return jnp.ones((5, 1024, 1024))  # 20 MiB

@pytest.fixture(scope="module")
def head(request):
    request.getfixturevalue("emb")  # set up inside head's setup: still emb's own
    return jnp.zeros((256, 1024))  # 1 MiB

@pytest.fixture(scope="module")
def placed(cache):
    return jax.device_put(cache[0], cache[0].sharding)  # put where it is: cache's own buffer

@pytest.fixture(scope="module")
def raw():
    return jnp.ones((2, 1024, 1024))  # 8 MiB

@pytest.fixture(scope="module")
def trained(raw):
    return jax.jit(lambda p: p * 2, donate_argnums=0)(raw)  # raw's buffer, which XLA aliased

@pytest.fixture(scope="module")
def chained():
    step = jax.jit(lambda p: p * 2, donate_argnums=0)
    p = jnp.ones((1024, 1024))  # 4 MiB, handed from step to step
    for _ in range(3):
        p = step(p)
    p2 = jnp.ones((512, 1024))  # 2 MiB, put onto itself with its buffer given over
    return p, jax.device_put(p2, p2.sharding, donate=True)

def test_head(head):
    (head + 1).block_until_ready()

def test_chained(chained):
    (chained[0] + 1).block_until_ready()

def test_emb(emb):
    (emb + 1).block_until_ready()

def test_placed(placed):
    (placed + 1).block_until_ready()

def test_trained(trained):
    (trained + 1).block_until_ready()
"""
OVERRIDDEN = """
import jax.numpy as jnp
import pytest

@pytest.fixture(scope="module")
def weights(weights):  # overrides the conftest's and asks for it: both are kept
    return weights, jnp.ones((512, 1024))  # 2 MiB more

def test_overridden(weights):
    (weights[1] * 2).block_until_ready()
"""


def test_every_buffer_each_shared_fixture_keeps_is_in_the_pool_of_every_test_that_uses_it_in_any_selection(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """Each buffer a shared fixture keeps is a `start` of its own (a pool serves each as its own
    chunk), for every fixture a test uses (two on one allocator: both; an overriding one and the
    one it asks for by its own name: both), of the parameter the test has (`test_step[large]` keeps
    the large table under `-k large` as in the whole run, as does a test given the same parameter
    indirectly, which pytest serves with the same setup), including arrays made from arrays the
    fixture dropped (`jax.random.normal(...) * 0.02`) and those of a fixture another asked for in its
    body, in the order its fixtures were ready; a buffer two fixtures hold (a put that kept it, a
    donated step's aliased output) once, and one handed on inside a fixture (donated steps, a
    donating put) once; the same in every selection and order, and under xdist."""
    pytester.makeconftest(SHARED_WEIGHTS)
    pytester.makepyfile(test_kept=KEPT_BY_SEVERAL_FIXTURES, test_overridden=OVERRIDDEN)
    tests = ("test_chained", "test_trained", "test_placed", "test_emb", "test_head", "test_random", "test_step[large]")
    tests += ("test_step[small]", "test_two", "test_indirect[8]")
    selections = {
        "all": ([], 11),
        "large": (["-k", "large or indirect or overridden or emb"], 4),
        "reversed": (["test_overridden.py", *(f"test_kept.py::{name}" for name in tests)], 11),
        "xdist": (["-n", "2"], 11),
    }
    kept: dict[str, list[tuple[int, str]]] = {}
    for name, (selection, passed) in selections.items():
        result = pytester.runpytest_inprocess("--devmem-mode=growth", f"--devmem-traces={name}", *selection)
        result.assert_outcomes(passed=passed)
        for path in (pytester.path / name).glob("*.csv"):
            test = path.name.split("[growth]")[0].split("_", 2)[-1]
            starts = [(e.size, e.label) for e in Trace.read_csv(path) if e.action == "start" and e.size]
            assert kept.setdefault(test, starts) == starts, (name, test)
    mib = 2**20

    def held(test: str) -> list[tuple[int, str]]:
        return [(size // mib, label.split()[3]) for size, label in kept[test]]  # what shared fixture NAME keeps

    assert held("test_two") == [(12, "cache"), (12, "cache"), (4, "weights")]  # the session's first
    assert held("test_step[large]") == held("test_indirect[8]") == [(32, "table")]
    assert held("test_step[small]") == [(4, "table")]
    assert held("test_random") == [(8, "params"), (4, "weights")]
    assert held("test_overridden") == [(4, "weights"), (2, "weights")]
    assert held("test_head") == [(20, "emb"), (1, "head")] and held("test_emb") == [(20, "emb")]
    assert held("test_placed") == [(12, "cache"), (12, "cache")]  # the put kept cache's buffer: once
    assert held("test_trained") == [(8, "raw")]  # the step's output is raw's buffer: once
    assert held("test_chained") == [(4, "chained"), (2, "chained")]  # given over inside one fixture: kept once


def test_tensorflow_allocations_enter_the_trace_as_requested(
    tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        """
        import tensorflow as tf

        def test_tf():
            x = tf.ones((4_000_000,), dtype=tf.float32)
            assert float(tf.reduce_sum(x * 2.0)) > 0
        """
    )
    pytester.runpytest_inprocess(
        "--devmem-mode=growth", "--devmem-report=r.json", "--devmem-traces=traces"
    ).assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    trace = Trace.read_csv(next((pytester.path / "traces").glob("*.csv")))
    sizes = {e.label: e.size for e in trace if e.action == "allocate"}
    assert sizes["Fill"] == sizes["Mul"] == 16_000_000  # x and x * 2.0, as requested
    assert {e.source for e in trace} == {"tensorflow"} and record["trace"]["notes"] == []
    # the allocator's own peak counts its chunks, rounded up: never below what was requested
    assert (
        record["sources"]["tensorflow"]["peak_bytes_in_use"]
        >= record["trace"]["by_source"]["tensorflow"]["peak_live_bytes"]
        >= 32_000_000
    )


def test_traces_are_written_as_rmm_csv_and_replay_with_the_devmem_command(
    jax_loaded: object, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_work=SAME_WORK)
    pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-traces=traces", "--devmem-report=r.json"
    ).assert_outcomes(passed=3)
    files = sorted((pytester.path / "traces").glob("*.csv"))
    from pytest_devmem.files import file_name

    assert [f.name for f in files] == sorted(
        file_name(f"test_work.py::test_{n}[prealloc]", ".csv") for n in ("first", "second", "third")
    )
    assert files[0].name.startswith("test_work.py_test_first[prealloc]--")
    trace = Trace.read_csv(files[0])
    assert {e.source for e in trace} == {"jax"}
    from pytest_devmem.cli import main

    assert main(["replay", str(files[0]), "--mode", "growth", "--device", "sim:16GiB"]) == 0
    growth = capsys.readouterr().out
    assert "regime growth on sim:16GiB" in growth and "peak_bytes_in_use" in growth
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert f"| peak_bytes_in_use | {record['peak_bytes_in_use']} |" in growth


@pytest.mark.gpu
def test_real_gpu_regime_leaves_jax_on_the_gpu() -> None:
    """Under every regime's variables JAX must start on the GPU, not fall back to CPU (which jaxlib
    does, after logging it, when it refuses its GPU options)."""
    import os
    import subprocess
    import sys

    from pytest_devmem.model.regime import Regime

    for regime in (Regime.of("prealloc"), Regime.of("fraction", 0.5), Regime.of("growth"), Regime.of("ondemand")):
        environment = dict(os.environ)
        regime.apply(environment)
        backend = subprocess.run(
            [sys.executable, "-c", "import jax; print(jax.default_backend())"],
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert backend == "gpu", (regime.label, backend)


@pytest.mark.gpu
def test_real_gpu_replayed_peak_matches_jax_memory_stats(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replayed trace against JAX's own BFC allocator: its memory_stats() peak over the test. With
    XLA:GPU's autotuner on, JAX's peak also counts the autotuner's scratch while the program compiles
    (measured on an H200: 113 MiB for this matmul, 8 MiB without it), which no trace holds; off, the
    two agree. Later tests stay below the first's peak, which JAX cannot reset: theirs is unknown."""
    pytester.makepyfile(test_work=SAME_WORK)

    def records(report: str) -> dict[str, dict]:
        result = pytester.runpytest_subprocess(
            "--devmem-mode=prealloc", "--devmem-device=cuda:0", f"--devmem-report={report}"
        )
        result.assert_outcomes(passed=3)
        data = json.loads((pytester.path / report).read_text())["records"]
        return {record["test_id"].split("::")[-1]: record for record in data}

    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=0")
    plain = records("plain.json")
    first = plain["test_first"]
    replayed, measured = first["peak_bytes_in_use"], first["sources"]["jax"]["peak_bytes_in_use"]
    assert abs(replayed - measured) <= max(0.1 * measured, 2**20), (replayed, measured)
    for name in ("test_second", "test_third"):
        jax_stats = plain[name]["sources"]["jax"]
        assert jax_stats["available"] and "peak_bytes_in_use" not in jax_stats, jax_stats
        assert "peak is unknown" in jax_stats["note"]
        assert plain[name]["peak_bytes_in_use"] == replayed  # the trace has each test's own peak
    monkeypatch.delenv("XLA_FLAGS")
    tuned = records("tuned.json")["test_first"]
    assert tuned["peak_bytes_in_use"] == replayed  # autotuning changes no buffer of the program's run
    assert tuned["sources"]["jax"]["peak_bytes_in_use"] >= measured
    assert "autotuning scratch" in tuned["sources"]["jax"]["note"]


@pytest.mark.gpu
def test_real_gpu_headline_is_jax_memory_stats_peak_where_a_chunk_is_handed_out_whole(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seven 100 MiB arrays in a JAX pool of about 750 MiB (`fraction`): the seventh takes the free
    chunk left whole, its rest under the request and under 128 MiB (bfc_allocator.cc), so JAX's own
    `memory_stats()["peak_bytes_in_use"]` counts more than was requested. The record's headline is
    that count, to the byte; the requested bytes are beside it."""
    pytester.makepyfile(
        test_seven="""
        import jax
        import jax.numpy as jnp

        def test_seven_arrays():
            arrays = [jnp.zeros((25 * 2**20,), jnp.float32) for _ in range(7)]
            jax.block_until_ready(arrays)
        """
    )
    pynvml = pytest.importorskip("pynvml")
    pynvml.nvmlInit()
    try:
        total = int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)
    finally:
        pynvml.nvmlShutdown()
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=0")
    result = pytester.runpytest_subprocess(
        "--devmem-mode=fraction",
        f"--devmem-fraction={750 * 2**20 / total:.6f}",
        "--devmem-device=cuda:0",
        "--devmem-report=r.json",
    )
    result.assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    measured = record["sources"]["jax"]["peak_bytes_in_use"]
    assert record["peak_bytes_in_use"] == measured, (record["peak_bytes_in_use"], measured)
    assert record["peak_bytes_requested"] < measured  # the last chunk was handed out whole


def test_a_gpu_session_where_jax_fell_back_to_cpu_says_so_loudly(jax_loaded: object) -> None:
    import jax.numpy as jnp

    from pytest_devmem.capture.measurement import Measurement
    from pytest_devmem.model.device import DeviceKind, SimulatedDevice

    class CudaLike(SimulatedDevice):
        """Stands for a CUDA device (its kind and index); JAX, on this machine, runs on CPU."""

        def __init__(self, capacity: int, name: str) -> None:
            super().__init__(capacity, name=name)
            self.kind = DeviceKind.CUDA
            self.index = 0

    jnp.ones(4).block_until_ready()  # JAX's backend has started
    measurement = Measurement(CudaLike(2**30, name="cuda:0 (test)"))
    try:
        measurement.start()
        with pytest.warns(
            RuntimeWarning, match=r"JAX runs on cpu, not on cuda:0 \(test\): jaxlib did not take the GPU"
        ):
            captured = measurement.stop()
    finally:
        measurement.close()
    assert any(note.startswith("JAX runs on cpu, not on cuda:0") for note in captured.notes)


def test_an_untraceable_jax_gives_no_figures_never_a_zero(
    jax_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jax._src import dispatch

    monkeypatch.delattr(dispatch, "_batched_device_put_impl")
    pytester.makepyfile("import jax.numpy as jnp\n\ndef test_jax():\n    jnp.ones((1024, 1024)).block_until_ready()\n")
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=r.json").assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["peak_bytes_in_use"] is None and record["peak_bytes_reserved"] is None
    assert any("JAX allocations are not traced" in note for note in record["trace"]["notes"])


def test_a_function_retraced_on_every_call_is_caught_by_max_compiles(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        """
        import jax
        import jax.numpy as jnp
        import pytest

        @jax.jit
        def scale(x):
            return x * 2

        @pytest.mark.devmem(max_compiles=1)
        def test_retraces():
            for n in range(1, 5):
                scale(jnp.ones(n * 8)).block_until_ready()  # a new shape each call: a new executable

        @pytest.mark.devmem(max_compiles=1)
        def test_stable():
            for _ in range(4):
                scale(jnp.ones(1000)).block_until_ready()
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=r.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the test compiled a function more often than max_compiles allows*",
            "*jit(scale) (scale at *test_a_function_retraced_on_every_call_is_caught_by_max_compiles.py:5): 4 executables, max_compiles=1",
        ]
    )
    assert "\n    (f32[8])->f32[8]\n    then x f32[8] → f32[16]\n    then x f32[16] → f32[24]\n" in result.stdout.str()
    records = {r["test_id"].split("::")[-1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    assert records["test_stable"]["trace"]["needed"]["jit(scale)"] == 1 and records["test_stable"]["compiles"] >= 1
    assert (
        records["test_retraces"]["trace"]["compiled"].count("jit(scale)") == 4
        and records["test_retraces"]["trace"]["needed"]["jit(scale)"] == 4
    )
    scale = records["test_retraces"]["trace"]["functions"]["jit(scale)"]
    assert scale["signatures"] == [f"(f32[{n}])->f32[{n}]" for n in (8, 16, 24, 32)] and not scale["by_jax"]


MLP = """
import jax
import jax.numpy as jnp
import pytest


def init_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        {"w": jax.random.normal(k, (m, n)) * (2 / m) ** 0.5, "b": jnp.zeros((n,))}
        for k, m, n in zip(keys, sizes[:-1], sizes[1:])
    ]


def loss_fn(params, x, y):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss


@pytest.fixture
def params():
    return init_params(jax.random.PRNGKey(0), [64, 32, 10])


def batch(n):
    return jnp.ones((n, 64)), jax.nn.one_hot(jnp.zeros((n,), jnp.int32), 10)
"""


def test_max_compiles_counts_the_tests_own_functions_not_jaxs_eager_helpers(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """JAX runs `jnp.zeros`, `jnp.ones` and `jax.random.normal` as jitted functions of its own
    (`dispatch.xla_primitive_callable`, `random._normal`), compiled once per shape, in the fixture and
    in the test: `max_compiles=1` holds the user's step, which compiles once, and fails the one
    compiled for three batch sizes, naming it and its shapes."""
    pytester.makepyfile(
        MLP
        + """

@pytest.mark.devmem(max_compiles=1)
def test_step_compiles_once(params):
    x, y = batch(32)
    for _ in range(3):
        params, loss = train_step(params, x, y)


@pytest.mark.devmem(max_compiles=1)
def test_step_compiled_for_three_batch_sizes(params):
    for n in (8, 16, 32):
        params, loss = train_step(params, *batch(n))


@pytest.mark.devmem(max_compiles={"train_step": 3})
def test_named_bound_allows_three(params):
    for n in (8, 16, 32):
        params, loss = train_step(params, *batch(n))


@pytest.mark.devmem(max_compiles={"jit(broadcast_in_dim)": 1})
def test_named_bound_on_a_jax_helper(params):
    params, loss = train_step(params, *batch(8))


@pytest.mark.devmem(max_compiles={"trian_step": 1})
def test_named_bound_on_a_function_never_run(params):
    params, loss = train_step(params, *batch(8))
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--devmem-report=r.json")
    outcomes = {
        r["test_id"].split("::")[-1]: r["outcome"]
        for r in json.loads((pytester.path / "r.json").read_text())["records"]
    }
    assert outcomes == {
        "test_step_compiles_once": "passed",
        "test_step_compiled_for_three_batch_sizes": "failed",
        "test_named_bound_allows_three": "passed",
        "test_named_bound_on_a_jax_helper": "failed",
        "test_named_bound_on_a_function_never_run": "failed",
    }, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*_ test_step_compiled_for_three_batch_sizes _*",
            "*jit(train_step) (train_step at *.py:21): 3 executables, max_compiles=1",
        ]
    )
    assert "    then x f32[8,64] → f32[16,64], y f32[8,10] → f32[16,10]\n" in result.stdout.str()  # what differs
    result.stdout.fnmatch_lines(
        ["*jit(broadcast_in_dim) (broadcast_in_dim at *dispatch.py:*): * executables, max_compiles=1"]
    )
    result.stdout.fnmatch_lines(
        ["*max_compiles names 'trian_step', which the test did not run (it ran: *jit(train_step)*"]
    )
    assert "jit(train_step)" not in result.stdout.str().split("_ test_step_compiled_for_three_batch_sizes _")[0]


def test_max_compiles_counts_programs_so_a_function_wrapped_anew_needs_the_same_in_any_order(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """`jax.pmap` wraps a function again in a cache of its own (`_cached_shard_map`, jax/_src/pmap.py)
    and a class made per test hashes its instances alike, so a test meets an earlier test's executable
    of its program, or of a program that runs alike with another constant, beside one compiled anew.
    Counted by executable object, `test_method[1_1]` needed 2 after `[1_0]` and 1 alone; counted by
    program, each needs 1 in both orders. A function wrapped anew in a loop compiles the same program
    each time: 4, in both orders."""
    pytester.makepyfile(
        test_programs="""
        import jax
        import jax.numpy as jnp
        import pytest

        @pytest.mark.devmem(max_compiles=1)
        @pytest.mark.parametrize("increment", [1, 1, 2])
        def test_method(increment):
            class Adder:
                def __init__(self, inc):
                    self.inc = inc

                def __hash__(self):
                    return hash(self.inc)

                def __eq__(self, other):
                    return isinstance(other, Adder) and other.inc == self.inc

                def add(self, x):
                    return x + self.inc

            jax.pmap(Adder.add, static_broadcasted_argnums=0)(Adder(increment), jnp.ones((1, 4)))
            jax.pmap(Adder.add, static_broadcasted_argnums=0)(Adder(increment), jnp.ones((1, 4)))

        def make():
            def scale(x):
                return x * 2
            return scale

        @pytest.mark.devmem(max_compiles={"scale": 4})
        def test_wrapped_anew_in_a_loop():
            for _ in range(4):
                jax.jit(make())(jnp.ones(8))
        """
    )
    ids = [f"test_programs.py::test_method[{case}]" for case in ("1_0", "1_1", "2")]
    loop = "test_programs.py::test_wrapped_anew_in_a_loop"
    needed = []
    for order in (ids, ids[::-1]):
        result = pytester.runpytest_inprocess(*order, loop, "--devmem-mode=prealloc", "--devmem-report=r.json")
        result.assert_outcomes(passed=4)
        records = json.loads((pytester.path / "r.json").read_text())["records"]
        needed.append({r["test_id"]: r["trace"]["needed"] for r in records})
    assert needed[0] == needed[1]
    own = {test: counts.get("jit(_fun)", counts.get("jit(scale)")) for test, counts in needed[0].items()}
    assert own == {**{test: 1 for test in ids}, loop: 4}


@pytest.mark.parametrize("value", [{}, {"step": -1}, {"step": True}, {1: 1}, {"": 1}, [1], 1.5])
def test_a_bad_max_compiles_errors_the_test_naming_the_value(
    jax_loaded: object, pytester: pytest.Pytester, value: object
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.devmem(max_compiles={value!r})
        def test_it():
            pass
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert f"max_compiles={value!r}: must be a whole number, 0 or more" in result.stdout.str()
    assert "or a dict from function names to such numbers" in result.stdout.str()


LAYER = """
import os
import jax
import jax.numpy as jnp

WIDTH = int(os.environ.get("LAYER_WIDTH", "256"))

@jax.jit
def forward_layer(x, w):
    return jnp.tanh(x @ w) @ w.T

def test_layer():
    x = jnp.ones((512, 512))
    w = jnp.ones((512, WIDTH))
    forward_layer(x, w).block_until_ready()
"""


def test_a_layer_made_four_times_wider_fails_with_its_function_named(
    jax_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_layer=LAYER)
    pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-update", "--devmem-report=base.json"
    ).assert_outcomes(passed=1)
    monkeypatch.setenv("LAYER_WIDTH", "1024")
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=now.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*device memory regression against*",
            "*what grew at the peak: *jit(forward_layer) temp 512.00 KiB → 2.00 MiB*",
        ]
    )
    from pytest_devmem.cli import main

    assert main(["compare", str(pytester.path / "baselines"), str(pytester.path / "now.json")]) == 1
    out = capsys.readouterr().out
    assert "What grew at the peak:" in out and "jit(forward_layer) temp 512.00 KiB → 2.00 MiB" in out


def test_a_test_that_keeps_an_array_in_a_module_list_leaks_and_a_clean_one_does_not(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        """
        import jax.numpy as jnp
        import pytest

        kept = []

        @pytest.fixture
        def inputs():
            return jnp.ones((1024, 1024))  # 4 MiB, freed when the fixture is torn down: no leak

        def test_keeps(inputs):
            kept.append(jnp.zeros((1024, 1024)) + 1)  # 4 MiB that outlives the test

        def test_clean(inputs):
            (jnp.zeros((1024, 1024)) + inputs).block_until_ready()
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-max-leak=1MiB", "--devmem-report=r.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*device memory leaked: 4.00 MiB (4194304 bytes) that the test allocated is still held after it, more than max_leak 1.00 MiB: jit(add) 4.00 MiB*"
        ]
    )
    records = {r["test_id"].split("::")[-1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    assert records["test_keeps"]["leaked_bytes"] == 4 * 2**20 and records["test_clean"]["leaked_bytes"] == 0


def test_each_executable_is_summed_up_in_the_record(jax_loaded: object, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_layer=LAYER)
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=r.json").assert_outcomes(passed=1)
    executables = json.loads((pytester.path / "r.json").read_text())["records"][0]["trace"]["executables"]
    layer = executables["jit(forward_layer)"]
    assert (
        layer["runs"] == 1
        and layer["output_bytes"] == 512 * 512 * 4
        and layer["temp_bytes"] > 0
        and layer["argument_bytes"] == 0
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_test_that_forks_says_its_childs_memory_is_not_captured(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os

        def test_forks(devmem):
            pid = os.fork()
            if pid == 0:  # the child: allocates, and leaves without pytest's teardown
                devmem.pool.alloc(64 * 2**20)
                os._exit(0)
            os.waitpid(pid, 0)

        def test_does_not(devmem):
            devmem.pool.free(devmem.pool.alloc(2**20))
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=ondemand", "--devmem-report=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    records = {r["test_id"].split("::")[1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    assert any(
        "forked 1 child process(es)" in note and "not captured" in note
        for note in records["test_forks"]["trace"]["notes"]
    )
    assert not any("forked" in note for note in records["test_does_not"]["trace"].get("notes", []))


def test_a_test_that_starts_processes_says_their_memory_is_not_captured_whatever_ran_before(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import multiprocessing
        import os
        import subprocess
        import sys

        import pytest

        @pytest.mark.parametrize("method", ["spawn", "forkserver", "forkserver again"])
        def test_multiprocessing(devmem, method):
            child = multiprocessing.get_context(method.split()[0]).Process(target=os.getpid)
            child.start()
            child.join()

        def test_subprocess(devmem):
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def test_does_not(devmem):
            devmem.pool.free(devmem.pool.alloc(2**20))
            import probe  # its import runs a probe, as TensorFlow's runs `uname -p` (platform.processor)
        """
    )
    pytester.makepyfile(probe="import subprocess, sys\n\nsubprocess.run([sys.executable, '-c', 'pass'], check=True)\n")
    result = pytester.runpytest_inprocess("--devmem-mode=ondemand", "--devmem-report=r.json", "-p", "no:randomly")
    result.assert_outcomes(passed=5)
    notes = {
        r["test_id"].split("::")[1]: r["trace"].get("notes", [])
        for r in json.loads((pytester.path / "r.json").read_text())["records"]
    }
    for name in (
        "test_multiprocessing[spawn]",
        "test_multiprocessing[forkserver]",
        "test_multiprocessing[forkserver again]",
        "test_subprocess",
    ):
        assert any("started 1 process(es)" in note and "not captured" in note for note in notes[name]), (name, notes)
    assert not any("process(es)" in note for note in notes["test_does_not"])


BOUND_STEP = """
import jax
import jax.numpy as jnp
import pytest


def _step(params, x, scale):
    return jax.tree_util.tree_map(lambda p: p * scale, params), x.sum()


train_step = jax.jit(_step, static_argnums=2)
PARAMS = {f"layer{i}": {"w": jnp.ones((64, 64)), "b": jnp.ones((64,))} for i in range(12)}


@pytest.mark.devmem(max_compiles={"train_step": 1})
def test_batches():
    for n in (16, 8):
        train_step(PARAMS, jnp.ones((n, 64)), 2.0)


@pytest.mark.devmem(max_compiles={"train_step": 1})
def test_scales():
    for scale in (2.0, 3.0):
        train_step(PARAMS, jnp.ones((8, 64)), scale)


@pytest.mark.devmem(max_compiles={"trian_step": 1})
def test_typo():
    train_step(PARAMS, jnp.ones((8, 64)), 2.0)
"""


def test_max_compiles_accepts_the_bound_name_and_shows_what_differs(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """Issue 53.8: `train_step = jax.jit(_step)` is bounded by `max_compiles={"train_step": 1}`; a step
    over a tree of 25 parameters compiled twice names the argument that changed and its two shapes
    (its signatures are longer than a line), or says a static argument did; the record keeps the
    whole signatures; a name that matches nothing lists those that would."""
    pytester.makepyfile(test_bound=BOUND_STEP)
    result = pytester.runpytest_inprocess("--devmem-mode=ondemand", "--devmem-report=r.json", "-p", "no:randomly")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*jit(_step) (_step at *test_bound.py:6): 2 executables, max_compiles=1",
            "    then x f32[8,64] → f32[16,64]",
            "*jit(_step) (_step at *test_bound.py:6): 2 executables, max_compiles=1",
            "    then static scale=2.0 → scale=3.0",
            "*max_compiles names 'trian_step', which the test did not run (it ran: *; names that match: *_step, *train_step)",
        ]
    )
    records = {r["test_id"].split("::")[-1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    step = records["test_batches"]["trace"]["functions"]["jit(_step)"]
    assert [
        len(signature) > 300 and signature.endswith("f32[]) with scale=2.0") for signature in step["signatures"]
    ] == [True] * 2
    assert step["arguments"][0] == "params['layer0']['b']" and step["arguments"][-1] == "x"


HELPERS = """
import jax.numpy as jnp


def test_first():
    jnp.ones((16, 8)).block_until_ready()
    jnp.ones((8, 8)).block_until_ready()


def test_helpers():
    jnp.zeros((8, 8)).block_until_ready()
    jnp.ones((16, 8)).block_until_ready()
    jnp.ones((24, 8)).block_until_ready()
"""


def test_an_eager_helpers_signatures_read_the_same_whatever_ran_before(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """Issue 53.9: JAX's helpers compiled by an earlier test run on its fast path; the list of their
    shapes is in one order of their own (sizes as numbers), alone or after that test."""
    pytester.makepyfile(test_helpers=HELPERS)
    found = []
    for selection in (["test_helpers.py::test_helpers"], ["test_helpers.py"]):
        report = f"r{len(found)}.json"
        pytester.runpytest_inprocess(
            "--devmem-mode=ondemand", f"--devmem-report={report}", "-p", "no:randomly", *selection
        )
        records = {r["test_id"]: r for r in json.loads((pytester.path / report).read_text())["records"]}
        found.append(records["test_helpers.py::test_helpers"]["trace"]["functions"])
    assert found[0] == found[1]
    assert found[0]["jit(broadcast_in_dim)"]["signatures"] == [f"(f32[])->f32[{n},8]" for n in (8, 16, 24)]
