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
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", message], cwd=directory, check=True, capture_output=True)


def test_history_of_three_commits_shows_the_test_that_moved(pandas_loaded: object, matplotlib_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for variable in ("GITHUB_SHA", "CI_COMMIT_SHA", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME"):
        monkeypatch.delenv(variable, raising=False)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=pytester.path, check=True)
    pytester.makepyfile(test_model=MODEL)
    reports = pytester.path / "reports"
    commits = []
    for number, mib in enumerate(("8", "8", "24")):
        (pytester.path / "version.txt").write_text(str(number))
        commit_all(pytester.path, f"commit {number}")
        commits.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=pytester.path, capture_output=True, text=True, check=True).stdout.strip())
        monkeypatch.setenv("MODEL_MIB", mib)
        pytester.runpytest_inprocess("--devmem-mode=prealloc", f"--devmem-report={reports}/r{number}.json", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    session = json.loads((reports / "r0.json").read_text())["session"]
    assert session["commit"] == commits[0] and session["branch"] == "main" and session["time"] and len(session["environment_hash"]) == 16
    capsys.readouterr()  # the runs' own output
    assert main(["history", str(reports), "-o", str(pytester.path / "trend.png")]) == 1  # a test moved
    out = capsys.readouterr().out
    assert out.startswith("### Device memory history: 3 commit(s), 2 test(s), 1 moved")
    assert f"| test_model.py::test_model [prealloc] | 8.00 MiB → 24.00 MiB (+200.0%) at {commits[2][:12]} |" in out
    assert "test_steady" not in out.split("| test | step |")[1]
    assert (pytester.path / "trend.png").read_bytes()[:4] == b"\x89PNG"


def test_history_refuses_what_is_not_a_report(pandas_loaded: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "other.json").write_text('{"hello": 1}')
    assert main(["history", str(tmp_path)]) == 2
    assert "other.json: not a pytest-devmem report of version 1" in capsys.readouterr().err
    assert main(["history", str(tmp_path / "missing")]) == 2
