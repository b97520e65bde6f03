"""`devmem init-ci [TESTS...]`: the GitHub Actions workflows of a memory gate for your repository,
written as files you commit and edit: `devmem.yml` (measure, gate, refresh preview, history) and
`devmem-comment.yml` (the pull request's comment, from a `workflow_run` that never runs the pull
request's code). A runner installs the plugin as this copy was installed (PEP 610), or as
`--plugin-spec` says; every action is pinned to a commit, with its release in a comment. Every value
given is checked before it is written, so the file parses to what was meant.

The workflows are the package's templates (`templates/*.yml`) with a few words filled in; this
repository's own `.github/workflows/devmem.yml` is the same template, filled in for its examples."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..errors import InputError, InvalidSettingError
from ..files import write_atomic
from ..model.device import open_simulated
from ..options import OPTION
from .common import add_setting

HELP = "Write the GitHub Actions workflows of a memory gate for your repository (.github/workflows/)"

ACTIONS = {
    "CHECKOUT": ("11d5960a326750d5838078e36cf38b85af677262", "v4.4.0"),
    "SETUP_PYTHON": ("a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
    "UPLOAD_ARTIFACT": ("ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2"),
    "DOWNLOAD_ARTIFACT": ("d3f86a106a0bac45b974a628896c90dbdf5c8093", "v4.3.0"),
    "GITHUB_SCRIPT": ("f28e40c7f34bde8b3046d885e986cb6290c5673b", "v7.1.0"),
    "BENCHMARK_ACTION": ("a60cea5bc7b49e15c1f58f411161f99e0df48372", "v1.22.0"),
    "CACHE": ("0057852bfaa89a56745cba8c7296529d2fc39830", "v4.3.0"),
}
"""Each action the workflows use: the commit its release tag points at (read from the action's own
repository), and the tag, written beside the pin. A pin by tag can be moved; a commit cannot."""

WORKFLOWS = ("devmem.yml", "devmem-comment.yml")
"""The files `devmem init-ci` writes, in its directory."""


@dataclass(frozen=True)
class Gate:
    """What a repository's workflows say: where its tests are, how they install, on which device."""

    tests: tuple[str, ...] = ("tests",)
    measure_install: str = ""  # the measure job's command: the project and the plugin
    gate_install: str = ""  # the gate job's: the devmem command alone
    device: str = "sim:16GiB"
    mode: str = "prealloc"  # compact on a TPU preset: the TPU runtime's regime
    python: str = "3.11"
    branch: str = "main"
    compiler: str | None = None  # `gpu` or `tpu`: installed, and kept in the Actions cache


PLUGIN = "pytest-devmem"
ANY_SPEC = f"--plugin-spec, e.g. 'git+https://github.com/OWNER/{PLUGIN}@COMMIT' (a commit a runner can fetch) or '{PLUGIN}==X' (a release)"


def checked(option: str, value: str, allowed: str, pattern: str = ".*") -> str:
    """`value` as a workflow may hold it: printable, no `${{ }}` (GitHub expands it in `run:`), of `pattern`."""
    if not value.isprintable() or "${{" in value or not re.fullmatch(pattern, value):
        raise InputError(f"{option} {value!r}: {allowed} (printable, no ${{{{ }}}})")
    return value


def installed_as(direct_url: str | None, version: str) -> str:
    """The requirement that installs this copy again, read from its PEP 610 `direct_url.json`: none
    means an index; a VCS URL is pinned to the commit. A copy from this machine is refused."""
    if direct_url is None:
        return f"{PLUGIN}=={version}"
    try:
        data = json.loads(direct_url)
        url = data["url"]
        if "vcs_info" in data:
            url = f"{data['vcs_info']['vcs']}+{url}@{data['vcs_info']['commit_id']}"
        if "subdirectory" in data:
            url += f"#subdirectory={data['subdirectory']}"
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"this copy of {PLUGIN}'s direct_url.json cannot be read ({exc}): name {ANY_SPEC}") from None
    return plugin_requirement(f"{PLUGIN} @ {url}", f"this copy of {PLUGIN}, as its direct_url.json says,")


def plugin_requirement(spec: str, source: str = "--plugin-spec") -> str:
    """`spec` (a requirement naming the plugin, or a URL of it) as one a runner can install."""
    given = f"{source} {spec!r}"
    checked(source, spec, "how a runner installs the plugin")
    try:
        requirement = Requirement(spec if re.match(r"[\w+.-]+://", spec) is None else f"{PLUGIN} @ {spec}")
    except InvalidRequirement as exc:
        raise InputError(f"{given}: not a requirement ({exc}); name {ANY_SPEC}") from None
    if canonicalize_name(requirement.name) != PLUGIN:
        raise InputError(f"{given}: names {requirement.name}, not {PLUGIN}; name {ANY_SPEC}")
    if requirement.url is not None and urlsplit(requirement.url).scheme.split("+")[-1] in ("file", ""):
        raise InputError(f"{given}: a folder or file on this machine, which a runner cannot reach; name {ANY_SPEC}")
    return str(requirement)


def this_copy() -> str:
    """How this copy of the plugin was installed, as a requirement a runner can install."""
    try:
        distribution = importlib.metadata.distribution(PLUGIN)
    except importlib.metadata.PackageNotFoundError:
        raise InputError(f"{PLUGIN} is not installed here (run from its source?): name {ANY_SPEC}") from None
    return installed_as(distribution.read_text("direct_url.json"), distribution.version)


def pip_words(install: str) -> str:
    """`--install` as shell words for pip, each quoted: no shell operator, no comment."""
    allowed = "pip's arguments, quoted as a shell would (e.g. \"-e '.[test]'\"); add a step for another command"
    checked("--install", install, allowed)
    try:
        words = shlex.split(install)
    except ValueError as exc:
        raise InputError(f"--install {install!r}: {exc}: {allowed}") from None
    if any(word in ("&&", "||", ";", "|", "&") or word.startswith("#") for word in words):
        raise InputError(f"--install {install!r}: {allowed}")
    return " ".join(shlex.quote(word) for word in words)


def compiler_for(device: str) -> str | None:
    """The deviceless compiler a gate on `device` needs (`gpu`, `tpu`), without which a GPU or TPU
    preset's executables would keep the CPU's sizes; None for `sim:SIZE`."""
    if not device.strip().lower().startswith("sim"):
        raise InputError(
            f"--device {device!r}: a CI runner without a GPU gates on a simulated device: sim:SIZE (e.g. sim:16GiB) or sim:PRESET"
        )
    try:
        simulated = open_simulated(device)
    except InvalidSettingError as exc:
        raise InputError(str(exc)) from None
    if simulated.tpu is not None:
        return "tpu"
    return "gpu" if simulated.preset is not None else None


def gate_for_users(
    tests: Sequence[str],
    device: str,
    mode: str | None,
    install: str,
    python: str,
    branch: str,
    plugin: str | None = None,
) -> Gate:
    """The gate of a user's repository: its project installed by `install` (pip's arguments), the
    plugin as `plugin` says (else as this copy was installed), with pytest-split (`ci`) to shard; on
    a GPU or TPU preset, that device's compiler, installed outside the environment by `devmem
    compilers install`, matched to the JAX the project installed."""
    checked("--device", device, "sim:SIZE (e.g. sim:16GiB) or sim:PRESET", r"[\w:.+-]+")
    compiler = compiler_for(device)
    tpu = compiler == "tpu"
    if mode is not None:
        OPTION["mode"].parsed(mode)  # an unknown regime named, with the allowed ones
        if tpu and mode != "compact":
            raise InputError(
                f"--mode {mode}: {device} is a TPU preset, whose regime is the TPU runtime's (compact): leave --mode out"
            )
    for path in tests:
        checked("test path", path, "a test path as pytest takes it, not an option", r"[^-].*")
    checked("--python", python, "a Python version as actions/setup-python takes it (e.g. 3.12, pypy3.10)", r"[\w.+*-]+")
    checked("--branch", branch, "a branch name: letters, digits and . _ / - (e.g. main)", r"\w[\w./-]*")
    requirement = Requirement(this_copy() if plugin is None else plugin_requirement(plugin))
    pip = f"python -m pip install {pip_words(install)} ".replace("  ", " ")
    gate_install = f"python -m pip install {shlex.quote(str(requirement))}"
    requirement.extras |= {"ci"}
    return Gate(
        tests=tuple(tests) or ("tests",),
        measure_install=pip + shlex.quote(str(requirement)),
        gate_install=gate_install,
        device=device,
        mode="compact" if tpu else (mode or "prealloc"),  # a session with no mode measures marked tests only
        python=python,
        branch=branch,
        compiler=compiler,
    )


def render(name: str, gate: Gate) -> str:
    """The workflow `name` (one of WORKFLOWS) filled in for `gate`."""
    text = resources.files(__package__).joinpath("templates").joinpath(name).read_text(encoding="utf-8")
    text = re.sub(r"^ *#if compiler\n(.*?)^ *#end compiler\n", r"\1" if gate.compiler else "", text, flags=re.M | re.S)
    device_args = f"--devmem-mode={gate.mode} --devmem-device={gate.device}"
    words = {
        "TESTS": " ".join(shlex.quote(path) for path in gate.tests),
        # YAML's double-quoted form: no ` #` comment, no `: `
        "MEASURE_INSTALL": json.dumps(gate.measure_install, ensure_ascii=False),
        "GATE_INSTALL": json.dumps(gate.gate_install, ensure_ascii=False),
        "COMPILER_NAME": (gate.compiler or "").upper(),
        "COMPILER": gate.compiler or "",
        "DEVICE": device_args,
        "DEVICE_NAME": f"{gate.device}, {gate.mode}",
        "PYTHON": gate.python,
        "BRANCH": gate.branch,
        **{name: f"{commit} # {tag}" for name, (commit, tag) in ACTIONS.items()},
    }
    for word, value in words.items():
        text = text.replace(f"@{word}@", value)
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "tests",
        nargs="*",
        default=["tests"],
        help="The test paths the gate runs, as pytest takes them (default: tests)",
    )
    add_setting(
        parser,
        "device",
        "The device the gate measures on, of {values}: on a CI runner without a GPU, a simulated one (default: sim:16GiB); a GPU or TPU preset adds its compiler (devmem compilers install)",
        default="sim:16GiB",
    )
    add_setting(parser, "mode", "The regime: {values} (default: prealloc; on a TPU preset compact, the TPU runtime's)")
    parser.add_argument(
        "--install",
        default="-e .",
        metavar="ARGS",
        help='pip\'s arguments that install your project and its test dependencies (default: -e .), e.g. "-e \'.[test]\'" or "-r requirements.txt"',
    )
    parser.add_argument("--python", default="3.11", help="The runners' Python version (default: 3.11)")
    parser.add_argument("--branch", default="main", help="The branch whose pushes keep the history (default: main)")
    parser.add_argument(
        "-d",
        "--directory",
        type=Path,
        default=Path(".github/workflows"),
        help="Where to write devmem.yml and devmem-comment.yml (default: .github/workflows)",
    )
    parser.add_argument(
        "--plugin-spec",
        metavar="SPEC",
        help=f"How a runner installs {PLUGIN}: a requirement or URL pip takes, e.g. 'git+https://github.com/OWNER/{PLUGIN}@COMMIT' (default: as this copy was installed, per its direct_url.json)",
    )
    parser.add_argument("--force", action="store_true", help="Replace workflow files of those names")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    gate = gate_for_users(args.tests, args.device, args.mode, args.install, args.python, args.branch, args.plugin_spec)
    paths = [args.directory / name for name in WORKFLOWS]
    if not args.force:
        there = [str(path) for path in paths if os.path.lexists(path)]
        if there:
            raise InputError(f"{', '.join(there)}: already there; --force replaces it")
    if args.directory.exists() and not args.directory.is_dir():
        raise InputError(f"{args.directory}: not a directory")
    texts = {path: render(path.name, gate) for path in paths}  # every file made before any is written
    args.directory.mkdir(parents=True, exist_ok=True)
    for path, text in texts.items():
        write_atomic(path, text)
        print(f"wrote {path}")
    print(
        "Next: record the baselines, and the test durations pytest-split balances the parts by (python -m pytest "
        + " ".join(shlex.quote(path) for path in gate.tests)
        + f" --devmem-mode={gate.mode} --devmem-device={gate.device} --devmem-update --store-durations),"
        " commit baselines/, .test_durations and the workflows, and create the history branch once:"
        ' git switch --orphan gh-pages && git commit --allow-empty -m "benchmark history" && git push origin gh-pages'
    )
    return 0
