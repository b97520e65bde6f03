"""Real JAX and TensorFlow on CPU: the recorded peak follows what the test allocates."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import pytest


def records_by_test(pytester: pytest.Pytester, name: str = "r.json") -> dict[str, dict]:
    data = json.loads((pytester.path / name).read_text())
    return {record["test_id"].split("::")[-1]: record for record in data["records"]}


def test_jax_peak_doubles_when_the_test_allocates_twice_as_much(jax_loaded: object, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import jax.numpy as jnp

        @pytest.mark.parametrize("n", [1, 2])
        def test_alloc(n):
            x = jnp.ones((n * 2_000_000,), dtype=jnp.float32)
            y = (x * 2).block_until_ready()
            assert float(y[0]) == 2.0
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=r.json")
    result.assert_outcomes(passed=2)
    records = records_by_test(pytester)
    one, two = records["test_alloc[1]"], records["test_alloc[2]"]
    assert one["sources"]["jax"] == {
        "available": False,
        "note": "JAX keeps no memory statistics on cpu; its allocations are in the trace",
    }
    assert one["trace"]["by_source"]["jax"]["peak_live_bytes"] >= 16_000_000  # x and y, 8 MB each
    assert 1.8 < two["peak_bytes_in_use"] / one["peak_bytes_in_use"] < 2.2


def test_tensorflow_peak_doubles_when_the_test_allocates_twice_as_much(
    tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        """
        import pytest
        import tensorflow as tf

        @pytest.mark.parametrize("n", [1, 2])
        def test_alloc(n):
            x = tf.ones((n * 2_000_000,), dtype=tf.float32)
            y = x * 2.0
            assert float(tf.reduce_sum(y)) > 0
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=growth", "--devmem-report=r.json")
    result.assert_outcomes(passed=2)
    records = records_by_test(pytester)
    one, two = records["test_alloc[1]"]["sources"]["tensorflow"], records["test_alloc[2]"]["sources"]["tensorflow"]
    assert one["available"] and one["figures"]["device"] == "CPU:0"
    assert one["peak_bytes_in_use"] >= 16_000_000
    assert 1.8 < two["peak_bytes_in_use"] / one["peak_bytes_in_use"] < 2.2


@pytest.mark.parametrize("suffix", [".json", ".csv", ".md"])
def test_report_formats(pandas_loaded: object, pytester: pytest.Pytester, suffix: str) -> None:
    pytester.makepyfile(
        """
        def test_pool(devmem):
            devmem.pool.alloc(3 * 2**20)
        def test_nothing():
            pass
        """
    )
    report = pytester.path / "out" / f"devmem{suffix}"
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", f"--devmem-report={report}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*report written to out/devmem{suffix}*"])
    text = report.read_text()
    if suffix == ".json":
        data = json.loads(text)
        assert data["session"]["device"] == "sim:16GiB" and data["session"]["regime"] == "prealloc"
        assert "pytest-devmem" in data["session"]["versions"]
        pool = next(r for r in data["records"] if r["test_id"].endswith("test_pool"))
        assert pool["peak_bytes_in_use"] == 3 * 2**20
        assert pool["sources"]["pool"]["figures"]["peak_pool_bytes"] == 12 * 2**30
        nothing = next(r for r in data["records"] if r["test_id"].endswith("test_nothing"))
        assert nothing["sources"]["pool"] == {
            "available": False,
            "unused": True,
            "note": "the test did not use the devmem fixture",
        }
    elif suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        assert [row["test_id"].split("::")[-1] for row in rows] == ["test_nothing", "test_pool"]
        assert rows[1]["peak_bytes_in_use"] == str(3 * 2**20)
        pandas = pytest.importorskip("pandas")
        frame = pandas.read_csv(report)
        assert frame["peak_bytes_reserved"].max() == 12 * 2**30
    else:
        assert text.startswith("# Device memory report")
        assert "| test | regime | peak in use | peak reserved | fragmentation | oom | outcome | allocators |" in text
        assert "| 3.00 MiB | 12.00 GiB |" in text


def test_xdist_workers_send_every_record_to_the_controller(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.parametrize("n", range(10))
        def test_many(devmem, n):
            devmem.pool.alloc((n + 1) * 2**20)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=ondemand", "-n", "2", "--devmem-report=r.json")
    result.assert_outcomes(passed=10)
    result.stdout.fnmatch_lines(["*10 measured test(s)*"])
    records = records_by_test(pytester)
    assert len(records) == 10
    assert records["test_many[9]"]["sources"]["pool"]["peak_bytes_in_use"] == 10 * 2**20


def test_a_run_that_uses_no_framework_imports_none(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import sys
        def pytest_sessionfinish(session):
            heavy = sorted({"jax", "tensorflow", "pynvml", "pandas"} & set(sys.modules))
            with open("imported.txt", "w") as f:
                f.write(",".join(heavy))
        """
    )
    pytester.makepyfile("def test_pool(devmem):\n    devmem.pool.alloc(1024)\ndef test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--devmem-mode=prealloc", "--devmem-report=r.json")
    result.assert_outcomes(passed=2)
    assert (pytester.path / "imported.txt").read_text() == ""
    nothing = records_by_test(pytester)["test_nothing"]
    assert nothing["peak_bytes_in_use"] == 0 and nothing["trace"]["events"] == 0  # traced, and it allocated nothing
    assert nothing["fragmentation"] is None  # no pool was used: no fragmentation to speak of
    assert nothing["sources"]["jax"] == {
        "available": False,
        "unused": True,
        "note": "JAX was not imported by this test",
    }


def test_plugin_loads_through_its_entry_point() -> None:
    """pytest lists the plugins its entry points loaded as `NAME-VERSION at PATH`; without the plugin (`-p no:devmem`)
    the line is missing, whatever the paths around it contain."""
    line = re.compile(r"^\s*pytest-devmem-\S+ at .*pytest_devmem[/\\]plugin[/\\]__init__\.py$", re.MULTILINE)

    def plugins(*options: str) -> str:
        command = [sys.executable, "-m", "pytest", *options, "--version", "--version"]
        return subprocess.run(command, capture_output=True, text=True).stdout

    assert line.search(plugins()), plugins()
    assert not line.search(plugins("-p", "no:devmem"))


def test_subtests_do_not_add_records_one_test_one_record(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import unittest

        class Steps(unittest.TestCase):
            def test_steps(self):
                for n in range(3):
                    with self.subTest(n=n):
                        self.assertGreaterEqual(n, 0)

        def test_pool_steps(devmem, subtests):
            for n in range(3):
                with subtests.test(n=n):
                    devmem.pool.free(devmem.pool.alloc((n + 1) * 2**20))
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=r.json")
    assert result.ret == 0
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    assert sorted(r["test_id"].split("::")[-1] for r in records) == ["test_pool_steps", "test_steps"]
    pool = next(r for r in records if r["test_id"].endswith("test_pool_steps"))
    assert pool["peak_bytes_in_use"] == 3 * 2**20


def test_benchmark_json_is_github_action_benchmarks_format(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_pool(devmem):\n    devmem.pool.alloc(3 * 2**20)\n")
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-benchmark-json=bench.json").assert_outcomes(
        passed=1
    )
    entries = json.loads((pytester.path / "bench.json").read_text())
    assert entries == [
        {
            "name": "test_benchmark_json_is_github_action_benchmarks_format.py::test_pool [prealloc]",
            "unit": "bytes",
            "value": 3 * 2**20,
            "extra": "peak reserved 12.00 GiB; device sim:16GiB",
        }
    ]


def test_a_large_suite_summary_shows_what_a_reviewer_needs_and_v_shows_all(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", range(60))
        def test_many(devmem, n):
            devmem.pool.alloc((n + 1) * 2**16)

        def test_over_the_limit(devmem):
            devmem.pool.alloc(2**30)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-limit=512MiB")
    result.assert_outcomes(passed=60, failed=1)
    out = result.stdout.str()
    assert "test_over_the_limit" in out.split("device memory (pytest-devmem)")[1]
    table_rows = [line for line in out.splitlines() if "  prealloc  " in line]
    assert any("test_many[59]" in line for line in table_rows) and not any(
        "test_many[0] " in line for line in table_rows
    )  # the largest, not the smallest
    result.stdout.fnmatch_lines(
        [
            "*... and 41 more measured test(s), none failed, regressed or improved*",
            "*new, no baseline yet*and 51 more (-v lists them all)*",
        ]
    )
    verbose = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-limit=512MiB", "-v")
    assert (
        any("test_many[0] " in line and "  prealloc  " in line for line in verbose.stdout.lines)
        and "more measured test(s)" not in verbose.stdout.str()
    )


def test_a_test_skipped_in_its_body_has_no_figure_and_is_not_new(pytester: pytest.Pytester) -> None:
    """It measured nothing: no record (never peak 0 and "new"), listed with why, as a skip at setup
    is; an xfailed test failed as expected, which no baseline could hold: no record either, listed
    with its reason. A test that passed although marked xfail (XPASS) ran whole, and keeps its figures."""
    pytester.makepyfile(
        test_skips="""
        import pytest

        def test_skipped_in_body(devmem):
            pytest.skip("not on this machine")

        @pytest.mark.xfail(reason="known")
        def test_xfailed(devmem):
            devmem.pool.alloc(2**20)
            assert False

        @pytest.mark.xfail(reason="flaky")
        def test_xpassed(devmem):
            devmem.pool.alloc(2**20)

        def test_runs(devmem):
            devmem.pool.alloc(2**20)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=r.json")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1, xpassed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    assert sorted(record["test_id"] for record in report["records"]) == [
        "test_skips.py::test_runs",
        "test_skips.py::test_xpassed",
    ]
    assert sorted((entry["test_id"], entry["reason"]) for entry in report["unrecorded"]) == [
        ("test_skips.py::test_skipped_in_body", "skipped: not on this machine"),
        ("test_skips.py::test_xfailed", "xfailed: known"),
    ]
    result.stdout.fnmatch_lines(["*2 measured test(s)*"])
    assert "test_skipped_in_body [prealloc]" not in result.stdout.str()
    assert "test_xfailed [prealloc]" not in result.stdout.str()  # not offered as a new baseline


def test_cyclic_garbage_a_modules_fixture_left_is_collected_once_the_module_is_done(pytester: pytest.Pytester) -> None:
    """Each measured test starts with a full collection and freezes what survives (so the next
    one's collection is cheap); frozen objects are never collected, so the first test of each
    module thaws them first: a fixture's object in a reference cycle (a Keras model, say) is freed
    after its module, as without the plugin, not kept for the rest of the session."""
    pytester.makeconftest(
        """
        import weakref

        refs = {}
        """
    )
    pytester.makepyfile(
        test_a="""
        import pytest
        import conftest

        class Node:
            pass

        @pytest.fixture(scope="module")
        def cyclic():
            node = Node()
            node.me = node  # freed only by the cyclic collector
            conftest.refs["node"] = __import__("weakref").ref(node)
            yield node

        def test_one(cyclic):
            pass

        def test_two(cyclic):
            pass
        """,
        test_b="""
        import conftest

        def test_after():
            assert conftest.refs["node"]() is None, "the module's cyclic garbage was never collected"
        """,
    )
    result = pytester.runpytest_subprocess("--devmem-mode=ondemand", "-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=3)


def test_a_module_thaws_the_collector_only_where_a_shared_fixture_ended_before_it(pytester: pytest.Pytester) -> None:
    """Thawing scans the whole process (a tenth of a second with JAX loaded): a module whose
    predecessors tore down no fixture wider than a test (unittest classes with only unittest's own
    class setup among them) keeps what earlier tests froze; one after a module fixture thaws."""
    pytester.makeconftest(
        """
        import gc

        thaws = []  # per full collection: whether it ran on a thawed collector (nothing frozen)

        def log(phase, info):
            if phase == "start" and info["generation"] == 2:
                thaws.append(gc.get_freeze_count() == 0)

        gc.callbacks.append(log)
        """
    )
    pytester.makepyfile(
        test_a="""
        import unittest

        class PlainTest(unittest.TestCase):
            def test_one(self):
                pass
        """,
        test_b="""
        import conftest
        import pytest

        def test_kept_frozen():
            assert conftest.thaws[-1] is False, conftest.thaws

        @pytest.fixture(scope="module")
        def shared():
            yield object()

        def test_with_a_module_fixture(shared):
            pass
        """,
        test_c="""
        import conftest

        def test_thawed():
            assert conftest.thaws[-1] is True, conftest.thaws
        """,
    )
    result = pytester.runpytest_subprocess("--devmem-mode=ondemand", "-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=4)
