"""Suites larger than one machine: CI shards merged into one report and one baseline refresh,
strict mode that knows what was selected, and xdist workers checked side by side on one device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_devmem.cli import main
from pytest_devmem.gate.stale import SuiteShape, node_path
from pytest_devmem.model.frameworks import AllocatorSetup
from pytest_devmem.model.machine import MachineSpec, run_machine
from pytest_devmem.model.side_by_side import side_by_side
from pytest_devmem.model.trace import ALLOCATE_CODE, FREE_CODE, Trace
from pytest_devmem.units import MiB

ALPHA = """
import os
import pytest

SIZE = int(os.environ.get("ALPHA_MIB", "8")) * 2**20

def test_model(devmem):
    devmem.pool.alloc(SIZE)

@pytest.mark.parametrize("n", [1, 2, 3])
def test_layers(devmem, n):
    devmem.pool.alloc(n * 2**20)

class TestBlock:
    def test_small(self, devmem):
        devmem.pool.alloc(2**20)

    @pytest.mark.skip(reason="no accelerator for this one")
    def test_skipped(self, devmem):
        pass

    def test_skipped_inside(self, devmem):
        pytest.skip("not today")
"""

BETA = """
import os

def test_step(devmem):
    devmem.pool.alloc(int(os.environ.get("BETA_MIB", "4")) * 2**20)

def test_other(devmem):
    devmem.pool.alloc(3 * 2**20)
"""

SHARD_PLUGIN = """
import pytest

def pytest_addoption(parser):
    parser.addoption("--my-shard", type=int, default=None)

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # as pytest-shard does: keep every third test, silently (no pytest_deselected)
    shard = config.getoption("--my-shard")
    if shard is not None:
        items[:] = [item for index, item in enumerate(items) if index % 3 == shard]
"""

TESTS = 9  # 7 in test_alpha.py (one skipped at setup, one in its body), 2 in test_beta.py


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_alpha=ALPHA, test_beta=BETA)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("--devmem-mode=prealloc", *args)


def split() -> None:
    pytest.importorskip("pytest_split", reason="pytest-split (the test-tools extra) is not installed")


def shard_args(group: int, how: str) -> list[str]:
    if how == "pytest-split":
        return ["--splits", "3", "--group", str(group)]
    return ["-p", "myshard", f"--my-shard={group - 1}"]


def use_shard_plugin(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    if how == "pytest-split":
        split()
    else:
        pytester.makepyfile(myshard=SHARD_PLUGIN)
        monkeypatch.syspath_prepend(str(pytester.path))


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()
    }


# -- the node ids of a test ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("test_id", "chain"),
    [
        ("a.py::t", ["a.py", "a.py::t"]),
        ("d/a.py::C::t[x-1]", ["d/a.py", "d/a.py::C", "d/a.py::C::t[x-1]"]),
        ("a.py::t[a::b]", ["a.py", "a.py::t[a::b]"]),
        ("d[1]/a.py::t[2]", ["d[1]/a.py", "d[1]/a.py::t[2]"]),
        ("a.py", ["a.py"]),
    ],
)
def test_node_path_keeps_parameter_ids_whole(test_id: str, chain: list[str]) -> None:
    assert node_path(test_id) == chain


def test_a_test_is_gone_only_when_its_collected_parent_no_longer_holds_it() -> None:
    shape = SuiteShape()
    shape.expanded("a.py", ["a.py::t", "a.py::C"])
    assert shape.exists("a.py::t") is True
    assert shape.exists("a.py::renamed") is False
    assert shape.exists("a.py::Gone::t") is False
    assert shape.exists("a.py::C::t") is None  # the class was never expanded: nothing can tell
    assert shape.exists("b.py::t") is None  # the module was not collected
    shape.expanded("a.py::C", ["a.py::C::t"])
    assert shape.exists("a.py::C::t") is True and shape.exists("a.py::C::u") is False


# -- shards: one baseline refresh, one verdict -------------------------------------------------


def test_three_pytest_split_shards_write_the_baselines_of_one_update_in_any_order(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    split()
    whole = run(suite, "--devmem-update", "--devmem-baselines=whole")
    whole.assert_outcomes(passed=TESTS - 2, skipped=2)
    expected = snapshot(suite.path / "whole")
    assert list(expected) == ["sim-16GiB/test_alpha.py.json", "sim-16GiB/test_beta.py.json"]
    skipped = json.loads(expected["sim-16GiB/test_alpha.py.json"])["records"]["test_alpha.py::TestBlock::test_skipped"][
        "prealloc"
    ]
    assert (
        skipped["reason"] == "skipped: no accelerator for this one" and skipped["metrics"]["peak_bytes_in_use"] is None
    )
    for order in ((1, 2, 3), (3, 1, 2)):
        directory = "shards-" + "".join(map(str, order))
        for group in order:
            shard = run(
                suite,
                "--devmem-update",
                f"--devmem-baselines={directory}",
                *shard_args(group, "pytest-split"),
                f"--devmem-report=shard{group}.json",
            )
            assert shard.ret == pytest.ExitCode.OK
        assert snapshot(suite.path / directory) == expected, order
    # the same files from the shards' reports, without running anything again
    reports = [str(suite.path / f"shard{group}.json") for group in (2, 3, 1)]
    assert (
        main(
            ["merge", *reports, "-o", str(suite.path / "merged.json"), "--baselines", str(suite.path / "from-reports")]
        )
        == 0
    )
    assert snapshot(suite.path / "from-reports") == expected
    capsys.readouterr()
    assert (
        main(["merge", *reports, "--baselines", str(suite.path / "whole")]) == 0
    )  # files that already hold these figures
    said = capsys.readouterr().out
    assert (
        "baseline unchanged: " in said and "baseline written" not in said and snapshot(suite.path / "whole") == expected
    )
    merged = json.loads((suite.path / "merged.json").read_text())
    assert len(merged["records"]) == TESTS - 2 and sorted(e["test_id"] for e in merged["unrecorded"]) == [
        "test_alpha.py::TestBlock::test_skipped",
        "test_alpha.py::TestBlock::test_skipped_inside",
    ]  # skipped: no figure
    assert [part["shard"]["group"] for part in merged["session"]["merged_from"]] == [1, 2, 3]
    assert "shard" not in merged["session"]


def test_merged_shard_reports_give_the_verdicts_of_one_run(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    split()
    run(suite, "--devmem-update").assert_outcomes(passed=TESTS - 2, skipped=2)
    monkeypatch.setenv("ALPHA_MIB", "16")  # test_model regresses
    monkeypatch.setenv("BETA_MIB", "1")  # test_step improves
    run(suite, "--devmem-report=whole.json")
    for group in (1, 2, 3):
        run(suite, *shard_args(group, "pytest-split"), f"--devmem-report=shard{group}.json")
    baselines = str(suite.path / "baselines")
    shards = [str(suite.path / f"shard{group}.json") for group in (3, 1, 2)]
    capsys.readouterr()
    assert main(["compare", baselines, str(suite.path / "whole.json"), "--json"]) == 1
    whole = json.loads(capsys.readouterr().out)
    assert main(["compare", baselines, *shards, "--json"]) == 1
    merged = json.loads(capsys.readouterr().out)
    assert merged["tests"] == whole["tests"] and merged["counts"] == whole["counts"]
    assert whole["counts"] == {
        "regressed": 1,
        "improved": 1,
        "ok": 5,
        "not measured": 2,
    }  # the two skipped tests: they ran, with no figure either way (their reason from the reports' "unrecorded")
    assert main(["compare", baselines, *shards]) == 1
    from_shards = capsys.readouterr().out
    assert main(["compare", baselines, str(suite.path / "whole.json")]) == 1
    assert capsys.readouterr().out == from_shards


def test_a_test_run_in_no_shard_is_missing_not_a_regression(
    suite: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    run(suite, "--devmem-update", "--devmem-report=whole.json").assert_outcomes(passed=TESTS - 2, skipped=2)
    run(suite, "test_alpha.py", "--devmem-report=alpha.json")
    run(suite, "-k", "test_step", "--devmem-report=step.json")
    capsys.readouterr()
    assert (
        main(
            [
                "compare",
                str(suite.path / "baselines"),
                str(suite.path / "alpha.json"),
                str(suite.path / "step.json"),
                "--json",
            ]
        )
        == 0
    )
    statuses = {test["test_id"]: test["status"] for test in json.loads(capsys.readouterr().out)["tests"]}
    assert statuses["test_beta.py::test_other"] == "missing" and statuses["test_beta.py::test_step"] == "ok"
    assert statuses["test_alpha.py::TestBlock::test_skipped"] == "not measured"  # skipped in every run: ran, no figure


@pytest.mark.parametrize("how", ["pytest-split", "a plugin that drops items silently"])
def test_a_test_under_another_regime_runs_in_its_child_in_the_shard_that_holds_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    use_shard_plugin(pytester, monkeypatch, how)
    pytester.makepyfile(
        test_regimes="""
        import pytest

        @pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
        def test_here(devmem, n):
            devmem.pool.alloc(n * 2**20)

        @pytest.mark.devmem(mode="growth")
        def test_in_a_child(devmem):
            devmem.pool.alloc(5 * 2**20)
        """
    )
    measured = {}
    for group in (1, 2, 3):  # the child inherits the shard options, and still runs what its parent gave it
        result = run(pytester, *shard_args(group, how), f"--devmem-report=s{group}.json")
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        for record in json.loads((pytester.path / f"s{group}.json").read_text())["records"]:
            assert record["test_id"] not in measured, "a test ran in two shards"
            measured[record["test_id"]] = (record["regime"], record["peak_bytes_requested"])
    assert measured["test_regimes.py::test_in_a_child"] == ("growth", 5 * MiB)
    assert len(measured) == 6


# -- refusals -------------------------------------------------------------------------------


@pytest.fixture
def report(suite: pytest.Pytester) -> Path:
    run(suite, "--devmem-report=report.json").assert_outcomes(passed=TESTS - 2, skipped=2)
    return suite.path / "report.json"


def variant(source: Path, target: Path, change: object) -> Path:
    document = json.loads(source.read_text())
    change(document)  # type: ignore[operator]
    target.write_text(json.dumps(document))
    return target


def test_a_test_measured_in_two_reports_with_different_figures_is_an_error_naming_both(
    report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = variant(report, report.with_name("shard-a.json"), lambda d: d.update(records=d["records"][:3]))
    same = variant(report, report.with_name("shard-b.json"), lambda d: d.update(records=d["records"][2:]))
    assert (
        main(["merge", str(first), str(same), "-o", str(report.with_name("merged.json"))]) == 0
    )  # the same figures twice: kept once
    assert (
        len(json.loads(report.with_name("merged.json").read_text())["records"]) == TESTS - 2
    )  # the skipped ones have no record

    def bigger(document: dict) -> None:
        document["records"] = document["records"][2:]
        grow_peak(document["records"][0], MiB)

    other = variant(report, report.with_name("shard-c.json"), bigger)
    capsys.readouterr()
    for args in (
        ["merge", str(first), str(other), "-o", str(report.with_name("bad.json"))],
        ["compare", str(report), str(first), str(other)],
    ):
        assert main(args) == 2
        error = capsys.readouterr().err
        assert (
            str(first) in error
            and str(other) in error
            and "different figures" in error
            and "peak_bytes_in_use" in error
        )
    assert not report.with_name("bad.json").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["session"].update(device_class="sim-80GiB", device="sim:80GiB"), "device class 'sim-16GiB'"),
        (lambda d: d["session"].update(regime="growth"), "session regime prealloc"),
        (lambda d: d.update(version=1), "version 3 report"),
    ],
    ids=["device class", "regime", "format version"],
)
def test_reports_that_disagree_are_refused_naming_both(
    report: Path, capsys: pytest.CaptureFixture[str], change: object, message: str
) -> None:
    other = variant(report, report.with_name("zother.json"), change)
    assert main(["merge", str(report), str(other), "-o", str(report.with_name("merged.json"))]) == 2
    error = capsys.readouterr().err
    assert message in error and str(report) in error and str(other) in error


def test_a_shard_whose_report_is_absent_is_refused_by_merge_and_compare(
    report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def shard(group: int, keep: slice) -> object:
        return lambda d: (
            d.update(records=d["records"][keep]),
            d["session"].update(shard={"plugin": "pytest-split", "group": group, "groups": 3, "run": "7-1"}),
        )

    parts = [
        variant(report, report.with_name(f"s{group}.json"), shard(group, keep))
        for group, keep in ((1, slice(0, 3)), (2, slice(3, 6)), (3, slice(6, None)))
    ]
    assert main(["merge", *map(str, parts), "-o", str(report.with_name("merged.json"))]) == 0
    capsys.readouterr()
    for args in (
        ["merge", str(parts[0]), str(parts[2]), "-o", str(report.with_name("bad.json"))],
        ["compare", str(report), str(parts[0]), str(parts[2])],
    ):
        assert main(args) == 2
        assert "groups 1, 3 of 3 of a split suite (pytest-split); group 2 missing" in capsys.readouterr().err
    assert not report.with_name("bad.json").exists()


def test_merge_needs_somewhere_to_write_and_a_report(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["merge", str(report)]) == 2
    assert "nothing to write" in capsys.readouterr().err
    assert main(["merge", str(report.parent), "-o", str(report.with_name("m.json"))]) == 2
    assert (
        "cannot read the pytest-devmem JSON report: is a directory" in capsys.readouterr().err
    )  # the one report reader


def test_history_lines_up_a_sharded_run_as_one_commit(
    report: Path, capsys: pytest.CaptureFixture[str], pandas_loaded: object
) -> None:
    def shard(group: int, keep: slice) -> object:
        return lambda d: (
            d.update(records=d["records"][keep]),
            d["session"].update(
                commit="c1", shard={"plugin": "pytest-split", "group": group, "groups": 2, "run": "7-1"}
            ),
        )

    one = variant(report, report.with_name("s1.json"), shard(1, slice(0, 4)))
    two = variant(report, report.with_name("s2.json"), shard(2, slice(4, None)))
    later = variant(
        report,
        report.with_name("later.json"),
        lambda d: d["session"].update(commit="c2", time="2999-01-01T00:00:00+00:00"),
    )
    assert main(["history", str(one), str(two), str(later)]) == 0
    assert "2 commit(s), 7 test(s)" in capsys.readouterr().out

    def clash(document: dict) -> None:
        shard(2, slice(3, None))(document)  # type: ignore[operator]
        grow_peak(document["records"][0], MiB)

    bad = variant(report, report.with_name("s2.json"), clash)
    assert main(["history", str(one), str(bad)]) == 2
    assert "different figures" in capsys.readouterr().err


def test_shard_and_merged_reports_validate_against_the_report_schema(report: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json").read_text())

    def shard(group: int, keep: slice) -> object:
        return lambda d: (
            d.update(records=d["records"][keep]),
            d["session"].update(shard={"plugin": "pytest-split", "group": group, "groups": 2, "run": None}),
        )

    parts = [
        variant(report, report.with_name(f"s{group}.json"), shard(group, keep))
        for group, keep in ((1, slice(0, 4)), (2, slice(4, None)))
    ]
    assert main(["merge", *map(str, parts), "-o", str(report.with_name("merged.json"))]) == 0
    for path in (*parts, report.with_name("merged.json")):
        errors = [
            f"{list(e.path)}: {e.message}"
            for e in jsonschema.Draft202012Validator(schema).iter_errors(json.loads(path.read_text()))
        ]
        assert errors == [], path


# -- strict mode knows what was selected --------------------------------------------------


def test_strict_knows_a_node_id_selection_from_a_renamed_test(suite: pytest.Pytester) -> None:
    run(suite, "--devmem-update").assert_outcomes(passed=TESTS - 2, skipped=2)
    for selection in (
        ["test_alpha.py::test_model"],
        ["test_alpha.py::test_layers[2]"],
        ["test_alpha.py::TestBlock::test_small"],
        ["test_beta.py"],
        ["-k", "layers"],
        ["--deselect", "test_alpha.py::test_model"],
        ["-m", "not slow"],
    ):
        result = run(suite, "--devmem-strict", *selection)
        assert result.ret == pytest.ExitCode.OK, (selection, result.stdout.str())
        assert "stale baselines" not in result.stdout.str()
    suite.makepyfile(
        test_alpha=ALPHA.replace("def test_model", "def test_renamed").replace("class TestBlock", "class TestRenamed")
    )
    result = run(suite, "--devmem-strict", "test_alpha.py::test_layers[1]")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*stale baselines, for tests that no longer exist (failing the session (--devmem-strict)): test_alpha.py::TestBlock::test_skipped ?prealloc?, test_alpha.py::TestBlock::test_skipped_inside ?prealloc?, test_alpha.py::TestBlock::test_small ?prealloc?, test_alpha.py::test_model ?prealloc?"
        ]
    )
    beta_only = run(suite, "--devmem-strict", "test_beta.py")
    assert beta_only.ret == pytest.ExitCode.OK  # test_alpha.py was not collected: nothing can tell


def test_strict_under_xdist_knows_what_the_workers_collected(suite: pytest.Pytester) -> None:
    run(suite, "--devmem-update").assert_outcomes(passed=TESTS - 2, skipped=2)
    clean = run(suite, "--devmem-strict", "-n", "2", "-k", "not layers")
    assert clean.ret == pytest.ExitCode.OK and "stale baselines" not in clean.stdout.str()
    suite.makepyfile(test_beta=BETA.replace("def test_other", "def test_another"))
    result = run(suite, "--devmem-strict", "-n", "2", "-k", "step")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*stale baselines, for tests that no longer exist (failing the session (--devmem-strict)): test_beta.py::test_other ?prealloc?"
        ]
    )


@pytest.mark.parametrize("how", ["pytest-split", "a plugin that drops items silently"])
def test_strict_in_a_shard_knows_the_whole_suite(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    use_shard_plugin(suite, monkeypatch, how)
    run(suite, "--devmem-update").assert_outcomes(passed=TESTS - 2, skipped=2)
    ran = 0
    for group in (1, 2, 3):
        result = run(suite, "--devmem-strict", *shard_args(group, how))
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        assert "stale baselines" not in result.stdout.str()
        ran += sum(result.parseoutcomes().get(name, 0) for name in ("passed", "skipped"))
    assert ran == TESTS
    suite.makepyfile(test_beta=BETA.replace("def test_other", "def test_another"))
    for group in (1, 2, 3):  # every shard collected test_beta.py: every shard knows
        result = run(suite, "--devmem-strict", *shard_args(group, how))
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(["*stale baselines*: test_beta.py::test_other ?prealloc?"])


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_strict_after_last_failed_still_knows_the_modules_it_ran_and_those_it_skipped(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    # --lf skips each file that held no failure, reporting it collected with nothing in it
    pytester.makepyfile(test_alpha=ALPHA + "\ndef test_fails():\n    assert False\n", test_beta=BETA)
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-update")
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-strict", "--lf", *workers)
    result.assert_outcomes(failed=1)
    assert workers or "skipped 1 file" in result.stdout.str()  # (each xdist worker collects for itself)
    assert "stale baselines" not in result.stdout.str()


# -- workers side by side on one device ------------------------------------------------------


def pool_trace(sizes: list[int], process: int = 0) -> Trace:
    trace = Trace()
    for index, size in enumerate(sizes):
        trace.add(ALLOCATE_CODE, index + 1, size, float(index), source="pool", process=process)
    for index in range(len(sizes)):
        trace.add(FREE_CODE, index + 1, sizes[index], float(len(sizes) + index), source="pool", process=process)
    return trace


def test_side_by_side_puts_each_test_in_its_own_process_with_the_peaks_together() -> None:
    early = pool_trace([4 * MiB])  # peak at t=0
    late = Trace()
    late.add(ALLOCATE_CODE, 1, MiB, 0.0, source="pool")
    late.add(FREE_CODE, 1, MiB, 1.0, source="pool")
    late.add(ALLOCATE_CODE, 2, 6 * MiB, 5.0, source="pool")  # peak at t=5
    late.add(FREE_CODE, 2, 6 * MiB, 6.0, source="pool")
    merged, owner = side_by_side([early, late])
    assert owner == {1: 0, 2: 1} and sorted(set(merged.processes)) == [1, 2]
    assert merged.peak_live_bytes() == 10 * MiB  # both at their peaks at once
    spec = MachineSpec(capacity=64 * MiB, context_bytes=0)
    run = run_machine(merged, {"pool": AllocatorSetup("pool", "ondemand")}, spec)
    assert run.oom is None and run.devices[0].peak_bytes_in_use == 10 * MiB
    small = MachineSpec(capacity=8 * MiB, context_bytes=0)
    assert run_machine(merged, {"pool": AllocatorSetup("pool", "ondemand")}, small).oom is not None


def test_side_by_side_keeps_each_traces_own_order_where_its_clock_runs_back() -> None:
    """TensorFlow's events carry its profiler's times, JAX's the capture's: in one test's trace a free
    may bear an earlier time than the allocation before it. Sorting by time alone put the free first."""
    skewed = Trace()
    skewed.add(ALLOCATE_CODE, 1, 2 * MiB, 5.0, source="tensorflow")
    skewed.add(FREE_CODE, 1, 2 * MiB, 4.0, source="tensorflow")  # stamped earlier than its allocation
    skewed.add(ALLOCATE_CODE, 2, MiB, 6.0, source="jax")
    merged, _ = side_by_side([skewed, pool_trace([MiB])])
    spec = MachineSpec(capacity=64 * MiB, context_bytes=0)
    setups = {name: AllocatorSetup(name, "ondemand") for name in ("tensorflow", "jax", "pool")}
    assert run_machine(merged, setups, spec).oom is None  # and no InvalidFreeError


def test_side_by_side_never_takes_one_tests_free_for_anothers_buffer() -> None:
    """Each test's recorder numbers its buffers from 1: merged, test A's allocation of 0x3b came
    right before test B's free of its own 0x3b, and the replay paired them (a temporary freed by the
    next event), then met B's free of a buffer it no longer held: a session of xdist workers ended
    in an InvalidFreeError, with no report."""
    a = Trace()  # its peak (5,000 bytes) at t=1
    a.add(ALLOCATE_CODE, 5, 5000, 1.0, source="jax")
    a.add(FREE_CODE, 5, 5000, 1.02, source="jax")
    a.add(ALLOCATE_CODE, 0x3B, 256, 1.05, source="jax")
    a.add(FREE_CODE, 0x3B, 256, 5.0, source="jax")
    b = Trace()  # its peak at t=0.5: shifted to t=1, its free of 0x3b comes right after A's allocation
    b.add(ALLOCATE_CODE, 0x3B, 100, 0.0, source="jax")
    b.add(ALLOCATE_CODE, 9, 4096, 0.5, source="jax")
    b.add(FREE_CODE, 0x3B, 100, 0.6, source="jax")
    b.add(FREE_CODE, 9, 4096, 2.0, source="jax")
    merged, _ = side_by_side([a, b])
    spec = MachineSpec(capacity=64 * MiB, context_bytes=0)
    run = run_machine(merged, {"jax": AllocatorSetup("jax", "prealloc")}, spec)  # no InvalidFreeError
    assert run.oom is None and run.devices[0].peak_bytes_requested == 5120 + 4096 + 256


def test_trace_columns_travel_as_plain_data() -> None:
    trace = pool_trace([MiB, 2 * MiB], process=3)
    again = Trace.from_columns(json.loads(json.dumps(trace.to_columns())))
    assert again == trace
    with pytest.raises(ValueError, match="unequal length"):
        Trace.from_columns({**trace.to_columns(), "sizes": [1]})


SIDE_BY_SIDE = """
import pytest

@pytest.mark.parametrize("n", [1, 2, 3])
def test_big(devmem, n):
    devmem.pool.alloc({size} * 2**20)
"""


def test_xdist_workers_whose_largest_tests_cannot_share_the_device_fail_the_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_wide=SIDE_BY_SIDE.format(size=600))
    # the user's fraction is kept for each worker (with a warning), so each test fits alone
    result = pytester.runpytest_inprocess(
        "--devmem-mode=ondemand",
        "--devmem-fraction=1",
        "--devmem-device=sim:1GiB",
        "-n",
        "2",
        "-W",
        "ignore::pytest.PytestWarning",
    )
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*xdist: the 2 largest tests do not fit side by side on sim:1GiB, each worker under ondemand, as 2 workers sharing it may run them*failing the session. At most 1 of them fit at once: run with -n 1*",
            "*process 1: test_wide.py::test_big[[]1[]]*",
            "*process 2: test_wide.py::test_big[[]2[]]*",
            "*out of device memory*could not allocate 600.00 MiB*",
        ]
    )


def test_xdist_workers_whose_largest_tests_fit_together_say_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_wide=SIDE_BY_SIDE.format(size=300))
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-device=sim:1GiB", "-n", "2")
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*xdist: the 2 largest tests fit side by side on sim:1GiB, each worker under fraction=0.375 (each at its peak at once): 768.00 MiB in use at most*"
        ]
    )


def test_jax_tests_that_fit_alone_but_not_in_two_workers_shares_fail_the_session(pytester: pytest.Pytester) -> None:
    pytest.importorskip("jax")
    pytester.makepyfile(
        test_jax_wide="""
        import jax.numpy as jnp
        import pytest

        @pytest.mark.parametrize("n", [1, 2])
        def test_wide(n):
            jnp.ones((10 * 2**20,), dtype=jnp.float32).block_until_ready()  # 40 MiB
        """
    )
    # alone, each fits prealloc's 48 MiB of the 64 MiB device; two workers get 24 MiB each
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-device=sim:64MiB", "-n", "2")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*xdist: 2 workers share one device: each gets fraction 0.375*",
            "*xdist: the 2 largest tests do not fit side by side on sim:64MiB, each worker under fraction=0.375*",
            "*JAX (process *) could not allocate 40.00 MiB*its regime's limit is too low*",
        ]
    )


def grow_peak(record: dict, extra: int) -> None:
    """A record as a run with `extra` more bytes at its peak would write it: the headline and its
    peak device's figure alike (a report where they differ is refused)."""
    record["peak_bytes_in_use"] += extra
    for device in record.get("devices") or []:
        if device["device"] == record["peak_device"]:
            device["peak_bytes_in_use"] += extra


CRASHES = """
import os
import signal

import pytest

def test_fine(devmem):
    devmem.pool.alloc(2**20)

@pytest.mark.parametrize("how", ["exit", "kill"])
def test_crash(devmem, how):
    devmem.pool.alloc(2**20)
    if os.environ.get("CRASH"):
        os._exit(3) if how == "exit" else os.kill(os.getpid(), signal.SIGKILL)

def test_unmeasured_crash():
    if os.environ.get("CRASH"):
        os._exit(3)
"""


def test_a_test_that_crashes_its_xdist_worker_is_unrecorded_never_missing(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_crashes=CRASHES.replace("def test_crash", "@pytest.mark.devmem\ndef test_crash"))
    pytester.makepyfile(
        test_more="import pytest\n\n@pytest.mark.devmem\ndef test_more(devmem):\n    devmem.pool.alloc(2**20)\n"
    )
    marked = ["-p", "no:cacheprovider", "-p", "no:randomly"]
    pytester.runpytest_subprocess(*marked, "--devmem-update").assert_outcomes(passed=5)
    monkeypatch.setenv("CRASH", "1")
    result = pytester.runpytest_subprocess(*marked, "-n", "2", "--devmem-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    report = json.loads((pytester.path / "r.json").read_text())
    crashed = {entry["test_id"]: entry["reason"] for entry in report["unrecorded"]}
    assert sorted(crashed) == ["test_crashes.py::test_crash[exit]", "test_crashes.py::test_crash[kill]"]
    assert all("xdist worker" in reason and "crashed" in reason for reason in crashed.values()), crashed
    capsys.readouterr()
    assert main(["compare", str(pytester.path / "baselines"), str(pytester.path / "r.json"), "--json"]) == 0
    verdicts = {v["test_id"]: v["status"] for v in json.loads(capsys.readouterr().out)["tests"]}
    assert verdicts["test_crashes.py::test_crash[kill]"] == "not measured", verdicts
