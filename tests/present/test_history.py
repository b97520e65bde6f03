"""`devmem history` over reports of three commits shows the test that moved; reports carry where
they came from (commit, branch, time, environment hash)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pytest_devmem.cli import main

MODEL = """
import os

def test_model(devmem):
    devmem.pool.alloc(int(os.environ.get("MODEL_MIB", "8")) * 2**20)

def test_steady(devmem):
    devmem.pool.alloc(4 * 2**20)
"""


def commit_all(directory: Path, message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=directory, check=True, capture_output=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", message],
        cwd=directory,
        check=True,
        capture_output=True,
    )


def test_history_of_three_commits_shows_the_test_that_moved(
    pandas_loaded: object,
    matplotlib_loaded: object,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for variable in ("GITHUB_SHA", "CI_COMMIT_SHA", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME"):
        monkeypatch.delenv(variable, raising=False)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=pytester.path, check=True)
    pytester.makepyfile(test_model=MODEL)
    reports = pytester.path / "reports"
    commits = []
    for number, mib in enumerate(("8", "8", "24")):
        (pytester.path / "version.txt").write_text(str(number))
        commit_all(pytester.path, f"commit {number}")
        commits.append(
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=pytester.path, capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        monkeypatch.setenv("MODEL_MIB", mib)
        pytester.runpytest_inprocess(
            "--devmem-mode=prealloc", f"--devmem-report={reports}/r{number}.json", "-p", "no:cacheprovider"
        ).assert_outcomes(passed=2)
    session = json.loads((reports / "r0.json").read_text())["session"]
    assert (
        session["commit"] == commits[0]
        and session["branch"] == "main"
        and session["time"]
        and len(session["environment_hash"]) == 16
    )
    capsys.readouterr()  # the runs' own output
    assert (
        main(["history", str(reports), "-o", str(pytester.path / "trend.png"), "--fail-on-move"]) == 1
    )  # a test moved
    out = capsys.readouterr().out
    assert out.startswith("### Device memory history: 3 commit(s), 2 test(s), 1 moved")
    assert f"| test_model.py::test_model [prealloc] | 8.00 MiB → 24.00 MiB (+200.0%) at {commits[2][:12]} |" in out
    assert "test_steady" not in out.split("| test | step |")[1]
    assert (pytester.path / "trend.png").read_bytes()[:4] == b"\x89PNG"


def test_a_run_out_of_memory_is_a_step_named_so_not_a_fall_of_the_peak(
    pandas_loaded: object,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The peak of a run that ran out of memory is where it stopped: `history` names the out of
    memory (as `compare` does), never a -100% step, and a run back from one is a step too."""
    pytester.makepyfile(test_model=MODEL)
    reports = pytester.path / "reports"
    for number, mib in enumerate(("8", str(64 * 1024), "8")):
        monkeypatch.setenv("MODEL_MIB", mib)
        pytester.runpytest_inprocess(
            "--devmem-mode=prealloc", f"--devmem-report={reports}/r{number}.json", "-p", "no:cacheprovider"
        )
    capsys.readouterr()
    assert main(["history", str(reports), "--fail-on-move"]) == 1
    out = capsys.readouterr().out
    assert "| test_model.py::test_model [prealloc] | 8.00 MiB → out of memory: " in out and "r1 |" in out
    assert "| test_model.py::test_model [prealloc] | out of memory: " in out and "→ 8.00 MiB at r2 |" in out
    assert "%" not in out.split("| test | step |")[1].split("\n\n")[0]
    assert "| 8.00 MiB | out of memory | 8.00 MiB |" in out


def test_history_refuses_what_is_not_a_report(
    pandas_loaded: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "other.json").write_text('{"hello": 1}')
    assert main(["history", str(tmp_path)]) == 2
    assert "other.json:1: not a pytest-devmem JSON report" in capsys.readouterr().err
    assert main(["history", str(tmp_path / "missing")]) == 2


def git_repository(directory: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A git repository at `directory` with everything committed; its commit. CI's variables are
    cleared so that git itself is asked."""
    for variable in ("GITHUB_SHA", "CI_COMMIT_SHA", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME"):
        monkeypatch.delenv(variable, raising=False)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=directory, check=True)
    commit_all(directory, "first")
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_autosave_keeps_every_run_per_machine_with_its_provenance(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_devmem.provenance import machine_id

    pytester.makepyfile(test_model=MODEL)
    commit = git_repository(pytester.path, monkeypatch)
    first = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-autosave", "-p", "no:cacheprovider")
    first.assert_outcomes(passed=2)
    folder = pytester.path / ".devmem" / machine_id()
    first.stdout.fnmatch_lines(
        [f"*report autosaved to .devmem?{machine_id()}?0001_{commit}_*.json (devmem history reads that folder)*"]
    )
    (pytester.path / "test_model.py").write_text(
        MODEL + "\n# changed\n"
    )  # a tracked file changes: the work tree is dirty
    pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-autosave", "-p", "no:cacheprovider"
    ).assert_outcomes(passed=2)
    names = sorted(path.name for path in folder.iterdir())
    assert (
        len(names) == 2
        and names[0].startswith(f"0001_{commit}_")
        and names[1].startswith(f"0002_{commit}_")
        and names[1].endswith("_dirty.json")
    )
    assert not names[0].endswith("_dirty.json")
    clean, dirty = (json.loads((folder / name).read_text())["session"] for name in names)
    assert (clean["dirty"], dirty["dirty"]) == (False, True)
    assert clean["machine_id"] == machine_id() and clean["python"].split()[0] in ("CPython", "PyPy") and clean["os"]
    assert "driver_version" in clean and "cuda_version" in clean  # None where the machine has no NVIDIA driver
    pytester.runpytest_inprocess(
        "--devmem-autosave", "-p", "no:cacheprovider", "-k", "nothing"
    )  # measured nothing: no file
    assert len(list(folder.iterdir())) == 2


def test_autosave_never_writes_over_a_report(tmp_path: Path) -> None:
    from pytest_devmem.present.autosave import autosave

    session = {
        "machine_id": "Linux-CPython-3.11-64bit",
        "commit": "abc",
        "time": "2026-11-22T10:00:00+00:00",
        "dirty": False,
    }
    folder = tmp_path / ".devmem" / "Linux-CPython-3.11-64bit"
    folder.mkdir(parents=True)
    (folder / "0007_other.json").write_text("{}")
    paths = [autosave(tmp_path, f'{{"n": {n}}}', session) for n in range(2)]
    assert [p.name for p in paths] == ["0008_abc_20261122_100000.json", "0009_abc_20261122_100000.json"]
    assert json.loads(paths[1].read_text()) == {"n": 1}
    unversioned = autosave(
        tmp_path, "{}", {"machine_id": "x/y", "commit": None, "time": "2026-11-22T10:00:00+00:00", "dirty": None}
    )
    assert (
        unversioned.relative_to(tmp_path).as_posix()
        == ".devmem/x_y--bd3c9047d6816c31/0001_unversioned_20261122_100000.json"
    )  # a name from file_name: never a path


def test_history_without_arguments_reads_the_autosaved_reports(
    pandas_loaded: object,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytester.makepyfile(test_model=MODEL)
    git_repository(pytester.path, monkeypatch)
    for mib in ("8", "24"):
        monkeypatch.setenv("MODEL_MIB", mib)
        pytester.runpytest_inprocess(
            "--devmem-mode=prealloc", "--devmem-autosave", "-p", "no:cacheprovider"
        ).assert_outcomes(passed=2)
        (pytester.path / "test_model.py").write_text(
            MODEL + "\n# work in progress\n"
        )  # the next run is of a dirty tree
    capsys.readouterr()
    assert main(["history", "--fail-on-move"]) == 1  # pytester runs in its directory: .devmem/ is here
    out = capsys.readouterr().out
    assert "2 commit(s), 2 test(s), 1 moved" in out  # the dirty run is a column of its own
    assert " (dirty) |" in out
    assert "test_model.py::test_model [prealloc]" in out and "Device class: `sim-16GiB`." in out


def report_on(path: Path, device_class: str, peak: int, commit: str, time: str) -> Path:
    record = {
        "test_id": "t.py::test_x",
        "regime": "default",
        "device": device_class,
        "device_class": device_class,
        "peak_bytes_in_use": peak,
    }
    path.write_text(
        json.dumps(
            {
                "format": "pytest-devmem-report",
                "version": 1,
                "session": {"commit": commit, "time": time},
                "records": [record],
            }
        )
    )
    return path


def test_history_never_lines_up_different_device_classes(
    pandas_loaded: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_on(tmp_path / "a.json", "sim-16GiB", 100 * 2**20, "a" * 40, "2026-11-20T10:00:00+00:00")
    report_on(tmp_path / "b.json", "cuda-NVIDIA-H100-80GB-HBM3", 4000 * 2**20, "b" * 40, "2026-11-21T10:00:00+00:00")
    report_on(tmp_path / "c.json", "sim-16GiB", 100 * 2**20, "c" * 40, "2026-11-22T10:00:00+00:00")
    assert main(["history", str(tmp_path)]) == 0  # nothing moved: an H100 and a simulated device are two series
    out = capsys.readouterr().out
    assert "2 test(s), 0 moved" in out and "+3900" not in out
    assert (
        "Device classes: `cuda-NVIDIA-H100-80GB-HBM3`, `sim-16GiB` (each test is lined up within its own class)." in out
    )
    report_on(tmp_path / "d.json", "cuda-NVIDIA-H100-80GB-HBM3", 8000 * 2**20, "d" * 40, "2026-11-23T10:00:00+00:00")
    assert main(["history", str(tmp_path), "--fail-on-move"]) == 1
    assert (
        "| t.py::test_x [prealloc] on cuda-NVIDIA-H100-80GB-HBM3 | 3.91 GiB → 7.81 GiB (+100.0%) at dddddddddddd |"
        in capsys.readouterr().out
    )


def test_history_without_arguments_or_autosaved_reports_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["history"]) == 2
    assert "run pytest with --devmem-autosave to keep every run's report in .devmem/" in capsys.readouterr().err


def test_history_prints_json_and_csv_for_tools(
    pandas_loaded: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import csv
    import io

    report_on(tmp_path / "a.json", "sim-16GiB", 100 * 2**20, "a" * 40, "2026-11-20T10:00:00+00:00")
    report_on(tmp_path / "b.json", "sim-16GiB", 200 * 2**20, "b" * 40, "2026-11-21T10:00:00+00:00")
    assert main(["history", str(tmp_path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["format"] == "pytest-devmem-history" and document["commits"] == ["a" * 12, "b" * 12]
    assert document["tests"]["t.py::test_x [prealloc]"] == {"a" * 12: 100 * 2**20, "b" * 12: 200 * 2**20}
    assert document["moved"] == [
        {
            "test": "t.py::test_x [prealloc]",
            "before_commit": "a" * 12,
            "commit": "b" * 12,
            "before": 100 * 2**20,
            "now": 200 * 2**20,
        }
    ]
    assert main(["history", str(tmp_path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["commit"], float(r["peak_bytes_in_use"]), r["moved"]) for r in rows] == [
        ("a" * 12, 100 * 2**20, "False"),
        ("b" * 12, 200 * 2**20, "True"),
    ]


def test_history_orders_by_git_ancestry_not_run_time_and_exits_0_unless_asked(
    pandas_loaded: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pull request's report fed before a later main report: run time would read its regression as an
    improvement; git's ancestry puts main's commit first."""
    (tmp_path / "model.txt").write_text("main")
    base = git_repository(tmp_path, monkeypatch)
    (tmp_path / "change.txt").write_text("grown")
    commit_all(tmp_path, "the pull request")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    reports = tmp_path / "reports"
    reports.mkdir()
    report_on(reports / "pr.json", "sim-16GiB", 200 * 2**20, head, "2026-11-20T10:00:00+00:00")
    report_on(reports / "main.json", "sim-16GiB", 100 * 2**20, base, "2026-11-21T10:00:00+00:00")
    monkeypatch.chdir(tmp_path)
    assert main(["history", str(reports)]) == 0  # a move is reported, not failed, unless asked
    out = capsys.readouterr().out
    assert f"100.00 MiB → 200.00 MiB (+100.0%) at {head[:12]}" in out
    assert "Commits in git's order (each after its parents)." in out
    assert main(["history", str(reports), "--fail-on-move"]) == 1
    capsys.readouterr()
    (reports / "main.json").write_text((reports / "main.json").read_text().replace(base, "f" * 40))  # unknown here
    assert main(["history", str(reports), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["order"].startswith("run time: git does not know commit ffffffffffff here")
    assert document["moved"][0]["now"] == 100 * 2**20  # by time: the PR first


def test_history_without_pandas_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report_on(tmp_path / "a.json", "sim-16GiB", 100 * 2**20, "a" * 40, "2026-11-20T10:00:00+00:00")
    monkeypatch.setitem(__import__("sys").modules, "pandas", None)  # hidden: its import raises ImportError
    assert main(["history", str(tmp_path)]) == 2
    assert "pip install 'pytest-devmem[history]'" in capsys.readouterr().err
