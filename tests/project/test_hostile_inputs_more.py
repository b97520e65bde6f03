"""Hostile inputs, continued (the families are listed in docs/hostile-inputs.md): marker numbers no
float can hold, a directory where a baseline file belongs, a deleted test module's baselines, sets of
reports that are incomplete or inconsistent (a test twice, one shard of several, shards of different
splits, runs or versions), output flags that contradict each other, spreadsheet formulas in CSV
cells, a merge conflict that rounding hides, test ids with a line break in a child process. Each run
shows no INTERNALERROR and no traceback, no verdict on a partial or ambiguous input, and nothing a
user stored lost."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from pytest_devmem.cli import main
from pytest_devmem.gate.baseline import BaselineStore
from pytest_devmem.gate.record import TestRecord
from pytest_devmem.model.trace import Trace, TraceEvent
from pytest_devmem.present.report import VERSION as REPORT_VERSION
from pytest_devmem.units import MiB


def clean(result: pytest.RunResult) -> None:
    """No INTERNALERROR and no traceback from inside pytest-devmem, whatever the outcome."""
    text = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in text
    assert "Traceback (most recent call last)" not in text


# -- marker numbers no float can hold -------------------------------------------------------

BAD_MARKERS = {
    "max_fragmentation=10**400": "a 401-digit number",
    "fraction=10**400": "a 401-digit number",
    "fraction=-10**400": "a 401-digit number",
    "max_fragmentation=-10**400": "a 401-digit number",
    "mode='compact', fraction=10**400": "a 401-digit number",
    "mode='compact', max_fragmentation=10**400": "a 401-digit number",
    "mode='compact', fraction=-1": "fraction -1",
    "max_fragmentation=-1": "max_fragmentation=-1",
    "max_compiles=-1": "max_compiles=-1",
    "limit=-1": "-1",
    "fraction=float('inf')": "inf",
    "limit=-10**400": "a 401-digit number",
    "limit='x' * 10_000": "'xxxxxxxx",
}


def test_a_marker_number_too_large_or_negative_errors_its_own_test_only(pytester: pytest.Pytester) -> None:
    tests = "\n".join(
        f"@pytest.mark.devmem({kwargs})\ndef test_bad_{n}(devmem):\n    devmem.pool.alloc(2**20)\n"
        for n, kwargs in enumerate(BAD_MARKERS)
    )
    pytester.makepyfile(
        test_marks=f"import pytest\n\n{tests}\n@pytest.mark.devmem(mode='compact')\ndef test_good(devmem):\n    devmem.pool.alloc(2**20)\n"
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    clean(result)
    result.assert_outcomes(passed=1, errors=len(BAD_MARKERS))
    errors = [line for line in result.stdout.lines if line.startswith("E   ") and "@pytest.mark.devmem" in line]
    assert len(errors) == len(BAD_MARKERS)
    for line, named in zip(errors, BAD_MARKERS.values()):
        assert named in line, line
        assert len(line) < 400, line  # a 401-digit number is described, not printed


# -- a directory where a baseline file belongs -------------------------------------------------

WORKLOAD = "def test_model(devmem):\n    devmem.pool.alloc(8 * 2**20)\n"


@pytest.mark.parametrize("inside", ["empty", "holding a file of the user's"])
def test_a_directory_where_a_baseline_file_belongs_is_an_error_naming_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], inside: str
) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    directory = pytester.path / "b" / "sim-16GiB" / "test_workload.py.json"
    directory.mkdir(parents=True)
    if inside != "empty":
        (directory / "notes.txt").write_text("mine")
    for args in ((), ("--devmem-update",), ("--devmem-strict",)):
        result = pytester.runpytest_inprocess(
            "-p", "no:cacheprovider", "--devmem-mode=prealloc", "--devmem-baselines=b", *args
        )
        clean(result)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, (args, result.stdout.str())
        assert (
            str(directory) in result.stderr.str() and "a directory where a baseline file belongs" in result.stderr.str()
        )
    for command in (
        ["show", str(pytester.path / "b")],
        ["compare", str(pytester.path / "b"), str(pytester.path / "b")],
    ):
        assert main(command) == 2
        assert str(directory) in capsys.readouterr().err
    assert directory.is_dir() and (inside == "empty" or (directory / "notes.txt").read_text() == "mine")


# -- a deleted test module's baselines under --devmem-strict ----------------------------------

KEPT = "def test_kept(devmem):\n    devmem.pool.alloc(2**20)\n"
GONE = "def test_gone(devmem):\n    devmem.pool.alloc(2**20)\n"


@pytest.fixture
def deleted_modules(pytester: pytest.Pytester) -> pytest.Pytester:
    """tests/test_kept.py stays; tests/test_gone.py and the whole of tests/old/ are deleted after the
    baselines were written; other/test_other.py lives in a directory of its own."""
    for path, source in (
        ("tests/test_kept.py", KEPT),
        ("tests/test_gone.py", GONE),
        ("tests/old/test_deep.py", GONE),
        ("other/test_other.py", KEPT),
    ):
        (pytester.path / path).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / path).write_text(source)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--devmem-mode=prealloc", "--devmem-update", "tests", "other"
    )
    result.assert_outcomes(passed=4)
    (pytester.path / "tests" / "test_gone.py").unlink()
    shutil.rmtree(pytester.path / "tests" / "old")
    return pytester


GONE_LINE = "*stale baselines, for tests that no longer exist (failing the session (--devmem-strict)): tests/old/test_deep.py::test_gone ?prealloc?, tests/test_gone.py::test_gone ?prealloc?"


@pytest.mark.parametrize(
    "selection",
    [
        (),
        ("tests",),
        ("tests/test_kept.py",),
        ("tests/test_kept.py::test_kept",),
        ("-k", "kept"),
        ("--deselect", "tests/test_kept.py::test_kept", "tests", "other"),
        ("-n", "2"),
    ],
    ids=["all", "directory", "module", "one test", "-k", "deselected", "-n 2"],
)
def test_a_deleted_modules_baselines_are_stale_for_every_selection_that_collects_its_directory(
    deleted_modules: pytest.Pytester, selection: tuple[str, ...]
) -> None:
    if "-n" in selection:
        pytest.importorskip("xdist")
    result = deleted_modules.runpytest_inprocess(
        "-p", "no:cacheprovider", "--devmem-mode=prealloc", "--devmem-strict", *selection
    )
    clean(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines([GONE_LINE])
    assert "test_kept" not in "".join(line for line in result.stdout.lines if line.startswith("stale"))


def test_a_deleted_modules_baselines_are_never_judged_from_another_directory(deleted_modules: pytest.Pytester) -> None:
    result = deleted_modules.runpytest_inprocess(
        "-p", "no:cacheprovider", "--devmem-mode=prealloc", "--devmem-strict", "other"
    )
    clean(result)
    assert result.ret == pytest.ExitCode.OK and "stale" not in result.stdout.str()
    ignored = deleted_modules.runpytest_inprocess(
        "-p", "no:cacheprovider", "--devmem-mode=prealloc", "--devmem-strict", "tests", "--ignore=tests/test_kept.py"
    )
    clean(ignored)  # ignored, but on disk: never stale
    assert "tests/test_kept.py::test_kept" not in ignored.stdout.str()
    ignored.stdout.fnmatch_lines([GONE_LINE])
    lenient = deleted_modules.runpytest_inprocess("-p", "no:cacheprovider", "--devmem-mode=prealloc", "tests")
    assert lenient.ret == pytest.ExitCode.OK
    lenient.stdout.fnmatch_lines(["*stale baselines*--devmem-update removes them*tests/test_gone.py::test_gone*"])
    assert (
        deleted_modules.path / "baselines" / "sim-16GiB" / "tests" / "test_gone.py.json"
    ).is_file()  # said, never deleted


# -- sets of reports: a test twice, one shard of several, shards that do not belong together ---


def record(test_id: str, peak: int, **extra: object) -> dict[str, object]:
    return {
        "test_id": test_id,
        "regime": "prealloc",
        "device": "sim:16GiB",
        "device_class": "sim-16GiB",
        "peak_bytes_in_use": peak,
        "outcome": "passed",
        **extra,
    }


def write_report(
    path: Path, records: list[dict[str, object]], shard: dict[str, object] | None = None, **session: object
) -> Path:
    info: dict[str, object] = {
        "device": "sim:16GiB",
        "device_class": "sim-16GiB",
        "regime": "prealloc",
        "commit": "c1",
        "versions": {"pytest-devmem": "1.0", "jax": "0.10.2"},
        **session,
    }
    if shard is not None:
        info["shard"] = shard
    path.write_text(
        json.dumps(
            {
                "format": "pytest-devmem-report",
                "version": REPORT_VERSION,
                "session": info,
                "records": records,
                "unrecorded": [],
            },
            indent=1,
        )
    )
    return path


def split_of(group: int, groups: int = 2, run: str = "7-1") -> dict[str, object]:
    return {"plugin": "pytest-split", "group": group, "groups": groups, "run": run}


@pytest.mark.parametrize("order", ["small first", "large first"])
def test_a_report_holding_a_test_twice_is_an_error_naming_it_whatever_the_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], order: str
) -> None:
    base = write_report(tmp_path / "base.json", [record("t.py::test_a", MiB)])
    copies = [record("t.py::test_a", MiB), record("t.py::test_a", 50 * MiB)]
    new = write_report(tmp_path / "new.json", copies if order == "small first" else copies[::-1])
    other = write_report(tmp_path / "other.json", [record("t.py::test_b", MiB)])
    for command in (
        ["compare", str(base), str(new)],
        ["compare", str(base), str(new), str(other)],
        ["merge", str(new), "-o", str(tmp_path / "m.json")],
        ["history", str(base), str(new)],
    ):
        assert main(command) == 2, command
        error = capsys.readouterr().err
        assert "'t.py::test_a'" in error and "twice" in error and str(new) in error, (command, error)
    assert not (tmp_path / "m.json").exists()


def test_a_test_twice_with_the_same_figures_is_kept_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_report(tmp_path / "base.json", [record("t.py::test_a", MiB)])
    new = write_report(tmp_path / "new.json", [record("t.py::test_a", MiB), record("t.py::test_a", MiB)])
    assert main(["compare", str(base), str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == {"ok": 1}
    assert main(["merge", str(new), "-o", str(tmp_path / "m.json")]) == 0
    assert len(json.loads((tmp_path / "m.json").read_text())["records"]) == 1


RERUN = """
import pytest
from _pytest.runner import runtestprotocol

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):  # as pytest-rerunfailures does: the test runs again
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for attempt in range(2):
        runtestprotocol(item, nextitem=nextitem, log=True)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
"""


def test_a_test_run_twice_in_one_session_is_reported_once_by_its_last_run(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makeconftest(RERUN)
    pytester.makepyfile(
        test_rerun="RUNS = []\n\ndef test_grows(devmem):\n    RUNS.append(1)\n    devmem.pool.alloc(len(RUNS) * 2**20)\n"
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--devmem-mode=prealloc", "--devmem-report=r.json", "--devmem-update"
    )
    clean(result)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    assert [(r["test_id"], r["peak_bytes_in_use"]) for r in records] == [("test_rerun.py::test_grows", 2 * MiB)]
    assert (
        main(["compare", str(pytester.path / "baselines"), str(pytester.path / "r.json")]) == 0
    )  # the report its own command reads
    capsys.readouterr()


def test_one_shard_compared_alone_fails_unless_the_set_is_said_to_be_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_report(tmp_path / "base.json", [record("t.py::test_a", MiB), record("t.py::test_b", MiB)])
    one = write_report(tmp_path / "s1.json", [record("t.py::test_a", MiB)], split_of(1))
    two = write_report(tmp_path / "s2.json", [record("t.py::test_b", MiB)], split_of(2))
    assert main(["compare", str(base), str(one)]) == 2
    error = capsys.readouterr().err
    assert str(one) in error and "group 1 of 2" in error and "--partial" in error
    assert main(["compare", str(base), str(one), "--partial"]) == 0
    assert "1 missing" in capsys.readouterr().out
    assert main(["compare", str(base), str(one), str(two)]) == 0  # the whole set
    capsys.readouterr()
    assert main(["merge", str(one), "-o", str(tmp_path / "m1.json")]) == 2  # merged alone, a group is missing
    assert (
        main(["merge", str(one), "--partial", "-o", str(tmp_path / "m1.json")]) == 0
    )  # said to be partial, it is still one shard of two
    capsys.readouterr()
    assert main(["compare", str(base), str(tmp_path / "m1.json")]) == 2
    assert "group 2" in capsys.readouterr().err


@pytest.mark.parametrize(
    "shard",
    [
        {"group": 1, "groups": 10**18, "plugin": "x", "run": "r"},
        {"group": [1], "groups": [2], "plugin": {"a": 1}, "run": ["r"]},
        {"group": True, "groups": 2},
        {"groups": -3},
        {},
    ],
    ids=["a huge split", "lists and objects", "a boolean group", "negative groups", "empty"],
)
def test_a_shard_that_describes_itself_oddly_is_judged_without_a_crash_or_a_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shard: dict[str, object]
) -> None:
    base = write_report(tmp_path / "base.json", [record("t.py::test_a", MiB)])
    one = write_report(tmp_path / "s1.json", [record("t.py::test_a", MiB)], shard)
    two = write_report(tmp_path / "s2.json", [record("t.py::test_b", MiB)], {**shard, "run": {"other": 1}})
    for command in (
        ["compare", str(base), str(one)],
        ["compare", str(base), str(one), str(two)],
        ["merge", str(one), str(two), "-o", str(tmp_path / "m.json")],
        ["history", str(one), str(two)],
    ):
        assert main(command) in (0, 1, 2), command
        out, error = capsys.readouterr()
        assert "Traceback" not in error and len(out) + len(error) < 20_000, command
    assert main(["compare", str(base), str(one)]) == 2  # group 1 of 10**18 lacks the others; the rest cannot be true
    assert main(["compare", str(base), str(one), "--partial"]) == (0 if shard.get("groups") == 10**18 else 2)


@pytest.mark.parametrize(
    "groups",
    [[(3, 2)], [(0, 2)], [(1, 2), (1, 2)], [(1, 1)], [(1, 2), (2, 2), (2, 2)]],
    ids=["group 3 of 2", "group 0", "a group twice", "group 1 of 1", "a group twice of all"],
)
def test_shards_that_cannot_be_true_never_merge_not_even_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], groups: list[tuple[int, int]]
) -> None:
    base = write_report(tmp_path / "base.json", [record(f"t.py::test_{n}", MiB) for n in range(len(groups))])
    shards = [
        str(write_report(tmp_path / f"s{n}.json", [record(f"t.py::test_{n}", MiB)], split_of(group, total)))
        for n, (group, total) in enumerate(groups)
    ]
    for command in (
        ["compare", str(base), *shards, "--partial"],
        ["merge", *shards, "--partial", "-o", str(tmp_path / "m.json")],
    ):
        assert main(command) == 2, command
        error = capsys.readouterr().err
        assert "shard" in error and f"group {groups[-1][0]}" in error, (command, error)
    assert not (tmp_path / "m.json").exists()


def test_compare_device_class_that_the_run_did_not_measure_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = {"device": "sim:T4", "device_class": "sim-T4"}
    base = write_report(tmp_path / "base.json", [record("t.py::test_a", MiB), record("t.py::test_a", MiB, **gpu)])
    new = write_report(tmp_path / "new.json", [record("t.py::test_a", MiB)])
    assert main(["compare", str(base), str(new), "--device-class", "sim-T4"]) == 2
    error = capsys.readouterr().err
    assert "--device-class 'sim-T4'" in error and "measured nothing" in error and "sim-16GiB" in error


def test_shards_of_different_splits_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = write_report(tmp_path / "s1.json", [record("t.py::test_a", MiB)], split_of(1, 2))
    two = write_report(tmp_path / "s2.json", [record("t.py::test_b", MiB)], split_of(2, 3))
    for command in (
        ["merge", str(one), str(two), "-o", str(tmp_path / "m.json")],
        ["compare", str(one), str(one), str(two)],
    ):
        assert main(command) == 2
        error = capsys.readouterr().err
        assert str(one) in error and str(two) in error and "2 groups" in error and "3 groups" in error
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize(
    ("change", "warning"),
    [
        ({"shard": split_of(2, run="8-1")}, "different CI runs"),
        ({"commit": "c2"}, "different commits"),
        ({"versions": {"pytest-devmem": "1.0", "jax": "0.9.0"}}, "jax 0.10.2 and 0.9.0"),
        ({"versions": {"pytest-devmem": "0.9", "jax": "0.10.2"}}, "pytest-devmem 1.0 and 0.9"),
    ],
    ids=["run", "commit", "jax", "pytest-devmem"],
)
def test_shards_of_different_runs_or_versions_merge_with_a_warning_or_are_refused_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, object], warning: str
) -> None:
    one = write_report(tmp_path / "s1.json", [record("t.py::test_a", MiB)], split_of(1))
    two = write_report(tmp_path / "s2.json", [record("t.py::test_b", MiB)], **{"shard": split_of(2), **change})  # type: ignore[arg-type]
    assert main(["merge", str(one), str(two), "-o", str(tmp_path / "m.json")]) == 0
    error = capsys.readouterr().err
    assert error.startswith("devmem: warning: ") and warning in error and str(one) in error and str(two) in error
    assert main(["merge", str(one), str(two), "-o", str(tmp_path / "m2.json"), "--same-run"]) == 2
    assert warning in capsys.readouterr().err and not (tmp_path / "m2.json").exists()
    assert main(["compare", str(one), str(one), str(two)]) == 0
    assert warning in capsys.readouterr().err


def test_the_same_run_merges_without_a_word(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = write_report(tmp_path / "s1.json", [record("t.py::test_a", MiB)], split_of(1))
    two = write_report(tmp_path / "s2.json", [record("t.py::test_b", MiB)], split_of(2))
    assert main(["merge", str(one), str(two), "-o", str(tmp_path / "m.json"), "--same-run"]) == 0
    assert capsys.readouterr().err == ""


def test_a_merge_conflict_shows_the_bytes_when_rounding_hides_the_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = write_report(tmp_path / "s1.json", [record("t.py::test_a", MiB)], split_of(1))
    two = write_report(tmp_path / "s2.json", [record("t.py::test_a", MiB + 4096)], split_of(2))
    assert main(["merge", str(one), str(two), "-o", str(tmp_path / "m.json")]) == 2
    error = capsys.readouterr().err
    assert "peak_bytes_in_use 1.00 MiB (1048576 bytes) and 1.00 MiB (1052672 bytes)" in error
    three = write_report(tmp_path / "s3.json", [record("t.py::test_a", 2 * MiB)], split_of(2))
    assert main(["merge", str(one), str(three), "-o", str(tmp_path / "m.json")]) == 2
    assert "peak_bytes_in_use 1.00 MiB and 2.00 MiB" in capsys.readouterr().err  # told apart without them


UNRECORDED = {
    "not a list": "x",
    "entry not an object": ["x"],
    "reason missing": [{"test_id": "t", "regime": "prealloc", "device": "d"}],
    "test id a number": [{"test_id": 5, "regime": "prealloc", "device": "d", "reason": "r"}],
}


@pytest.mark.parametrize("case", sorted(UNRECORDED))
def test_a_malformed_unrecorded_list_is_refused_by_every_reader_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pandas_loaded: object, case: str
) -> None:
    report = write_report(tmp_path / "r.json", [record("t.py::test_a", MiB)])
    document = json.loads(report.read_text())
    document["unrecorded"] = UNRECORDED[case]
    report.write_text(json.dumps(document))
    messages = set()
    for command in (
        ["compare", str(report), str(report)],
        ["history", str(report)],
        ["merge", str(report), "-o", str(tmp_path / "m.json")],
        ["plot", str(report), "-o", str(tmp_path / "p.html")],
    ):
        assert main(command) == 2, command
        error = capsys.readouterr().err
        assert (
            str(report) in error
            and '"unrecorded" must be a list of objects with test_id, regime, device and reason (as text)' in error
        ), (command, error)
        messages.add(error)
    assert len(messages) == 1  # one reader, one rule, one message


def test_merge_into_a_baselines_path_that_is_a_file_says_what_was_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = write_report(tmp_path / "r.json", [record("t.py::test_a", MiB)])
    mine = tmp_path / "baselines.txt"
    mine.write_text("my notes")
    assert main(["merge", str(report), "--baselines", str(mine), "-o", str(tmp_path / "m.json")]) == 2
    error = capsys.readouterr().err
    assert (
        "File exists" not in error
        and str(mine) in error
        and "--baselines names the directory of baseline files" in error
    )
    assert mine.read_text() == "my notes" and not (tmp_path / "m.json").exists()  # refused before anything is written


# -- output flags that contradict each other --------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ["--json", "--format=markdown"],
        ["--format=markdown", "--json"],
        ["--json", "--csv"],
        ["--csv", "--json"],
        ["--format=csv", "--json"],
    ],
)
def test_contradicting_output_flags_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    report = write_report(tmp_path / "r.json", [record("t.py::test_a", MiB)])
    with pytest.raises(SystemExit) as exit_:
        main(["compare", str(report), str(report), *flags])
    assert exit_.value.code == 2
    out, error = capsys.readouterr()
    assert out == "" and "not both" in error


@pytest.mark.parametrize("flags", [["--json", "--format=json"], ["--csv", "--format=csv"], ["--json", "--json"]])
def test_output_flags_that_agree_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    report = write_report(tmp_path / "r.json", [record("t.py::test_a", MiB)])
    assert main(["compare", str(report), str(report), *flags]) == 0
    out = capsys.readouterr().out
    json.loads(out) if "json" in " ".join(flags) else next(csv.reader(io.StringIO(out)))


# -- spreadsheet formulas in CSV cells (OWASP CSV injection) -----------------------------------

FORMULAS = [
    '=HYPERLINK("http://x","y")',
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd",
    "@SUM(1+1)*cmd",
    "\t=1",
    "\r=1",
    "'=already quoted",
]


def test_a_cell_that_a_spreadsheet_would_run_is_neutralised_and_numbers_stay_numbers() -> None:
    from pytest_devmem.spreadsheet import csv_cell

    for text in FORMULAS:
        assert csv_cell(text) == "'" + text
    for number in (-1048576, -0.5, "-1048576", "-1.5e3", 0, 12):
        assert csv_cell(number) == number
    for text in ("tests/test_x.py::test_a", "", "a=b", "1-2"):
        assert csv_cell(text) == text


def test_compare_csv_neutralises_formulas_in_every_text_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printable = [
        text for text in FORMULAS if text[0] not in "\t\r"
    ]  # the command shows a tab or CR escaped, as every control character
    base = write_report(tmp_path / "base.json", [record(text, 10 * MiB) for text in printable])
    new = write_report(tmp_path / "new.json", [record(text, MiB) for text in printable])
    assert main(["compare", str(base), str(new), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sorted(row["test"] for row in rows) == sorted("'" + text for text in printable)
    assert all(row["delta"] == str(-9 * MiB) for row in rows)  # a negative number is a number
    for row in rows:
        assert not any(
            cell[:1] in ("=", "+", "@", "\t", "\r")
            or (cell[:1] == "-" and cell != str(-9 * MiB) and not cell.startswith("-9"))
            for cell in row.values()
        ), row


def test_the_report_csv_neutralises_formulas(tmp_path: Path) -> None:
    from pytest_devmem.present.report import csv_text

    records = [
        TestRecord(text, "prealloc", "=cmd|' /C calc'!A0", "@class", MiB, MiB, 0.0, None, "-passed")
        for text in FORMULAS
    ]
    rows = list(csv.DictReader(io.StringIO(csv_text(records), newline="")))
    assert [row["test_id"] for row in rows] == ["'" + text for text in FORMULAS]
    assert {row["device"] for row in rows} == {"'=cmd|' /C calc'!A0"} and {row["outcome"] for row in rows} == {
        "'-passed"
    }
    assert {row["peak_bytes_in_use"] for row in rows} == {str(MiB)}


def test_a_trace_csv_neutralises_labels_and_reads_them_back_as_they_were(tmp_path: Path) -> None:
    events = [
        TraceEvent("allocate", n + 1, MiB, source="jax", label=text)
        for n, text in enumerate([*FORMULAS, "''=two quotes", "plain"])
    ]
    path = tmp_path / "t.csv"
    Trace(events).write_csv(path)
    with open(path, newline="", encoding="utf-8") as handle:
        labels = [row["Label"] for row in csv.DictReader(handle)]
    assert all(label[:1] not in ("=", "+", "-", "@", "\t", "\r") for label in labels)
    assert [event.label for event in Trace.read_csv(path)] == [event.label for event in events]


# -- a test id with a line break, in the child process of another regime ----------------------


def test_a_test_id_with_a_line_break_runs_in_its_child_process_with_id_escaping_off(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ndisable_test_id_escaping_and_forfeit_all_rights_to_community_support = true\n")
    pytester.makepyfile(
        test_ids="""
import pytest

@pytest.mark.devmem(mode="growth")
@pytest.mark.parametrize("n", [1, 2, 3], ids=["line\\nbreak", " padded ", "plain"])
def test_child(devmem, n):
    devmem.pool.alloc(n * 2**20)
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--devmem-mode=prealloc", "--devmem-report=r.json")
    clean(result)
    result.assert_outcomes(passed=3)
    peaks = {
        r["test_id"]: r["peak_bytes_requested"] for r in json.loads((pytester.path / "r.json").read_text())["records"]
    }
    assert peaks == {
        "test_ids.py::test_child[line\nbreak]": MiB,
        "test_ids.py::test_child[ padded ]": 2 * MiB,
        "test_ids.py::test_child[plain]": 3 * MiB,
    }


# -- nothing stored is lost ----------------------------------------------------------------------


def test_a_refused_merge_never_touches_the_baselines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baselines = tmp_path / "baselines"
    BaselineStore(baselines, "sim-16GiB").write(
        [TestRecord("t.py::test_a", "prealloc", "sim:16GiB", "sim-16GiB", MiB, MiB, 0.0, None, "passed")], {}
    )
    before = {path: path.read_bytes() for path in baselines.rglob("*") if path.is_file()}
    new = write_report(tmp_path / "new.json", [record("t.py::test_a", MiB), record("t.py::test_a", 2 * MiB)])
    one = write_report(tmp_path / "s1.json", [record("t.py::test_a", 3 * MiB)], split_of(1, 2))
    two = write_report(tmp_path / "s2.json", [record("t.py::test_b", MiB)], split_of(2, 3))
    for command in (
        ["merge", str(new), "--baselines", str(baselines)],
        ["merge", str(one), str(two), "--baselines", str(baselines)],
    ):
        assert main(command) == 2
    assert {path: path.read_bytes() for path in baselines.rglob("*") if path.is_file()} == before
    (
        baselines / "sim-16GiB" / "u.py.json"
    ).mkdir()  # the baselines cannot be read: neither they nor the merged report are written
    good = write_report(tmp_path / "good.json", [record("t.py::test_a", 2 * MiB)])
    assert main(["merge", str(good), "-o", str(tmp_path / "merged.json"), "--baselines", str(baselines)]) == 2
    assert "a directory where a baseline file belongs" in capsys.readouterr().err
    assert (
        not (tmp_path / "merged.json").exists()
        and {path: path.read_bytes() for path in baselines.rglob("*") if path.is_file()} == before
    )
