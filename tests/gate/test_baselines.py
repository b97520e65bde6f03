"""Baselines through the real plugin: save, rerun, regress, tolerate, refuse bad files, strict, xdist."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from pytest_devmem.gate.baseline import BaselineStore
from pytest_devmem.gate.baseline_files import read_file
from pytest_devmem.gate.changes import compare
from pytest_devmem.gate.record import TestRecord, TraceFacts
from pytest_devmem.gate.tolerance import parse_tolerance
from pytest_devmem.units import MiB

WORKLOAD = """
import os
import pytest

SIZE = int(os.environ.get("WORKLOAD_MIB", "8")) * 2**20

def test_model(devmem):
    devmem.pool.alloc(SIZE)

@pytest.mark.parametrize("n", [1, 2])
def test_layers(devmem, n):
    devmem.pool.alloc(n * 2**20)
"""


def baseline_file(pytester: pytest.Pytester) -> Path:
    return pytester.path / "baselines" / "sim-16GiB" / "test_workload.py.json"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("--devmem-mode=prealloc", *args)


def test_save_then_rerun_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    saved = run(pytester, "--devmem-update")
    saved.assert_outcomes(passed=3)
    saved.stdout.fnmatch_lines(["*baselines written: 1 file(s)*test_workload.py.json*"])
    document = json.loads(baseline_file(pytester).read_text())
    assert document["format"] == "pytest-devmem-baseline" and document["device_class"] == "sim-16GiB"
    model = document["records"]["test_workload.py::test_model"]["prealloc"]
    assert model["metrics"]["peak_bytes_in_use"] == 8 * MiB
    assert model["device"] == "sim:16GiB" and "pytest-devmem" in model["versions"]
    again = run(pytester)
    again.assert_outcomes(passed=3)
    again.stdout.fnmatch_lines(["*baselines (*sim-16GiB): 3 ok*"])


def test_twice_the_memory_fails_the_test_with_the_numbers(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    run(pytester, "--devmem-update").assert_outcomes(passed=3)
    monkeypatch.setenv("WORKLOAD_MIB", "16")
    result = run(pytester)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "device memory regression against baselines/sim-16GiB/test_workload.py.json (regime prealloc):*",  # from the rootdir, as in the repository
            "*peak_bytes_in_use: baseline 8.00 MiB, now 16.00 MiB, delta +8.00 MiB (+100.0%), allowed ±10% or 1.00 MiB*",
            "*refresh the baseline with --devmem-update*",
            "MEMORY PROBLEMS test_workload.py::test_model*",
        ]
    )


def test_improvement_is_reported_for_a_refresh(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    run(pytester, "--devmem-update")
    monkeypatch.setenv("WORKLOAD_MIB", "4")
    result = run(pytester)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*1 improved, 2 ok*",
            "*improved beyond tolerance (refresh with --devmem-update): test_workload.py::test_model ?prealloc?*",
        ]
    )


def test_update_refreshes_only_the_tests_that_ran_and_keeps_the_rest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    run(pytester, "--devmem-update")
    monkeypatch.setenv("WORKLOAD_MIB", "12")
    run(pytester, "--devmem-update", "-k", "test_model").assert_outcomes(passed=1)
    records = json.loads(baseline_file(pytester).read_text())["records"]
    assert records["test_workload.py::test_model"]["prealloc"]["metrics"]["peak_bytes_in_use"] == 12 * MiB
    assert set(records) == {
        "test_workload.py::test_model",
        "test_workload.py::test_layers[1]",
        "test_workload.py::test_layers[2]",
    }


def test_an_update_that_measured_nothing_says_so(pytester: pytest.Pytester) -> None:
    """Without --devmem-mode only marked tests are measured: an update of an unmarked suite writes no
    baseline, and says so rather than nothing at all."""
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--devmem-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "pytest-devmem: --devmem-update wrote no baseline: no test was measured "
            "(without --devmem-mode only tests marked devmem are)"
        ]
    )
    assert not (pytester.path / "baselines").exists()


@pytest.mark.parametrize(
    ("spec", "env_mib", "outcome"),
    [
        ("25%", "9", "passed"),
        ("5%", "9", "passed"),  # a percentage alone keeps the 1 MiB floor: +1 MiB is within it
        ("5%", "10", "failed"),
        ("5%,0B", "9", "failed"),  # no floor, as asked
        ("2MiB", "9", "passed"),
        ("512KiB", "9", "failed"),
        ("peak_bytes_reserved:1%", "9", "passed"),
    ],
)
def test_tolerance_specs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, spec: str, env_mib: str, outcome: str
) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    run(pytester, "--devmem-update")
    monkeypatch.setenv("WORKLOAD_MIB", env_mib)
    result = run(pytester, f"--devmem-tolerance={spec}", "-k", "test_model")
    result.assert_outcomes(**{outcome: 1})


def test_marker_tolerance_overrides_the_session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(
        test_workload="""
        import os, pytest
        @pytest.mark.devmem(tolerance="50%")
        def test_loose(devmem):
            devmem.pool.alloc(int(os.environ.get("WORKLOAD_MIB", "8")) * 2**20)
        def test_tight(devmem):
            devmem.pool.alloc(int(os.environ.get("WORKLOAD_MIB", "8")) * 2**20)
        """
    )
    run(pytester, "--devmem-update")
    monkeypatch.setenv("WORKLOAD_MIB", "10")
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["MEMORY PROBLEMS test_workload.py::test_tight*"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ten percent", "invalid devmem tolerance 'ten percent'"),
        (
            "speed:5%",
            "unknown metric 'speed'; metrics: peak_bytes_in_use, peak_bytes_reserved, peak_bytes_requested, fragmentation",
        ),
        ("fragmentation:64MiB", "a byte size only fits peak_bytes_in_use, peak_bytes_reserved"),
        ("-5%", "a percentage must be a finite number, 0 or more"),
        ("inf%", "'inf%' for peak_bytes_in_use: a percentage must be a finite number, 0 or more"),
        ("fragmentation:nan", "'nan' for fragmentation: must be a finite number, 0 or more"),
        ("5%,peak_bytes_in_use:6%", "peak_bytes_in_use is given two relative amounts"),
        ("16G", "ambiguous size '16G'"),
        (
            "10",
            "'10' for peak_bytes_in_use: a number without a unit is ambiguous for a byte metric; write 10% for a share of the baseline, or a size such as 10MiB or 10B",
        ),
        ("0.1", "write 0.1% for a share of the baseline, or a size such as 0.1MiB or 0.1B"),
        ("peak_bytes_reserved:64", "'64' for peak_bytes_reserved: a number without a unit is ambiguous"),
    ],
)
def test_bad_tolerance_is_a_usage_error(pytester: pytest.Pytester, spec: str, message: str) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    result = run(pytester, f"--devmem-tolerance={spec}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str() and "(from --devmem-tolerance)" in result.stderr.str()


def test_bad_marker_tolerance_errors_that_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n@pytest.mark.devmem(tolerance='lots')\ndef test_x():\n    pass\n")
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*invalid devmem tolerance 'lots'*"])


CORRUPT_HEAD = (
    '{\n  "format": "pytest-devmem-baseline",\n  "version": 1,\n  "device_class": "sim-16GiB",\n  "records": {\n'
)
CORRUPT = {
    "not json": ('{\n  "format": "pytest-devmem-baseline",\n  oops\n}\n', ":3: not valid JSON"),
    "truncated": ('{\n  "format": "pytest-devmem-baseline",\n  "records": {\n', "(the file looks cut short)"),
    "foreign": ('{\n  "name": "some other tool"\n}\n', ":1: not a pytest-devmem baseline"),
    "future version": (
        '{\n  "format": "pytest-devmem-baseline",\n  "version": 7,\n  "device_class": "sim-16GiB",\n  "records": {}\n}\n',
        ":3: baseline format version 7 is not supported",
    ),
    "wrong device": (
        '{\n  "format": "pytest-devmem-baseline",\n  "version": 1,\n  "device_class": "cuda-H100",\n  "records": {}\n}\n',
        ":4: holds device class 'cuda-H100'",
    ),
    "bad metric": (
        '{\n  "format": "pytest-devmem-baseline",\n  "version": 1,\n  "device_class": "sim-16GiB",\n  "records": {\n'
        '    "test_workload.py::test_model": {"prealloc": {"metrics": {\n      "peak_bytes_in_use": "big"}}}\n  }\n}\n',
        ":7: record 'test_workload.py::test_model' metric peak_bytes_in_use is 'big', not a number",
    ),
    "400-digit peak": (
        CORRUPT_HEAD
        + '    "test_workload.py::test_model": {"prealloc": {"metrics": {\n      "peak_bytes_in_use": '
        + "9" * 400
        + "}}}\n  }\n}\n",
        "metric peak_bytes_in_use is a 400-digit number, far beyond any device",
    ),
    "5000-digit peak": (
        CORRUPT_HEAD
        + '    "test_workload.py::test_model": {"prealloc": {"metrics": {\n      "peak_bytes_in_use": '
        + "9" * 5000
        + "}}}\n  }\n}\n",
        "not usable JSON: Exceeds the limit",
    ),
    # a hand merge that kept both sides: JSON's last value would win without a word, and decide the gate
    "a test twice": (
        CORRUPT_HEAD
        + '    "test_workload.py::test_model": {"prealloc": {"metrics": {"peak_bytes_in_use": 4194304}}},\n'
        + '    "test_workload.py::test_model": {"prealloc": {"metrics": {"peak_bytes_in_use": 83886080}}}\n  }\n}\n',
        ':7: not usable JSON: the key "test_workload.py::test_model" is in one object twice; keep one of them',
    ),
    "fractional peak": (
        CORRUPT_HEAD
        + '    "test_workload.py::test_model": {"prealloc": {"metrics": {\n      "peak_bytes_in_use": 4195328.5}}}\n  }\n}\n',
        ":7: record 'test_workload.py::test_model' metric peak_bytes_in_use is 4195328.5, not a whole number of bytes",
    ),
    "unknown regime": (
        CORRUPT_HEAD
        + '    "test_workload.py::test_model": {"turbo": {"metrics": {"peak_bytes_in_use": 4194304}}}\n  }\n}\n',
        ":6: record 'test_workload.py::test_model' regime 'turbo' names none: unknown devmem mode 'turbo'",
    ),
    "negative peak": (
        CORRUPT_HEAD
        + '    "test_workload.py::test_model": {"prealloc": {"metrics": {\n      "peak_bytes_in_use": -20971620}}}\n  }\n}\n',
        "metric peak_bytes_in_use is -20971620: figures are never negative",
    ),
}
HEAD_BYTES = CORRUPT_HEAD.encode()


@pytest.mark.parametrize(
    "content", [HEAD_BYTES + b"\xff\xfe not utf-8", bytes(range(256)) * 4], ids=["non-utf8", "binary"]
)
def test_a_baseline_that_is_not_utf8_text_names_its_file(pytester: pytest.Pytester, content: bytes) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    path = baseline_file(pytester)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    result = run(pytester, "--devmem-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{path}:" in result.stderr.str() and ": not UTF-8 text" in result.stderr.str()
    assert path.read_bytes() == content


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks and FIFOs")
@pytest.mark.parametrize("kind", ["directory", "dangling link", "link loop", "fifo"])
def test_odd_things_named_json_in_the_baselines_never_hang_or_crash(pytester: pytest.Pytester, kind: str) -> None:

    pytester.makepyfile(test_workload=WORKLOAD)
    odd = pytester.path / "baselines" / "sim-16GiB" / "x.json"
    odd.parent.mkdir(parents=True)
    if kind == "directory":
        odd.mkdir()
    elif kind == "dangling link":
        odd.symlink_to(odd.parent / "nowhere.json")
    elif kind == "link loop":
        odd.symlink_to(odd)
    else:
        os.mkfifo(odd)
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # an empty directory stands where a baseline file belongs
    assert str(odd) in result.stderr.str()


@pytest.mark.parametrize(
    ("option", "make", "message"),
    [
        (
            "--devmem-baselines=taken",
            "file",
            "invalid devmem baselines directory 'taken' (from --devmem-baselines): it exists and is not a directory",
        ),
        (
            "--devmem-report=taken.json",
            "dir",
            "invalid devmem report file 'taken.json' (from --devmem-report): it is a directory",
        ),
    ],
)
def test_output_paths_of_the_wrong_kind_are_usage_errors(
    pytester: pytest.Pytester, option: str, make: str, message: str
) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    target = pytester.path / option.split("=")[1]
    target.mkdir() if make == "dir" else target.write_text("mine")
    result = run(pytester, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_baseline_that_cannot_be_written_fails_the_session_and_others_are_still_written(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_other="def test_other(devmem):\n    devmem.pool.alloc(2**20)\n")
    pytester.mkdir("sub")
    (pytester.path / "sub" / "test_workload.py").write_text(WORKLOAD)
    locked = pytester.path / "baselines" / "sim-16GiB"
    locked.mkdir(parents=True)
    (locked / "sub").write_text("a file of the user's, in the way of one baseline's directory")
    result = run(pytester, "--devmem-update")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*pytest-devmem: baseline not written: *sub*"])
    assert (locked / "test_other.py.json").is_file()
    assert (
        (locked / "sub").read_text().startswith("a file of the user's")
    )  # (a directory in the way: tests/project/test_hostile_inputs_more.py)


def test_a_test_outside_the_rootdir_gets_a_baseline_file_too(tmp_path: Path) -> None:
    from pytest_devmem.gate.record import TestRecord

    store = BaselineStore(tmp_path, "sim-16GiB")
    outside = TestRecord("::test_o", "prealloc", "sim:16GiB", "sim-16GiB", MiB, MiB, 0.0, False, "passed")
    long_module = TestRecord(
        "tests/" + "m" * 240 + ".py::test_long", "prealloc", "sim:16GiB", "sim-16GiB", MiB, MiB, 0.0, False, "passed"
    )
    written, problems = store.write([outside, long_module], {})
    assert problems == [] and len(written) == 2
    assert store.load().get("::test_o", "prealloc") is not None
    assert store.get(long_module.test_id, "prealloc") is not None


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_or_foreign_baseline_stops_the_run_and_is_never_overwritten(
    pytester: pytest.Pytester, case: str
) -> None:
    content, message = CORRUPT[case]
    pytester.makepyfile(test_workload=WORKLOAD)
    path = baseline_file(pytester)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    for args in ((), ("--devmem-update",)):
        result = run(pytester, *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        error = result.stderr.str()
        assert "corrupt or foreign baseline file" in error and str(path) in error and message in error
        assert path.read_text() == content


def test_strict_fails_new_tests_and_stale_baselines(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    first = run(pytester, "--devmem-strict")
    first.assert_outcomes(failed=3)
    first.stdout.fnmatch_lines(
        [
            "*no baseline for test_workload.py::test_model under regime prealloc on sim-16GiB (--devmem-strict); record one with --devmem-update*"
        ]
    )
    run(pytester, "--devmem-update").assert_outcomes(passed=3)
    pytester.makepyfile(test_workload=WORKLOAD.replace("def test_model", "def test_renamed"))
    result = run(pytester, "--devmem-strict", "-k", "layers")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*stale baselines, for tests that no longer exist (failing the session (--devmem-strict)): test_workload.py::test_model ?prealloc?*"
        ]
    )
    lenient = run(pytester, "-k", "layers")
    assert lenient.ret == pytest.ExitCode.OK
    lenient.stdout.fnmatch_lines(["*stale baselines*--devmem-update removes them; --devmem-strict fails the session*"])


def test_an_update_removes_the_baselines_of_tests_that_are_gone_and_keeps_those_not_selected(
    pytester: pytest.Pytester,
) -> None:
    """A renamed test's old baseline went on failing every `--devmem-strict` run, and no command
    removed it: an update removes it, as syrupy's --snapshot-update removes unused snapshots. A
    test that exists but was not selected keeps its baseline; a file left with none is deleted."""
    pytester.makepyfile(test_workload=WORKLOAD, test_gone="def test_gone(devmem):\n    devmem.pool.alloc(1024)\n")
    run(pytester, "--devmem-update").assert_outcomes(passed=4)
    gone_file = baseline_file(pytester).with_name("test_gone.py.json")
    assert gone_file.is_file()
    (pytester.path / "test_gone.py").unlink()
    pytester.makepyfile(test_workload=WORKLOAD.replace("def test_model", "def test_renamed"))
    result = run(pytester, "--devmem-update", "-k", "renamed")  # the two layers tests are not selected
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*stale baselines removed, for tests that no longer exist: test_gone.py::test_gone ?prealloc?, test_workload.py::test_model ?prealloc?*"
        ]
    )
    assert not gone_file.exists()
    stored = {e.test_id for e in BaselineStore(pytester.path / "baselines", "sim-16GiB").load().entries()}
    assert stored == {f"test_workload.py::{name}" for name in ("test_renamed", "test_layers[1]", "test_layers[2]")}
    strict = run(pytester, "--devmem-strict")
    assert strict.ret == pytest.ExitCode.OK and "stale" not in strict.stdout.str()


def test_xdist_writes_every_baseline_once_and_loses_nothing(pytester: pytest.Pytester) -> None:
    other = baseline_file(pytester).with_name("test_other.py.json")
    other.parent.mkdir(parents=True)
    store = BaselineStore(pytester.path / "baselines", "sim-16GiB")
    keep = TestRecord("test_other.py::test_kept", "prealloc", "sim:16GiB", "sim-16GiB", 123, 456, 0.0, False, "passed")
    store.write([keep], {"pytest-devmem": "test"})
    pytester.makepyfile(
        test_workload="""
        import pytest
        @pytest.mark.parametrize("n", range(20))
        def test_many(devmem, n):
            devmem.pool.alloc((n + 1) * 2**20)
        """,
        test_other="def test_kept(devmem):\n    devmem.pool.alloc(123)\n",  # not selected: never stale
    )
    result = run(pytester, "-n", "2", "--devmem-update", "-k", "many")
    result.assert_outcomes(passed=20)
    records = json.loads(baseline_file(pytester).read_text())["records"]
    assert len(records) == 20
    assert records["test_workload.py::test_many[19]"]["prealloc"]["metrics"]["peak_bytes_in_use"] == 20 * MiB
    assert [e.test_id for e in read_file(other)] == ["test_other.py::test_kept"]
    rerun = run(pytester, "-n", "2", "-k", "many")
    rerun.assert_outcomes(passed=20)
    rerun.stdout.fnmatch_lines(["*baselines (*): 20 ok*"])


def test_device_classes_are_never_compared(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    run(pytester, "--devmem-update")
    monkeypatch.setenv("WORKLOAD_MIB", "64")
    result = run(pytester, "--devmem-device=sim:80GiB")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*baselines (*sim-80GiB): 3 new*"])


def test_compare_unit() -> None:
    tolerance = parse_tolerance("peak_bytes_in_use:10%,fragmentation:0.05")
    store_entry = None
    assert compare(store_entry, "t", "prealloc", {"peak_bytes_in_use": 1}, tolerance).status == "new"


@pytest.mark.parametrize(
    ("spec", "baseline", "now", "status"),
    [
        ("10%,1MiB", 4, 8, "ok"),  # +100% of 4 bytes: within the 1 MiB floor, not a regression
        ("10%,1MiB", 0, 280, "ok"),  # from nothing to a few bytes: within the floor
        ("10%,1MiB", 0, 64 * MiB, "regressed"),  # from nothing to 64 MiB: the floor catches it
        ("10%,1MiB", 100 * MiB, 109 * MiB, "ok"),
        ("10%,1MiB", 100 * MiB, 111 * MiB, "regressed"),  # beyond both: 10% is the larger here
        ("10%", 4, 8, "ok"),  # a percentage alone keeps the floor: 10% means 10%,1MiB
        ("10%", 0, 64 * MiB, "regressed"),  # and so catches a test that went from nothing to a lot
        ("10%,0B", 0, 280, "ok"),  # a percentage of zero never fails
        ("10%,0B", 4, 8, "regressed"),  # without a floor, as asked
    ],
)
def test_default_tolerance_has_a_floor_and_never_fails_a_percentage_of_zero(
    spec: str, baseline: int, now: int, status: str
) -> None:
    from pytest_devmem.gate.record import BaselineEntry

    entry = BaselineEntry("t", "prealloc", {"peak_bytes_in_use": baseline}, "sim:16GiB", {}, Path("b.json"))
    assert compare(entry, "t", "prealloc", {"peak_bytes_in_use": now}, parse_tolerance(spec)).status == status


def test_a_regression_just_past_the_floor_says_its_delta_in_bytes() -> None:
    """Rounded, +1 MiB and 256 B read as "+1.00 MiB" against "allowed ±10% or 1.00 MiB": a failure
    that reads like a pass. Where the rounded delta reads as the allowance, its bytes follow."""
    from pytest_devmem.gate.record import BaselineEntry

    entry = BaselineEntry("t", "prealloc", {"peak_bytes_in_use": 8 * MiB}, "sim:16GiB", {}, Path("b.json"))
    tolerance = parse_tolerance("10%,1MiB")
    just_past = compare(entry, "t", "prealloc", {"peak_bytes_in_use": 9 * MiB + 256}, tolerance)
    assert just_past.status == "regressed"
    assert "delta +1.00 MiB (+12.5%), +1,048,832 B, allowed ±10% or 1.00 MiB" in just_past.changes[0].describe()
    far = compare(entry, "t", "prealloc", {"peak_bytes_in_use": 16 * MiB}, tolerance).changes[0].describe()
    assert "delta +8.00 MiB (+100.0%), allowed" in far  # nothing to tell apart: no bytes


def test_what_grew_compares_contributors_and_says_when_the_baseline_named_none() -> None:
    from pytest_devmem.gate.record import BaselineEntry

    tolerance = parse_tolerance("10%,1MiB")
    now = {"peak_bytes_in_use": 64 * MiB}
    named = BaselineEntry(
        "t",
        "prealloc",
        {"peak_bytes_in_use": 8 * MiB},
        "sim:16GiB",
        {},
        Path("b.json"),
        contributors={"jit(step) temp": 8 * MiB},
    )
    text = compare(
        named, "t", "prealloc", now, tolerance, {"jit(step) temp": 40 * MiB, "Conv2D": 24 * MiB}
    ).growth_text()
    assert text == "jit(step) temp 8.00 MiB → 40.00 MiB, Conv2D 0 B → 24.00 MiB"  # it listed every holder there
    unnamed = BaselineEntry("t", "prealloc", {"peak_bytes_in_use": 8 * MiB}, "sim:16GiB", {}, Path("b.json"))
    text = compare(
        unnamed, "t", "prealloc", now, tolerance, {"jit(step) temp": 40 * MiB, "Conv2D": 24 * MiB}
    ).growth_text()
    assert text == "(the baseline names no one to compare with) largest now: jit(step) temp 40.00 MiB, Conv2D 24.00 MiB"
    helpers = {"jit(step) temp": 40 * MiB, "jit(_normal)": 40 * 1024, "jit(_uniform)": 40 * 1024}
    text = compare(named, "t", "prealloc", now, tolerance, helpers).growth_text()
    assert text == "jit(step) temp 8.00 MiB → 40.00 MiB, and 2 that grew by less than 1% of the peak"


def test_what_grew_lists_only_holders_that_grew_says_0_b_where_known_and_never_pairs_two_calls() -> None:
    """Issue 53.9: a holder the baseline's five largest leave out held at most the smallest of them:
    listed only where it holds more now; a temp the baseline's buffers state as 0 B reads 0 B; one
    name made at other lines now than at the baseline (two matmuls) is not paired as one that grew."""
    from pytest_devmem.gate.record import BaselineEntry
    from pytest_devmem.model.buffers import ProgramBuffers

    listed = {"a": 40 * MiB, "b": 30 * MiB, "c": 20 * MiB, "d": 10 * MiB, "jit(matmul)": 4 * MiB}
    entry = BaselineEntry(
        "t",
        "prealloc",
        {"peak_bytes_in_use": 100 * MiB},
        "sim:16GiB",
        {},
        Path("b.json"),
        contributors=listed,
        buffers={"jit(step)": ProgramBuffers((), peak_bytes=0)},
        lines={"jit(matmul)": {"m.py:5": 4 * MiB}},
    )
    now = {**listed, "jit(matmul)": 8 * MiB, "small": 3 * MiB, "big": 6 * MiB, "jit(step) temp": 2 * MiB}
    compared = compare(
        entry,
        "t",
        "prealloc",
        {"peak_bytes_in_use": 200 * MiB},
        parse_tolerance("10%"),
        now,
        lines={"jit(matmul)": {"m.py:6": 8 * MiB}},
    )
    assert compared.growth_text() == (
        "big not among the baseline's largest → 6.00 MiB, "
        "jit(matmul) 8.00 MiB, not the baseline's 4.00 MiB made at m.py:5: made at m.py:6 (new, 8.00 MiB), "
        "jit(step) temp 0 B → 2.00 MiB"
    )  # `small` (3 MiB, below the 4 MiB the baseline's smallest held) may not have grown: not listed


def test_default_tolerance_is_ten_percent_or_one_mebibyte() -> None:
    from pytest_devmem.gate.tolerance import DEFAULT_TOLERANCE

    allowance = parse_tolerance(DEFAULT_TOLERANCE).allowances["peak_bytes_in_use"]
    assert (allowance.relative, allowance.absolute) == (0.1, MiB)
    assert allowance.describe("peak_bytes_in_use") == "10% or 1.00 MiB"


@pytest.mark.parametrize(
    ("spec", "relative", "absolute"),
    [
        ("5%", 0.05, MiB),
        ("5%,0B", 0.05, 0.0),
        ("5%,4MiB", 0.05, 4 * MiB),
        ("64MiB", None, 64 * MiB),
        ("peak_bytes_reserved:1%", 0.01, MiB),
    ],
)
def test_a_percentage_alone_keeps_the_default_floor(spec: str, relative: float | None, absolute: float) -> None:
    metric = "peak_bytes_reserved" if spec.startswith("peak_bytes_reserved") else "peak_bytes_in_use"
    allowance = parse_tolerance(spec).allowances[metric]
    assert (allowance.relative, allowance.absolute) == (relative, absolute)


def test_fragmentation_keeps_plain_numbers_and_gets_no_floor() -> None:
    allowance = parse_tolerance("fragmentation:0.05").allowances["fragmentation"]
    assert (allowance.relative, allowance.absolute) == (None, 0.05)
    assert parse_tolerance("fragmentation:10%").allowances["fragmentation"].absolute is None


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes and umask")
def test_baselines_follow_the_umask_keep_a_files_mode_and_clear_a_killed_writers_leftovers(tmp_path: Path) -> None:
    import stat

    from pytest_devmem.gate.record import TestRecord

    def record(peak: int) -> TestRecord:
        return TestRecord(
            "tests/test_m.py::test_a", "prealloc", "sim:16GiB", "sim-16GiB", peak, peak, 0.0, False, "passed"
        )

    store = BaselineStore(tmp_path, "sim-16GiB")
    previous = os.umask(0o022)
    try:
        (path,), problems = store.write([record(MiB)], {})
        assert problems == []
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        path.chmod(0o664)
        leftover = path.parent / f".{path.name}.abc123.tmp"
        leftover.write_text("half a file")
        store.write([record(2 * MiB)], {})
        assert stat.S_IMODE(path.stat().st_mode) == 0o664  # the user's mode is kept
        assert not leftover.exists()
    finally:
        os.umask(previous)


def test_the_plugin_imports_where_there_is_no_fcntl() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['fcntl'] = None; import pytest_devmem.plugin, pytest_devmem.gate.baseline; print('ok')"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "ok"
    )


def test_a_test_that_failed_or_was_skipped_at_update_says_why_later(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(
        test_flaky="""
        import os
        import pytest

        def test_flaky(devmem):
            devmem.pool.alloc(2**20)
            assert os.environ.get("FLAKY_PASSES") == "1"

        @pytest.mark.skipif(os.environ.get("FLAKY_PASSES") != "1", reason="needs the dataset")
        def test_skipped(devmem):
            devmem.pool.alloc(2**20)
        """
    )
    run(pytester, "--devmem-update").assert_outcomes(failed=1, skipped=1)
    stored = json.loads((pytester.path / "baselines" / "sim-16GiB" / "test_flaky.py.json").read_text())["records"]
    assert stored["test_flaky.py::test_flaky"]["prealloc"]["reason"] == "failed when the baselines were updated"
    assert stored["test_flaky.py::test_skipped"]["prealloc"]["reason"] == "skipped: needs the dataset"
    from pytest_devmem.cli import main

    run(pytester, "--devmem-report=still.json").assert_outcomes(failed=1, skipped=1)
    assert main(["compare", str(pytester.path / "baselines"), str(pytester.path / "still.json")]) == 0
    out = capsys.readouterr().out  # skipped again: it ran, with no figures and its reason, never "not run"
    assert "⚠️ not measured: skipped: needs the dataset" in out and "not run" not in out
    monkeypatch.setenv("FLAKY_PASSES", "1")
    result = run(pytester, "--devmem-report=now.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*baselines (*): 2 not baselined*",
            "*not baselined, and why*test_flaky.py::test_flaky ?prealloc?: failed when the baselines were updated*",
        ]
    )
    assert main(["compare", str(pytester.path / "baselines"), str(pytester.path / "now.json")]) == 0
    out = capsys.readouterr().out
    assert (
        "⚠️ not baselined: failed when the baselines were updated" in out
        and "⚠️ not baselined: skipped: needs the dataset" in out
    )
    assert "new" not in out.splitlines()[0]
    run(pytester, "--devmem-update").assert_outcomes(passed=2)  # once they pass, real baselines replace the reasons
    stored = json.loads((pytester.path / "baselines" / "sim-16GiB" / "test_flaky.py.json").read_text())["records"]
    assert "reason" not in stored["test_flaky.py::test_flaky"]["prealloc"]
    # failing again at an update, it keeps the baseline it has, and the update says so (it said only
    # "baselines written: 1 file(s)", as if the file now held this run's figures)
    monkeypatch.delenv("FLAKY_PASSES")
    again = run(pytester, "--devmem-update")
    again.assert_outcomes(failed=1, skipped=1)
    again.stdout.fnmatch_lines(
        ["*not refreshed (each keeps the baseline it had*test_flaky.py::test_flaky ?prealloc?: failed by itself*"]
    )
    kept = json.loads((pytester.path / "baselines" / "sim-16GiB" / "test_flaky.py.json").read_text())["records"]
    assert kept["test_flaky.py::test_flaky"] == stored["test_flaky.py::test_flaky"]


def test_a_report_name_the_file_system_refuses_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    name = "r" * 300 + ".json"  # longer than any file system allows
    result = run(pytester, f"--devmem-report={name}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "invalid devmem report file" in result.stderr.str() and "File name too long" in result.stderr.str()


def test_a_report_that_cannot_be_written_is_said_and_fails_the_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_workload=WORKLOAD,
        test_in_the_way="def test_in_the_way():\n    open('out', 'w').write('a file where the report directory will be needed')\n",
    )
    result = run(pytester, "--devmem-report=out/r.json")  # fine when the session starts
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*pytest-devmem: report not written: *out/r.json*"])
    assert "INTERNALERROR" not in result.stdout.str() and "Traceback" not in result.stdout.str()


def test_a_refresh_with_the_same_figures_keeps_the_stored_profile(tmp_path: Path) -> None:
    """A tf.data pipeline records a different number of events on each run: its profile would
    change on every refresh. It changes only with the figures, so an unchanged test's file stays."""
    store = BaselineStore(tmp_path, "sim-16GiB")

    def measured(peak: int, events: int) -> TestRecord:
        record = TestRecord(
            "test_m.py::test_a", "prealloc", "sim:16GiB", "sim-16GiB", peak, 12 * 2**30, 0.0, None, "passed"
        )
        record.trace = TraceFacts(profile={"device": "cpu:0", "events": events, "in_use": f"0:0 {events - 1}:{peak}"})
        return record

    (path,), _ = store.write([measured(8 * MiB, 100)], {})
    before = path.read_bytes()
    store.write([measured(8 * MiB, 140)], {})
    assert path.read_bytes() == before
    store.write([measured(9 * MiB, 140)], {})
    assert '"events": 140' in path.read_text()


SEVEN_ARRAYS = """
import pytest

@pytest.mark.devmem(limit="1GiB")
def test_seven_arrays(devmem):
    for _ in range(7):
        devmem.pool.alloc(100 * 2**20)
"""


def test_the_headline_is_what_the_allocator_counts_with_the_requested_bytes_beside_it(
    pytester: pytest.Pytester,
) -> None:
    """Seven 100 MiB buffers in the 768 MiB pool of a 1 GiB device: the last takes the 168 MiB left
    whole (the 68 MiB rest is under the request and under 128 MiB: bfc_allocator.cc does not split
    it), so the allocator counts 768 MiB in use, as `memory_stats()` would; 700 MiB were requested."""
    pytester.makepyfile(test_seven=SEVEN_ARRAYS)
    result = pytester.runpytest_inprocess("--devmem-device=sim:1GiB", "--devmem-report=r.json", "--devmem-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_seven_arrays*prealloc*768.00 MiB*"])
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert (record["peak_bytes_in_use"], record["peak_bytes_requested"]) == (768 * MiB, 700 * MiB)
    assert (record["devices"][0]["peak_bytes_in_use"], record["devices"][0]["peak_bytes_requested"]) == (
        768 * MiB,
        700 * MiB,
    )
    stored = json.loads((pytester.path / "baselines" / "sim-1GiB" / "test_seven.py.json").read_text())
    assert stored["version"] == 2
    metrics = stored["records"]["test_seven.py::test_seven_arrays"]["prealloc"]["metrics"]
    assert (metrics["peak_bytes_in_use"], metrics["peak_bytes_requested"]) == (768 * MiB, 700 * MiB)


def test_a_version_1_baseline_is_compared_as_requested_bytes_until_it_is_refreshed(pytester: pytest.Pytester) -> None:
    """Format 1 stored the requested bytes as `peak_bytes_in_use`: read as `peak_bytes_requested`,
    and compared with this run's requested bytes, like for like, so an upgrade never shows the
    unsplit remainders as a regression; a real growth still fails, saying why the figure is the
    requested one; --devmem-update then writes version 2 with both figures."""
    pytester.makepyfile(test_seven=SEVEN_ARRAYS)
    folder = pytester.path / "baselines" / "sim-1GiB"
    folder.mkdir(parents=True)

    def version_1(peak: int) -> str:
        record = {"metrics": {"peak_bytes_in_use": peak, "peak_bytes_reserved": 768 * MiB, "fragmentation": 0.0}}
        document = {
            "format": "pytest-devmem-baseline",
            "version": 1,
            "device_class": "sim-1GiB",
            "records": {"test_seven.py::test_seven_arrays": {"prealloc": {**record, "device": "sim:1GiB"}}},
        }
        return json.dumps(document, indent=2)

    (folder / "test_seven.py.json").write_text(version_1(700 * MiB))
    same = pytester.runpytest_inprocess("--devmem-device=sim:1GiB")
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*baselines (*sim-1GiB): 1 ok*"])
    (folder / "test_seven.py.json").write_text(version_1(400 * MiB))
    grown = pytester.runpytest_inprocess("--devmem-device=sim:1GiB")
    grown.assert_outcomes(failed=1)
    grown.stdout.fnmatch_lines(
        [
            "*peak_bytes_requested: baseline 400.00 MiB, now 700.00 MiB*",
            "*the baseline stores no allocator's count (written by an earlier pytest-devmem*compared as requested bytes*",
        ]
    )
    pytester.runpytest_inprocess("--devmem-device=sim:1GiB", "--devmem-update").assert_outcomes(passed=1)
    stored = json.loads((folder / "test_seven.py.json").read_text())
    assert stored["version"] == 2
    metrics = stored["records"]["test_seven.py::test_seven_arrays"]["prealloc"]["metrics"]
    assert (metrics["peak_bytes_in_use"], metrics["peak_bytes_requested"]) == (768 * MiB, 700 * MiB)


REFRESHED = """
import os
import pytest

GROW = os.environ.get("REFRESH_GROW") == "1"

def test_grows(devmem):
    devmem.pool.alloc((24 if GROW else 8) * 2**20)

def test_steady(devmem):
    devmem.pool.alloc(4 * 2**20)

def test_breaks(devmem):
    devmem.pool.alloc((24 if GROW else 8) * 2**20)
    assert not GROW, "an unrelated bug"

@pytest.mark.devmem(limit="16MiB")
def test_bounded(devmem):
    devmem.pool.alloc((24 if GROW else 8) * 2**20)
"""


def test_the_documented_refresh_stores_a_regressed_test_and_says_which_it_left_out(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`devmem merge REPORT --baselines DIR` after a regressed run (docs/ci.md): the regression is
    what a refresh accepts; a test that failed by itself or for another check keeps its baseline,
    and the output names it with why. The files are those `--devmem-update` writes."""
    from pytest_devmem.cli import main

    pytester.makepyfile(test_refresh=REFRESHED)
    run(pytester, "--devmem-update").assert_outcomes(passed=4)
    stored = pytester.path / "baselines" / "sim-16GiB" / "test_refresh.py.json"
    before = json.loads(stored.read_text())["records"]
    monkeypatch.setenv("REFRESH_GROW", "1")
    result = run(pytester, "--devmem-report=regressed.json")
    result.assert_outcomes(passed=1, failed=3)
    records = {r["test_id"]: r for r in json.loads((pytester.path / "regressed.json").read_text())["records"]}
    assert records["test_refresh.py::test_grows"]["failed_check"] == "baseline"
    assert records["test_refresh.py::test_bounded"]["failed_check"] == "limit"
    assert records["test_refresh.py::test_breaks"]["failed_by_devmem"] is False
    assert records["test_refresh.py::test_steady"]["failed_check"] is None
    expected = pytester.path / "by-update"
    expected.mkdir()
    (expected / "sim-16GiB").mkdir()
    (expected / "sim-16GiB" / "test_refresh.py.json").write_bytes(stored.read_bytes())
    capsys.readouterr()

    assert main(["merge", str(pytester.path / "regressed.json"), "--baselines", str(pytester.path / "baselines")]) == 0
    said = capsys.readouterr().out
    assert f"baseline written: {stored}" in said
    assert (
        "not refreshed: test_refresh.py::test_bounded [prealloc]: failed pytest-devmem's limit check, which a refresh does not accept"
        in said
    )
    assert (
        "not refreshed: test_refresh.py::test_breaks [prealloc]: failed by itself (and pytest-devmem's baseline check), not for its memory alone"
        in said
    )
    after = json.loads(stored.read_text())["records"]
    assert after["test_refresh.py::test_grows"]["prealloc"]["metrics"]["peak_bytes_in_use"] == 24 * MiB
    for kept in ("test_breaks", "test_bounded", "test_steady"):  # their figures stay as they were
        assert (
            after[f"test_refresh.py::{kept}"]["prealloc"]["metrics"]
            == before[f"test_refresh.py::{kept}"]["prealloc"]["metrics"]
        )
    # byte for byte what --devmem-update of the same run writes
    run(pytester, "--devmem-update", f"--devmem-baselines={expected}")
    assert (expected / "sim-16GiB" / "test_refresh.py.json").read_bytes() == stored.read_bytes()
    # the rerun passes where only the regression was
    run(pytester, "--devmem-report=again.json", "-k", "grows or steady").assert_outcomes(passed=2)


def test_a_baselines_lines_at_the_peak_are_read_back_and_a_bad_entry_names_the_file(tmp_path: Path) -> None:
    from pytest_devmem.errors import FileFormatError

    record = {
        "device": "sim:16GiB",
        "metrics": {"peak_bytes_in_use": 4096},
        "versions": {},
        "lines_at_peak": {"device_put": {"tests/test_model.py:12": 4096}},
    }
    document = {"format": "pytest-devmem-baseline", "version": 2, "device_class": "sim-16GiB"}
    path = tmp_path / "test_model.py.json"
    path.write_text(json.dumps({**document, "records": {"test_model.py::test_a": {"ondemand": record}}}))
    assert read_file(path)[0].lines == {"device_put": {"tests/test_model.py:12": 4096}}
    record["lines_at_peak"] = {"device_put": {"tests/test_model.py:12": "4 KiB"}}
    path.write_text(json.dumps({**document, "records": {"test_model.py::test_a": {"ondemand": record}}}))
    with pytest.raises(FileFormatError, match=r"test_model\.py\.json.*lines_at_peak"):
        read_file(path)


def test_what_grew_counts_as_small_only_holders_that_grew_by_less_than_the_share() -> None:
    """Five holders that each grew by a fifth of the peak: three listed, none called small."""
    from pytest_devmem.gate.changes import what_grew

    now = {name: 20 for name in "abcde"}
    listed, small = what_grew({}, now)
    assert len(listed) == 3 and small == 0
    listed, small = what_grew({}, {**now, "tiny": 0 + 1}, top=3)
    assert small == 1
