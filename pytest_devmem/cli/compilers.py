"""`devmem compilers install|show`: the deviceless GPU and TPU compilers, in a folder of their own
matched to the installed JAX (capture/jax/compilers.py, installed by compilers_install.py), so that no program but a sizing session
starts them."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..capture.jax import compilers, compilers_install
from .common import print_text

HELP = "Install (or show) the deviceless GPU and TPU compilers matching the installed JAX, outside the environment"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    install = actions.add_parser(
        "install",
        help="pip install --target DIR --no-deps the compilers of the installed jaxlib's version, and print what it installed",
    )
    show = actions.add_parser("show", help="Print the folder, what it holds and whether it matches the installed JAX")
    for sub in (install, show):
        sub.add_argument(
            "--dir",
            type=Path,
            default=None,
            help=f"The folder (default: ${compilers.ENVIRONMENT_VARIABLE}, else ~/.cache/pytest-devmem/compilers/jaxlib-VERSION-pyX.Y-MACHINE); "
            "a session reads the same through --devmem-compilers",
        )
    install.add_argument(
        "--gpu",
        action="store_true",
        help="XLA:GPU's compiler only (jax-cuda12-pjrt, jax-cuda12-plugin, nvidia-cuda-nvcc-cu12)",
    )
    install.add_argument("--tpu", action="store_true", help="XLA:TPU's compiler only (libtpu); neither flag: both")
    install.add_argument(
        "--force",
        action="store_true",
        help="Replace the compilers the folder's manifest names (another jaxlib's, or damaged); nothing else in it",
    )
    install.add_argument(
        "pip_arguments",
        nargs=argparse.REMAINDER,
        help="After --: arguments for pip (e.g. -- --no-index --find-links WHEELS)",
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.action == "show":
        return show(args.dir)
    extra = list(args.pip_arguments)
    if extra and extra[0] == "--":
        extra = extra[1:]
    both = not args.gpu and not args.tpu
    compilers_install.install(
        args.dir, gpu=args.gpu or both, tpu=args.tpu or both, force=args.force, pip_arguments=extra
    )
    return 0


def show(directory: Path | None) -> int:
    """The folder, its packages and whether each platform's compiler in it matches this JAX; exit 1 where none does."""
    runtime = compilers.Runtime.current()
    folder = compilers.chosen_directory(directory, runtime)
    lines = [
        f"folder: {folder}",
        f"this environment: jax {runtime.jax}, jaxlib {runtime.jaxlib}, Python {runtime.python}",
    ]
    usable = 0
    for platform in compilers.PLATFORMS:
        try:
            manifest = compilers.check(folder, runtime, platform)
        except compilers.CompilersError as exc:
            lines.append(f"{platform}: {exc}")
            continue
        usable += 1
        packages = ", ".join(f"{name} {manifest.packages[name]}" for name in compilers.PLATFORMS[platform])
        lines.append(f"{platform}: {packages}")
    print_text("\n".join(lines) + "\n")
    return 0 if usable else 1
