"""`devmem compilers install`: the deviceless compilers matched to the installed jaxlib, put into
their folder by pip (`--target`, `--no-deps`) and described by the manifest that `compilers.py`
checks before a session loads them. Imports no framework.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ...files import write_atomic
from .compilers import (
    COMMAND,
    GPU_PACKAGES,
    MANIFEST_NAME,
    NVCC_PACKAGE,
    PLATFORMS,
    CompilersError,
    Manifest,
    Runtime,
    check,
    chosen_directory,
    installed_distributions,
    normalised,
    read_manifest,
)

__all__ = ["install", "libtpu_requirement", "wanted_packages"]


def libtpu_requirement(runtime: Runtime) -> str:
    """The libtpu that `jax[tpu]` of the installed jax pins (jax's own metadata: `libtpu==0.0.42.*;
    extra == "tpu"` for jax 0.10.2)."""
    for requirement in importlib.metadata.requires("jax") or ():
        name, _, marker = requirement.partition(";")
        if re.match(r"\s*libtpu\b", name) and re.search(r"extra\s*==\s*[\"']tpu[\"']", marker):
            return name.strip().replace(" ", "")
    raise CompilersError(
        f"jax {runtime.jax}'s metadata names no libtpu for its tpu extra: cannot tell which to install"
    )


def nvcc_requirement(directory: Path) -> str:
    """The nvidia-cuda-nvcc-cu12 that jax-cuda12-plugin's `with-cuda` extra asks for, as installed in `directory`."""
    for distribution in importlib.metadata.distributions(path=[str(directory)]):
        if normalised(distribution.metadata["Name"] or "") != "jax-cuda12-plugin":
            continue
        for requirement in distribution.requires or ():
            name, _, marker = requirement.partition(";")
            if normalised(re.split(r"[\s<>=!~\[(]", name.strip(), maxsplit=1)[0]) == NVCC_PACKAGE:
                return name.strip().replace(" ", "")
    return NVCC_PACKAGE


def wanted_packages(runtime: Runtime, gpu: bool, tpu: bool) -> list[str]:
    """The requirements of the first pip run: the compilers of the installed jaxlib's version."""
    wanted = [f"{name}=={runtime.jaxlib}" for name in GPU_PACKAGES] if gpu else []
    if tpu:
        wanted.append(libtpu_requirement(runtime))
    return wanted


Runner = Callable[[Sequence[str]], int]


def _run_pip(arguments: Sequence[str]) -> int:
    return subprocess.call([sys.executable, "-m", "pip", *arguments])


def install(
    directory: str | os.PathLike[str] | None,
    *,
    gpu: bool = True,
    tpu: bool = True,
    force: bool = False,
    pip_arguments: Sequence[str] = (),
    run_pip: Runner = _run_pip,
    say: Callable[[str], None] = print,
) -> Manifest:
    """Install the compilers matching the installed jaxlib into the folder (`pip install --target
    --no-deps` into a folder beside it, each platform's subfolder then renamed into place, so that a
    failed install leaves the folder as it was), write its manifest, and return it. A platform held
    for this jaxlib already is kept, and another added beside it. `force` replaces what the manifest
    names (another jaxlib's, or damaged); nothing else in the folder is ever replaced."""
    runtime = Runtime.current()
    folder = chosen_directory(directory, runtime)
    platforms = [name for name, wanted in (("gpu", gpu), ("tpu", tpu)) if wanted]
    if not platforms:
        raise CompilersError("nothing to install: name --gpu, --tpu or neither (both)")
    if not sys.platform.startswith("linux"):
        raise CompilersError(f"the deviceless compilers are published for Linux only, and this is {sys.platform}")
    manifest = read_manifest(folder) if folder.exists() else None  # a damaged one: refused, saying what to remove
    if manifest is None and not force and folder.exists() and any(folder.iterdir()):
        raise CompilersError(
            f"{folder} exists and holds no compilers manifest: name an empty or new --dir "
            "(or --force: the compilers then go beside what it holds, which is kept)"
        )
    ours = [name for name in PLATFORMS if manifest is not None and set(PLATFORMS[name]) & set(manifest.packages)]
    same = manifest is not None and manifest.key == runtime.key
    if manifest is not None and not force:
        for name in [name for name in platforms if name in ours] or ([] if same else platforms[:1]):
            check(folder, runtime, name)  # another jaxlib, or damaged: refused, naming what --force replaces
        platforms = [name for name in platforms if name not in ours]
        if not platforms:
            say(f"{folder} already holds the compilers for jaxlib {runtime.jaxlib}: {_listed(manifest)}")
            return manifest
    for name in platforms:
        if os.path.lexists(folder / name) and name not in ours:
            raise CompilersError(
                f"{folder / name} is not what {COMMAND} put there (no manifest of its names it): move it away, or name another --dir"
            )
    kept = {
        p: v
        for p, v in (manifest.packages if manifest and same else {}).items()
        if not any(p in PLATFORMS[n] for n in platforms)
    }
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        packages: dict[str, str] = {}
        for name in platforms:
            target = staging / name
            base = ["install", "--target", str(target), "--no-deps", "--disable-pip-version-check", *pip_arguments]
            wanted = wanted_packages(runtime, gpu=name == "gpu", tpu=name == "tpu")
            if name == "gpu":
                say(f"installing {', '.join(wanted)} for jaxlib {runtime.jaxlib} into {folder / name}")
                if run_pip([*base, *wanted]) != 0:
                    raise CompilersError(f"pip could not install {', '.join(wanted)} (its output is above)")
                wanted = [nvcc_requirement(target)]
                say(f"installing {wanted[0]} (what jax-cuda12-plugin {runtime.jaxlib} asks for) into {folder / name}")
            else:
                say(f"installing {', '.join(wanted)} (what jax[tpu] {runtime.jax} pins) into {folder / name}")
            if run_pip([*base, *wanted]) != 0:
                raise CompilersError(f"pip could not install {', '.join(wanted)} (its output is above)")
            present = installed_distributions(target)
            packages.update({package: present[normalised(package)].version for package in PLATFORMS[name]})
        manifest = Manifest(runtime.jaxlib, runtime.python, runtime.machine, {**kept, **packages})
        folder.mkdir(exist_ok=True)
        old = staging / ".old"
        old.mkdir()
        for name in [*platforms, *(name for name in ours if name not in platforms and not same)]:
            if os.path.lexists(folder / name):  # the manifest names it: the tool's own
                os.replace(folder / name, old / name)
            if name in platforms:
                os.replace(staging / name, folder / name)
        write_atomic(folder / MANIFEST_NAME, json.dumps(manifest.to_json(), indent=2) + "\n")
    except KeyError as exc:
        raise CompilersError(f"pip reported success but installed no {exc.args[0]} into {staging}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"installed into {folder}: {_listed(manifest)}")
    return manifest


def _listed(manifest: Manifest) -> str:
    return ", ".join(f"{name} {version}" for name, version in sorted(manifest.packages.items()))
