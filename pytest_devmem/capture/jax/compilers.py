"""The deviceless GPU and TPU compilers in a folder of their own, matched to the installed JAX, and
loaded only by a process that sizes for a GPU or a TPU (why, and what the folder holds:
docs/gpu-figures.md, "The compilers outside your environment").

JAX starts every PJRT plugin it can import (`discover_pjrt_plugins`, jax/_src/xla_bridge.py) and a
TPU backend from whatever `import libtpu` finds (`get_tpu_library_path`, jax/_src/cloud_tpu_init.py),
in every program: so the compilers live in a folder no program's sys.path holds, one subfolder per
platform (`gpu/`, `tpu/`) with a manifest of what was installed for which jaxlib and Python
(installing them is `compilers_install.py`'s). A session that sizes for a GPU or TPU appends that
platform's subfolder to its own sys.path (`load`) before JAX starts where it can (the plugin's first
hook), else when its sizer is installed. The folder: `--devmem-compilers` / `DEVMEM_COMPILERS`, else
one in the user's cache keyed by the jaxlib version, the Python version and the machine
(`default_directory`). Its manifest is checked before it is believed: a regular file of JSON, each
field of its type, made for this jaxlib and Python (a folder for another is refused, naming both
versions), and each package it names present in the folder at that version. Compilers installed in
the environment itself (jax[cuda12] on a GPU machine) are used as they are. Imports no framework.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import DevmemError, FileFormatError
from ...files import read_json
from . import internals

__all__ = [
    "COMMAND",
    "CUDA_MAJORS",
    "ENVIRONMENT_VARIABLE",
    "PLATFORMS",
    "CompilersError",
    "Manifest",
    "chosen_directory",
    "default_directory",
    "installed_cuda_major",
    "load",
    "loaded",
    "plugin_modules",
    "problem",
    "read_manifest",
]

COMMAND = "devmem compilers install"
"""What installs the compilers; every message that finds them missing names it."""

ENVIRONMENT_VARIABLE = "DEVMEM_COMPILERS"
"""The folder, where the user names one (the `--devmem-compilers` setting's variable)."""

MANIFEST_NAME = "devmem-compilers.json"
MANIFEST_FORMAT = 1
MAX_MANIFEST_BYTES = 64 * 1024  # a manifest names a few packages (some 300 bytes)

CUDA_MAJORS = ("13", "12")
"""The CUDA majors JAX publishes its GPU compiler for, the newest first: `jax-cudaNN-pjrt` holds
XLA:GPU's compiler (module `jax_plugins.xla_cudaNN`), `jax-cudaNN-plugin` registers the handlers of
the CUDA kernels it calls (cuSOLVER, cuFFT..., module `jax_cudaNN_plugin`). The first major whose
two modules can be imported is the one used; `install` puts CUDA 12's in the folder."""


def plugin_modules(major: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """(package, module) of the PJRT plugin and of the kernels' handlers for one CUDA major."""
    return (f"jax-cuda{major}-pjrt", f"jax_plugins.xla_cuda{major}"), (
        f"jax-cuda{major}-plugin",
        f"jax_cuda{major}_plugin",
    )


GPU_PACKAGES = tuple(package for package, _ in plugin_modules("12"))
"""What `install` puts in the folder for a GPU: both at the jaxlib's own version."""
NVCC_PACKAGE = "nvidia-cuda-nvcc-cu12"
"""ptxas and libdevice, which XLA:GPU runs to compile its kernels; the version the plugin's
`with-cuda` extra asks for."""
LIBTPU_PACKAGE = "libtpu"

PLATFORMS: Mapping[str, tuple[str, ...]] = {
    "gpu": (*GPU_PACKAGES, NVCC_PACKAGE),
    "tpu": (LIBTPU_PACKAGE,),
}
"""Each compile platform's packages in the folder."""


class CompilersError(DevmemError):
    """The compilers' folder cannot be used or made: the message says why and what to run."""


@dataclass(frozen=True)
class Runtime:
    """What the folder must match: the installed JAX, the Python that imports it, the machine."""

    jax: str
    jaxlib: str
    python: str  # major.minor: jax-cuda12-plugin's wheels are built per Python
    machine: str

    @classmethod
    def current(cls) -> Runtime:
        try:
            jax, jaxlib = importlib.metadata.version("jax"), importlib.metadata.version("jaxlib")
        except importlib.metadata.PackageNotFoundError as exc:
            raise CompilersError(
                f"JAX is not installed in this environment ({exc.name} missing): the deviceless compilers are matched to "
                "the installed jax and jaxlib, so install JAX first (pip install jax)"
            ) from None
        return cls(jax, jaxlib, f"{sys.version_info.major}.{sys.version_info.minor}", platform.machine())

    @property
    def key(self) -> str:
        return f"jaxlib-{self.jaxlib}-py{self.python}-{self.machine}"


@dataclass(frozen=True)
class Manifest:
    """What a folder holds, as `install` wrote it."""

    jaxlib: str
    python: str
    machine: str
    packages: dict[str, str] = field(default_factory=dict)  # distribution name -> version

    @property
    def key(self) -> str:
        return Runtime("", self.jaxlib, self.python, self.machine).key

    def to_json(self) -> dict[str, object]:
        return {
            "format": MANIFEST_FORMAT,
            "jaxlib": self.jaxlib,
            "python": self.python,
            "machine": self.machine,
            "packages": dict(sorted(self.packages.items())),
        }


# -- where --------------------------------------------------------------------------------


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The user's cache: $XDG_CACHE_HOME, else ~/.cache (the XDG base directory specification)."""
    environ = os.environ if environ is None else environ
    given = environ.get("XDG_CACHE_HOME", "")
    return Path(given) if os.path.isabs(given) else Path.home() / ".cache"


def default_directory(runtime: Runtime, environ: Mapping[str, str] | None = None) -> Path:
    """The folder where none is named: the user's cache, one folder per jaxlib, Python and machine."""
    return cache_root(environ) / "pytest-devmem" / "compilers" / runtime.key


def chosen_directory(
    given: str | os.PathLike[str] | None, runtime: Runtime, environ: Mapping[str, str] | None = None
) -> Path:
    """`given`, else DEVMEM_COMPILERS, else the default folder."""
    environ = os.environ if environ is None else environ
    if given is not None and str(given) != "":
        return Path(given).expanduser()
    named = environ.get(ENVIRONMENT_VARIABLE, "")
    return Path(named).expanduser() if named else default_directory(runtime, environ)


# -- what a folder holds -------------------------------------------------------------------


def read_manifest(directory: Path) -> Manifest | None:
    """The folder's manifest, checked; None where the folder has none. CompilersError naming the
    file where it is not one."""
    path = directory / MANIFEST_NAME
    if not os.path.lexists(path):
        return None
    # what it described cannot be told from the user's own files: nothing is replaced until it is gone
    fix = f"remove {path} and the folders {' and '.join(PLATFORMS)} beside it, then run `{COMMAND} --dir {directory} --force`"
    try:
        _, data = read_json(path, "compilers manifest", MAX_MANIFEST_BYTES)
    except FileFormatError as exc:
        raise CompilersError(f"{exc}; {fix}") from None

    def bad(what: str) -> CompilersError:
        return CompilersError(f"{path}: not a pytest-devmem compilers manifest ({what}); {fix}")

    if not isinstance(data, dict):
        raise bad(f"a JSON {type(data).__name__}, not an object")
    if data.get("format") != MANIFEST_FORMAT or isinstance(data.get("format"), bool):
        raise bad(f"format {data.get('format')!r}, this version reads {MANIFEST_FORMAT}")
    texts = {}
    for name in ("jaxlib", "python", "machine"):
        value = data.get(name)
        if not isinstance(value, str) or not _VERSION_TEXT.fullmatch(value):
            raise bad(f"{name} is {value!r}, not a version or machine name")
        texts[name] = value
    packages = data.get("packages")
    if not isinstance(packages, dict) or not packages:
        raise bad(f"packages is {packages!r}, not an object naming the packages installed")
    for name, version in packages.items():
        if not isinstance(name, str) or not isinstance(version, str) or not _VERSION_TEXT.fullmatch(version):
            raise bad(f"package {name!r} has version {version!r}")
        if not any(name in wanted for wanted in PLATFORMS.values()):
            raise bad(
                f"package {name!r} is none of the compilers' ({', '.join(p for ps in PLATFORMS.values() for p in ps)})"
            )
    return Manifest(texts["jaxlib"], texts["python"], texts["machine"], dict(packages))


_VERSION_TEXT = re.compile(r"[A-Za-z0-9_.+!\-]{1,64}")


def installed_distributions(directory: Path) -> dict[str, importlib.metadata.Distribution]:
    """The distributions pip installed in the folder, by normalised name."""
    found = {}
    for distribution in importlib.metadata.distributions(path=[str(directory)]):
        name = distribution.metadata["Name"]
        if name:
            found[normalised(name)] = distribution
    return found


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def check(directory: Path, runtime: Runtime, platform_name: str) -> Manifest:
    """The folder's manifest, where the folder holds `platform_name`'s compiler for this runtime;
    CompilersError saying what is wrong and what to run otherwise."""
    manifest = read_manifest(directory)
    if manifest is None:
        where = "does not exist" if not directory.exists() else "holds no compilers (no manifest)"
        raise CompilersError(f"{directory} {where}: run `{COMMAND}{_dir_flag(directory, runtime)}`")
    if manifest.jaxlib != runtime.jaxlib or manifest.python != runtime.python or manifest.machine != runtime.machine:
        raise CompilersError(
            f"{directory} holds the compilers for jaxlib {manifest.jaxlib} (Python {manifest.python}, {manifest.machine}), "
            f"and this environment has jaxlib {runtime.jaxlib} (Python {runtime.python}, {runtime.machine}): "
            f"run `{COMMAND}{_dir_flag(directory, runtime)} --force` to replace them with the ones for jaxlib {runtime.jaxlib}"
        )
    missing = [name for name in PLATFORMS[platform_name] if name not in manifest.packages]
    if missing:
        raise CompilersError(
            f"{directory} holds no {', '.join(missing)} (installed: {', '.join(manifest.packages)}): "
            f"run `{COMMAND}{_dir_flag(directory, runtime)} --force`"
        )
    present = installed_distributions(directory / platform_name)
    for name in PLATFORMS[platform_name]:
        found = present.get(normalised(name))
        if found is None or found.version != manifest.packages[name]:
            raise CompilersError(
                f"{directory}: its manifest names {name} {manifest.packages[name]}, and {directory / platform_name} holds "
                f"{name + ' ' + found.version if found else 'none'}: {_reinstall(directory)}"
            )
        damaged = _damaged(found)
        if damaged is not None:
            raise CompilersError(f"{directory}: {name} {found.version} is damaged: {damaged}: {_reinstall(directory)}")
    return manifest


def _damaged(distribution: importlib.metadata.Distribution) -> str | None:
    """The first file pip's RECORD lists for `distribution` that is gone or of another size."""
    for file in distribution.files or ():
        if file.size is not None:
            path = Path(str(file.locate()))
            size = path.stat().st_size if path.is_file() else None
            if size != file.size:
                return f"{path} {'is missing' if size is None else f'holds {size} bytes, not {file.size}'}"
    return None if distribution.files is not None else "pip's RECORD of its files is missing"


def _dir_flag(directory: Path, runtime: Runtime) -> str:
    return "" if directory == chosen_directory(None, runtime) else f" --dir {directory}"


def _reinstall(directory: Path) -> str:
    return f"run `{COMMAND} --dir {directory} --force` to install them again"


# -- loading -------------------------------------------------------------------------------

_loaded: dict[str, Path] = {}
"""Each platform whose compiler this process put on its sys.path, and from which folder."""
_problems: dict[str, str] = {}
"""Why a platform's compiler could not be loaded, as `load` found it."""
_after_jax: set[str] = set()
"""The platforms loaded after JAX was imported (`loaded_after_jax`)."""

WHAT = {"gpu": "the CUDA compiler for JAX", "tpu": "the TPU compiler for JAX (libtpu)"}


def _origins(platform_name: str) -> list[str] | None:
    """Where the platform's compiler's modules would be imported from here (a GPU's: those of
    `installed_cuda_major`); None where they cannot be."""
    if platform_name == "tpu":
        return _found(("libtpu",))
    major = installed_cuda_major()
    return _found([module for _, module in plugin_modules(major)]) if major is not None else None


def _found(modules: Sequence[str]) -> list[str] | None:
    places = []
    for module in modules:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        places.extend([spec.origin] if spec.origin else list(spec.submodule_search_locations or ()))
    return places


def installed_cuda_major() -> str | None:
    """The CUDA major whose compiler's modules can both be imported here (`CUDA_MAJORS`): installed in
    the environment, or loaded from the folder; or None."""
    for major in CUDA_MAJORS:
        if _found([module for _, module in plugin_modules(major)]) is not None:
            return major
    return None


def in_environment(platform_name: str) -> bool:
    """Whether the platform's compiler can be imported here already: installed in the environment
    (jax[cuda12] on a GPU machine, the old extras), or loaded from the folder."""
    return _origins(platform_name) is not None


def _installed_in_environment(platform_name: str) -> bool:
    """Whether the platform's compiler is importable from elsewhere than a folder this process loaded
    (which may hold it beside the other platform's)."""
    origins = _origins(platform_name)
    folders = [os.path.join(str(folder), "") for folder in _loaded.values()]
    return origins is not None and not all(any(o.startswith(f) for f in folders) for o in origins)


def load(platform_name: str, directory: str | os.PathLike[str] | None = None) -> str | None:
    """Put the folder's `platform_name` compiler (its subfolder `gpu` or `tpu`) on this process's
    sys.path (appended: the environment's own packages come first), once; None where the compiler can be imported after,
    else why not (naming `devmem compilers install`). Nothing is loaded where the environment has
    the compiler already."""
    if platform_name in _loaded or _installed_in_environment(platform_name):
        _problems.pop(platform_name, None)
        return None
    try:
        runtime = Runtime.current()
        folder = chosen_directory(directory, runtime)
        check(folder, runtime, platform_name)
    except CompilersError as exc:
        _problems[platform_name] = f"{WHAT[platform_name]} is not installed: {exc}"
        return _problems[platform_name]
    if internals.jaxlib_loaded():
        _after_jax.add(platform_name)
    place = str(folder / platform_name)
    if place not in sys.path:
        sys.path.append(place)
    importlib.invalidate_caches()
    _loaded[platform_name] = folder / platform_name
    _problems.pop(platform_name, None)
    return None


def loaded() -> dict[str, Path]:
    """The platforms whose compilers this process loaded from a folder, and the subfolder it put on sys.path."""
    return dict(_loaded)


def loaded_after_jax(platform_name: str) -> bool:
    """Whether the platform's compiler was loaded after JAX was imported: JAX registers the handlers
    of the CUDA kernels (cuSOLVER, cuSPARSE...) from jax_cuda12_plugin when it is imported
    (jax/_src/lax/linalg.py, `register_module_custom_calls`), so a program that calls one cannot be
    compiled for a GPU then. A session loads them before any conftest can import JAX."""
    return platform_name in _after_jax


def problem(platform_name: str) -> str | None:
    """Why this process cannot compile for `platform_name` (gpu, tpu), or None: the compiler is in
    the environment, was loaded, or can be loaded from the folder. Imports no framework."""
    if platform_name in _loaded or in_environment(platform_name):
        return None
    if platform_name in _problems:
        return _problems[platform_name]
    what = WHAT[platform_name]
    try:
        runtime = Runtime.current()
        check(chosen_directory(None, runtime), runtime, platform_name)
    except CompilersError as exc:
        return f"{what} is not installed: {exc}"
    return None
