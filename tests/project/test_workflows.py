"""The GitHub Actions workflows: the template `devmem init-ci` writes for a user's repository, this
repository's own gate (the same template, filled in for its examples), and its other checks. Every
workflow holds least privilege; the gate's steps, run in order on a real git repository with a
gh-pages branch, leave the work tree as the checkout made it, so the history step cannot fail a
passing gate."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_devmem.cli import main
from pytest_devmem.cli.init_ci import ACTIONS, WORKFLOWS, Gate, gate_for_users, render

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s+([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # (v\d+(?:\.\d+)*)\s*$")


def project_gate() -> Gate:
    spec = importlib.util.spec_from_file_location("project_workflows", ROOT / "scripts" / "project_workflows.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PROJECT_GATE  # type: ignore[no-any-return]


def every_workflow() -> dict[str, str]:
    """Each workflow's text: this repository's files, and the templates as `devmem init-ci` writes them."""
    found = {path.name: path.read_text(encoding="utf-8") for path in sorted(WORKFLOW_DIR.glob("*.y*ml"))}
    user = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main")
    tpu = gate_for_users(["tests/tpu"], "sim:TPU-v5e", None, "-e '.[test]'", "3.12", "trunk")
    for gate, label in ((user, "template"), (tpu, "template for a TPU")):
        found.update({f"{name} ({label})": render(name, gate) for name in WORKFLOWS})
    return found


def triggers(document: dict) -> dict:
    on = document.get("on", document.get(True))  # YAML 1.1 reads a bare `on` as true
    return {on: None} if isinstance(on, str) else dict.fromkeys(on) if isinstance(on, list) else on


def read_only(permissions: object) -> bool:
    return permissions == {} or (isinstance(permissions, dict) and set(permissions.values()) <= {"read", "none"})


# -- least privilege, in every workflow ------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(every_workflow()))
def test_every_workflow_reads_only_but_where_a_push_or_a_workflow_run_needs_to_write(name: str) -> None:
    text = every_workflow()[name]
    document = yaml.safe_load(text)
    on = triggers(document)
    assert "pull_request_target" not in on, "a pull request's code must never run with a token that writes"
    assert "permissions" in document and read_only(document["permissions"]), "read-only at the top"
    for job_name, job in document["jobs"].items():
        permissions = job.get("permissions", document["permissions"])
        if read_only(permissions):
            continue
        only_after_a_run = set(on) == {"workflow_run"}
        only_on_push = "github.event_name == 'push'" in str(job.get("if", ""))
        assert only_after_a_run or only_on_push, f"{job_name} writes ({permissions}) on {', '.join(on)}"
        if only_after_a_run:  # it must not run what the pull request brought
            assert not any("actions/checkout" in step.get("uses", "") for step in job["steps"]), job_name
            assert not any("run" in step for step in job["steps"]), job_name


@pytest.mark.parametrize("name", list(every_workflow()))
def test_every_action_is_pinned_to_a_commit_and_no_checkout_keeps_the_token(name: str) -> None:
    text = every_workflow()[name]
    uses = [line for line in text.splitlines() if re.match(r"^\s*(?:-\s+)?uses:", line)]
    assert uses
    for line in uses:
        match = PINNED.match(line)
        assert match is not None, f"not pinned to a commit with its release in a comment: {line.strip()}"
        action, commit, tag = match.groups()
        assert (commit, tag) in ACTIONS.values(), f"{action}: one pin per action, the one init_ci.ACTIONS holds"
    for job_name, job in yaml.safe_load(text)["jobs"].items():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, job_name


def test_each_action_has_one_pin_and_each_pin_names_its_action() -> None:
    owners = {
        "CHECKOUT": "actions/checkout",
        "SETUP_PYTHON": "actions/setup-python",
        "UPLOAD_ARTIFACT": "actions/upload-artifact",
        "DOWNLOAD_ARTIFACT": "actions/download-artifact",
        "GITHUB_SCRIPT": "actions/github-script",
        "BENCHMARK_ACTION": "benchmark-action/github-action-benchmark",
    }
    assert set(owners) == set(ACTIONS)
    for text in every_workflow().values():
        for line in text.splitlines():
            match = PINNED.match(line)
            if match:
                action, commit, tag = match.groups()
                assert ACTIONS[next(k for k, v in owners.items() if v == action)] == (commit, tag), line


# -- the templates and this repository's own files -------------------------------------------------------------


def test_this_repositorys_gate_is_the_users_template_filled_in_for_its_examples() -> None:
    gate = project_gate()
    for name in WORKFLOWS:
        assert (WORKFLOW_DIR / name).read_text(encoding="utf-8") == render(name, gate), (
            f"{name} differs from the template: run python scripts/project_workflows.py"
        )
    assert set(path.name for path in WORKFLOW_DIR.glob("*.y*ml")) == {*WORKFLOWS, "project.yml"}


def test_the_template_installs_the_plugin_from_the_index_and_runs_the_users_tests() -> None:
    from pytest_devmem import __version__

    gate = gate_for_users(["tests/unit", "tests/model"], "sim:16GiB", None, "-e '.[test]'", "3.11", "main")
    jobs = yaml.safe_load(render("devmem.yml", gate))["jobs"]
    install = next(step["run"] for step in jobs["measure"]["steps"] if step.get("name") == "Install")
    assert install == f"python -m pip install -e '.[test]' 'pytest-devmem[ci]=={__version__}'"
    suite = next(step["run"] for step in jobs["measure"]["steps"] if "python -m pytest" in step.get("run", ""))
    assert suite.startswith("python -m pytest tests/unit tests/model --splits")
    assert "examples" not in render("devmem.yml", gate)
    assert set(jobs) == {"measure", "gate", "history"}  # no other OS's runners: one gate per pull request
    assert all(job["runs-on"] == "ubuntu-latest" for job in jobs.values())
    gate_install = next(step["run"] for step in jobs["gate"]["steps"] if step.get("name", "").startswith("Install"))
    assert gate_install == f"python -m pip install pytest-devmem=={__version__}"  # the devmem command alone


@pytest.mark.parametrize(
    ("device", "compilers", "mode"),
    [
        ("sim:16GiB", "", "--devmem-mode=prealloc"),
        ("sim:H100-80GB", " && devmem compilers install --gpu", "--devmem-mode=prealloc"),
        # the TPU runtime's regime, named: a session without a mode measures marked tests only
        ("sim:TPU-v5e", " && devmem compilers install --tpu", "--devmem-mode=compact"),
    ],
)
def test_the_template_installs_the_compiler_its_device_needs(device: str, compilers: str, mode: str) -> None:
    """Outside the project's environment, matched to the JAX it installed: the project's own programs never start them."""
    from pytest_devmem import __version__

    text = render("devmem.yml", gate_for_users(["tests"], device, None, "-e .", "3.11", "main"))
    assert f"'pytest-devmem[ci]=={__version__}'{compilers}\n" in text
    assert f"{mode} --devmem-device={device}" in text


def test_the_workflows_run_the_suite_once_in_one_gate_sharded_in_one_place() -> None:
    document = yaml.safe_load((WORKFLOW_DIR / "devmem.yml").read_text())
    jobs = document["jobs"]
    assert [name for name, job in jobs.items() if any("pytest" in step.get("run", "") for step in job["steps"])] == [
        "measure"
    ]
    parts = jobs["measure"]["strategy"]["matrix"]["part"]
    assert parts == list(range(1, len(parts) + 1))
    suite = next(step["run"] for step in jobs["measure"]["steps"] if "pytest examples" in step.get("run", ""))
    assert "--splits ${{ strategy.job-total }} --group ${{ matrix.part }}" in suite  # the matrix is the one place
    assert "--devmem-strict" in suite and "--devmem-report=devmem-part-${{ matrix.part }}.json" in suite
    assert jobs["gate"]["needs"] == "measure" and jobs["gate"]["if"] == "always()"
    assert jobs["history"]["needs"] == "gate"  # its own job: the gate's verdict is given before it starts
    assert document["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"
    project = yaml.safe_load((WORKFLOW_DIR / "project.yml").read_text())
    assert "pull_request" not in triggers(project)  # Windows and macOS runners: never on each pull request


def test_the_comment_workflow_reads_the_gates_artifact_and_checks_whose_pull_request_it_is() -> None:
    document = yaml.safe_load((WORKFLOW_DIR / "devmem-comment.yml").read_text())
    assert triggers(document)["workflow_run"]["workflows"] == [
        yaml.safe_load((WORKFLOW_DIR / "devmem.yml").read_text())["name"]
    ]
    steps = document["jobs"]["comment"]["steps"]
    assert steps[0]["with"]["name"] == "devmem-report" and "workflow_run.id" in steps[0]["with"]["run-id"]
    script = steps[1]["with"]["script"]
    assert "pull.head.sha !== measured" in script and "Number.isSafeInteger" in script


# -- devmem init-ci --------------------------------------------------------------------------------------------


def test_init_ci_writes_both_workflows_and_never_replaces_one_unasked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / ".github" / "workflows"
    assert main(["init-ci", "tests", "-d", str(directory)]) == 0
    default = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main")
    for name in WORKFLOWS:
        assert (directory / name).read_text() == render(name, default)
    (directory / "devmem.yml").write_text("mine\n")
    assert main(["init-ci", "-d", str(directory)]) == 2
    assert "devmem.yml" in capsys.readouterr().err and (directory / "devmem.yml").read_text() == "mine\n"
    assert main(["init-ci", "-d", str(directory), "--force"]) == 0
    assert main(["init-ci", "-d", str(tmp_path / "x"), "--device", "cuda:0"]) == 2
    assert "simulated device" in capsys.readouterr().err
    assert main(["init-ci", "-d", str(tmp_path / "x"), "--device", "sim:TPU-v5e", "--mode", "prealloc"]) == 2
    assert "TPU runtime" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_tpu_gate_measures_every_test_as_its_next_step_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pytester: pytest.Pytester
) -> None:
    """The printed update command and the workflow name the TPU runtime's regime: without a mode a
    session measures marked tests only, and a suite with no marker would record, and gate, nothing."""
    assert main(["init-ci", "tests", "-d", str(tmp_path / "w"), "--device", "sim:TPU-v5e"]) == 0
    command = capsys.readouterr().out.split("python -m pytest ")[1].split(")")[0].split()
    assert command == ["tests", "--devmem-mode=compact", "--devmem-device=sim:TPU-v5e", "--devmem-update"]
    pytester.makepyfile(test_pool="def test_unmarked(devmem):\n    devmem.pool.alloc(2**20)\n")
    pytester.runpytest_inprocess(*command[1:], "--devmem-report=r.json").assert_outcomes(passed=1)
    assert len(json.loads((pytester.path / "r.json").read_text())["records"]) == 1


def test_the_docs_show_the_template_as_init_ci_writes_it() -> None:
    page = (ROOT / "docs" / "ci.md").read_text()
    default = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main")
    for name in WORKFLOWS:
        assert render(name, default) in page, f"docs/ci.md does not show {name} as devmem init-ci writes it"


# -- the gate's steps, in order, on a real git repository -------------------------------------------------------

MODEL = """
SIZE = {mib} * 2**20

def test_model(devmem):
    devmem.pool.alloc(int(SIZE))

def test_other(devmem):
    devmem.pool.alloc(2**20)
"""


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check:
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def bash(cwd: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, capture_output=True, text=True, env=env)


def step(job: dict, words: str) -> str:
    return next(s["run"] for s in job["steps"] if words in s.get("name", "") or words in s.get("run", ""))


def benchmark_action_history(workspace: Path, benchmark: Path, run: int) -> list[subprocess.CompletedProcess[str]]:
    """The git commands github-action-benchmark v1.22.0 runs in the workspace when no gh-repository is
    given (dist/src/write.js, writeBenchmarkToGitHubPages and its retry): fetch the history branch,
    switch to it, pull, add data.js under benchmark-data-dir-path, commit, push, switch back."""
    done = [git(workspace, "fetch", "origin", "gh-pages:gh-pages", check=False)]
    done.append(git(workspace, "switch", "gh-pages", check=False))
    if done[-1].returncode != 0:
        return done
    done.append(git(workspace, "pull", "origin", "gh-pages", check=False))
    (workspace / "devmem").mkdir(exist_ok=True)
    entries = json.loads(benchmark.read_text())
    (workspace / "devmem" / "data.js").write_text(
        "window.BENCHMARK_DATA = " + json.dumps({"run": run, "entries": entries})
    )
    done.append(git(workspace, "add", "devmem/data.js", check=False))
    done.append(git(workspace, "commit", "-m", "add benchmark result", check=False))
    done.append(git(workspace, "push", "origin", "gh-pages:gh-pages", "--no-verify", check=False))
    done.append(git(workspace, "checkout", "-", check=False))
    return done


@pytest.mark.slow  # four devmem commands and two pytest sessions in subprocesses: about 10 s
def test_the_gate_its_refresh_preview_and_the_history_run_in_order_on_a_git_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull request moves a peak within tolerance: the gate passes, the refresh preview names the
    baseline file it would change (on a copy outside the work tree), and github-action-benchmark's
    `git switch gh-pages` then succeeds even in the gate's own work tree, and in the history job's."""
    pytest.importorskip("pytest_split", reason="pytest-split (the ci extra) runs the measure step")
    for name, value in {
        "GIT_AUTHOR_NAME": "dev",
        "GIT_AUTHOR_EMAIL": "dev@example.com",
        "GIT_COMMITTER_NAME": "dev",
        "GIT_COMMITTER_EMAIL": "dev@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }.items():
        monkeypatch.setenv(name, value)
    tools = tmp_path / "bin"  # `python` and `devmem` as the steps call them: this interpreter, this checkout
    tools.mkdir()
    (tools / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (tools / "devmem").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pytest_devmem.cli "$@"\n')
    for tool in tools.iterdir():
        tool.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PYTEST_ADDOPTS": "-p no:hypothesispytest -p no:cacheprovider",
    }
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "TF_ENABLE_ONEDNN_OPTS", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    gate = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main")
    jobs = yaml.safe_load(render("devmem.yml", gate))["jobs"]

    # the team's repository: a suite, its baselines, and the history branch
    origin, seed = tmp_path / "origin.git", tmp_path / "seed"
    git(tmp_path, "init", "--bare", "-b", "main", str(origin))
    git(tmp_path, "clone", str(origin), str(seed))
    (seed / "tests").mkdir()
    (seed / "tests" / "test_model.py").write_text(MODEL.format(mib=8))
    record = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests",
            "--devmem-mode=prealloc",
            "--devmem-device=sim:16GiB",
            "--devmem-update",
        ],
        cwd=seed,
        env=env,
        capture_output=True,
        text=True,
    )
    assert record.returncode == 0, record.stdout
    git(seed, "add", "tests/test_model.py", "baselines")
    git(seed, "commit", "-m", "a suite and its baselines")
    git(seed, "push", "origin", "main")
    git(seed, "switch", "--orphan", "gh-pages")
    git(seed, "commit", "--allow-empty", "-m", "benchmark history")
    git(seed, "push", "origin", "gh-pages")
    git(seed, "switch", "main")
    (seed / "tests" / "test_model.py").write_text(MODEL.format(mib=8.5))  # +6%: within the 10% tolerance
    git(seed, "commit", "-am", "a slightly larger model")
    git(seed, "push", "origin", "main")

    # measure (its own job, its own checkout)
    measure = tmp_path / "measure"
    git(tmp_path, "clone", str(origin), str(measure))
    suite = step(jobs["measure"], "python -m pytest").replace("${{ strategy.job-total }}", "1")
    done = bash(measure, suite.replace("${{ matrix.part }}", "1"), env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "runner-temp" / "devmem-report"  # download-artifact's path
    out.mkdir(parents=True)
    for name in ("devmem-part-1.json", "devmem-benchmark-1.json"):
        (out / name).write_bytes((measure / name).read_bytes())

    # gate and refresh preview (the gate job's checkout)
    workspace = tmp_path / "gate"
    git(tmp_path, "clone", str(origin), str(workspace))
    summary = tmp_path / "summary.md"
    gate_env = {**env, "DEVMEM_OUT": str(out), "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_RUN_ID": "7"}
    for words in ("Merge the parts", "Which baseline files"):
        script = step(jobs["gate"], words)
        assert "${{" not in script  # what runs is what is tested
        done = bash(workspace, script, {**gate_env, "PULL_REQUEST": "12"})
        assert done.returncode == 0, (words, done.stdout, done.stderr)
    said = summary.read_text()
    assert "### Device memory: 2 ok" in said
    assert "A refresh would change:\n\n- `baselines/sim-16GiB/tests/test_model.py.json`" in said
    assert (out / "pull-request").read_text().strip() == "12"
    assert git(workspace, "status", "--porcelain", "--ignored").stdout == ""  # the checkout as it was made
    benchmark = out / "devmem-benchmark.json"
    assert {entry["name"] for entry in json.loads(benchmark.read_text())} == {
        "tests/test_model.py::test_model [prealloc]",
        "tests/test_model.py::test_other [prealloc]",
    }

    # the history: github-action-benchmark's git commands, even in the gate's own work tree...
    assert [d.returncode for d in benchmark_action_history(workspace, benchmark, 1)] == [0] * 7
    assert git(workspace, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip() == "main"
    # ... and in the history job's own checkout, as the workflow runs it
    history = tmp_path / "history"
    git(tmp_path, "clone", str(origin), str(history))
    assert [d.returncode for d in benchmark_action_history(history, benchmark, 2)] == [0] * 7
    stored = git(origin, "show", "gh-pages:devmem/data.js").stdout
    assert "tests/test_model.py::test_model [prealloc]" in stored

    # the preview as it was, in the work tree: git refuses to switch, and the history step failed
    done = bash(workspace, f'devmem merge "{out}/devmem-part-1.json" --baselines baselines', env)
    assert done.returncode == 0 and "baseline written" in done.stdout
    refused = benchmark_action_history(workspace, benchmark, 3)
    assert refused[-1].returncode != 0 and "would be overwritten" in refused[-1].stderr
