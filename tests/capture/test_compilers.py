"""The deviceless compilers' folder (capture/jax/compilers.py): what `devmem compilers install` puts
there (pip run for real, on wheels made here), the manifest checked before it is believed, a folder
for another jaxlib refused naming both versions, and the folder loaded by a session that sizes for a
GPU or TPU preset and by no other."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pytest_devmem.capture.jax import compilers, compilers_install
from pytest_devmem.capture.jax.compilers import MANIFEST_NAME, CompilersError, Runtime
from pytest_devmem.cli import main
from pytest_devmem.plugin.compile_target import compilers_needed

RUNTIME = Runtime.current()
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def dist_info(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """What pip leaves of an installed distribution that importlib.metadata reads: its METADATA, and
    its RECORD of the files it installed (libtpu's module)."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in requires),
    ]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    files = ["libtpu/__init__.py"] if name == "libtpu" else []
    for file in files:
        (folder / file).parent.mkdir(exist_ok=True)
        (folder / file).write_text("# a module\n")
    record = [f"{file},sha256=x,{(folder / file).stat().st_size}" for file in [f"{info.name}/METADATA", *files]]
    (info / "RECORD").write_text("\n".join([*record, f"{info.name}/RECORD,,"]) + "\n")


def folder_for(path: Path, jaxlib: str = RUNTIME.jaxlib, packages: dict[str, str] | None = None) -> Path:
    """A folder as `install` leaves it, for `jaxlib`: manifest and each package's metadata."""
    packages = packages or {
        "jax-cuda12-pjrt": RUNTIME.jaxlib,
        "jax-cuda12-plugin": RUNTIME.jaxlib,
        "nvidia-cuda-nvcc-cu12": "12.9.86",
        "libtpu": "0.0.42.1",
    }
    for name, version in packages.items():
        dist_info(path / ("tpu" if name == "libtpu" else "gpu"), name, version)
    manifest = {"format": 1, "jaxlib": jaxlib, "python": PYTHON, "machine": platform.machine(), "packages": packages}
    (path / MANIFEST_NAME).write_text(json.dumps(manifest))
    return path


# -- the manifest, checked ------------------------------------------------------------------


def test_a_folder_as_install_leaves_it_is_believed(tmp_path: Path) -> None:
    folder = folder_for(tmp_path)
    for name in compilers.PLATFORMS:
        assert compilers.check(folder, RUNTIME, name).jaxlib == RUNTIME.jaxlib


def test_a_folder_for_another_jaxlib_is_refused_naming_both_versions(tmp_path: Path) -> None:
    folder = folder_for(tmp_path, jaxlib="0.9.0")
    with pytest.raises(CompilersError) as refused:
        compilers.check(folder, RUNTIME, "gpu")
    message = str(refused.value)
    assert f"{folder} holds the compilers for jaxlib 0.9.0" in message
    assert f"this environment has jaxlib {RUNTIME.jaxlib}" in message
    assert f"`devmem compilers install --dir {folder} --force`" in message


def test_a_missing_or_empty_folder_names_the_command(tmp_path: Path) -> None:
    with pytest.raises(CompilersError, match=r"does not exist: run `devmem compilers install --dir .*`"):
        compilers.check(tmp_path / "none", RUNTIME, "tpu")
    with pytest.raises(CompilersError, match=r"holds no compilers \(no manifest\): run `devmem compilers install"):
        compilers.check(tmp_path, RUNTIME, "tpu")


def test_a_manifest_naming_what_the_folder_does_not_hold_is_refused(tmp_path: Path) -> None:
    folder = folder_for(tmp_path, packages={"libtpu": "0.0.42.1"})
    (folder / "tpu" / "libtpu-0.0.42.1.dist-info").rename(folder / "tpu" / "libtpu-0.0.40.dist-info")
    (folder / "tpu" / "libtpu-0.0.40.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: libtpu\nVersion: 0.0.40\n"
    )
    with pytest.raises(CompilersError, match=r"names libtpu 0.0.42.1, and .*tpu holds libtpu 0.0.40"):
        compilers.check(folder, RUNTIME, "tpu")
    with pytest.raises(CompilersError, match=r"holds no jax-cuda12-pjrt, jax-cuda12-plugin, nvidia-cuda-nvcc-cu12"):
        compilers.check(folder, RUNTIME, "gpu")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not valid JSON"),
        ("[]", "a JSON list, not an object"),
        ('{"format": 2}', "format 2, this version reads 1"),
        ('{"format": true}', "format True"),
        ('{"format": 1, "jaxlib": 10, "python": "3.11", "machine": "x86_64"}', "jaxlib is 10"),
        ('{"format": 1, "jaxlib": "0.10.2/../..", "python": "3.11", "machine": "x86_64"}', "jaxlib is '0.10.2/../..'"),
        ('{"format": 1, "jaxlib": "0.10.2", "python": "3.11", "machine": "x86_64", "packages": {}}', "packages is {}"),
        (
            '{"format": 1, "jaxlib": "0.10.2", "python": "3.11", "machine": "x86_64", "packages": {"numpy": "2.0"}}',
            "package 'numpy' is none of the compilers'",
        ),
        (
            '{"format": 1, "jaxlib": "0.10.2", "python": "3.11", "machine": "x86_64", "packages": {"libtpu": 1}}',
            "package 'libtpu' has version 1",
        ),
        (" " * (70 * 1024), "more than a compilers manifest may have"),
    ],
)
def test_a_manifest_is_checked_before_it_is_believed(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / MANIFEST_NAME).write_text(text)
    with pytest.raises(CompilersError) as refused:
        compilers.read_manifest(tmp_path)
    assert problem in str(refused.value)
    assert str(tmp_path / MANIFEST_NAME) in str(refused.value)
    assert "devmem compilers install" in str(refused.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_for_a_manifest_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / MANIFEST_NAME)
    with pytest.raises(CompilersError, match="not a regular file"):
        compilers.read_manifest(tmp_path)


def test_the_default_folder_is_the_users_cache_keyed_by_jaxlib_python_and_machine(tmp_path: Path) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    expected = tmp_path / "pytest-devmem" / "compilers" / f"jaxlib-{RUNTIME.jaxlib}-py{PYTHON}-{platform.machine()}"
    assert compilers.chosen_directory(None, RUNTIME, environ) == expected
    assert compilers.chosen_directory(None, RUNTIME, {**environ, "DEVMEM_COMPILERS": "/opt/c"}) == Path("/opt/c")
    assert compilers.chosen_directory("/srv/c", RUNTIME, {"DEVMEM_COMPILERS": "/opt/c"}) == Path("/srv/c")


def test_libtpu_is_the_version_jax_tpu_extra_pins() -> None:
    """Read from the installed jax's own metadata, as pip resolves `jax[tpu]`."""
    pinned = [
        r.split(";")[0].replace(" ", "") for r in importlib.metadata.requires("jax") or () if r.startswith("libtpu")
    ]
    assert compilers_install.libtpu_requirement(RUNTIME) == pinned[0]
    assert compilers_install.wanted_packages(RUNTIME, gpu=True, tpu=False) == [
        f"jax-cuda12-pjrt=={RUNTIME.jaxlib}",
        f"jax-cuda12-plugin=={RUNTIME.jaxlib}",
    ]


@pytest.mark.parametrize(
    ("device", "setting", "needed"),
    [
        ("sim:H100-80GB", None, ("gpu",)),
        ("sim:t4", "auto", ("gpu",)),
        ("sim:TPU-v5e", None, ("tpu",)),
        ("sim:16GiB", None, ()),  # a capacity, not a GPU: the CPU's sizes
        ("sim:16GiB", "H100-80GB", ("gpu",)),
        ("sim:16GiB", "TPU-v4", ("tpu",)),
        ("sim:H100-80GB", "cpu", ()),
        ("cuda:0", None, ()),  # a real GPU compiles for itself
        ("auto", None, ()),
    ],
)
def test_a_session_loads_the_compiler_of_its_compile_target_only(
    device: str, setting: str | None, needed: tuple
) -> None:
    assert compilers_needed(device, setting) == needed


# -- installing: pip run for real, on wheels made here ---------------------------------------


def wheel(directory: Path, name: str, version: str, package: str, requires: tuple[str, ...] = ()) -> None:
    """A wheel pip installs: one module, its metadata."""
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    metadata = "\n".join(
        ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    )
    files = {
        f"{package}/__init__.py": "",
        f"{info}/METADATA": metadata + "\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(directory / f"{stem}-py3-none-any.whl", "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    """The compilers of the installed jaxlib's version, as wheels of nothing, and an nvcc the plugin asks for."""
    directory = tmp_path / "wheels"
    directory.mkdir()
    libtpu = compilers_install.libtpu_requirement(RUNTIME).split("==")[1].replace("*", "1")
    wheel(directory, "jax-cuda12-pjrt", RUNTIME.jaxlib, "jax_plugins_fake")
    requires = ('nvidia-cuda-nvcc-cu12>=12.6.85; sys_platform == "linux" and extra == "with-cuda"',)
    wheel(directory, "jax-cuda12-plugin", RUNTIME.jaxlib, "jax_cuda12_plugin", requires)
    wheel(directory, "nvidia-cuda-nvcc-cu12", "12.9.86", "nvidia_nvcc_fake")
    wheel(directory, "nvidia-cuda-nvcc-cu12", "12.5.0", "nvidia_nvcc_fake")  # below what the plugin asks for
    wheel(directory, "libtpu", libtpu, "libtpu")
    return directory


def devmem(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_devmem.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the compilers are published for Linux only")
def test_install_puts_the_versions_matching_jaxlib_in_the_folder_and_prints_them(tmp_path: Path, wheels: Path) -> None:
    folder = tmp_path / "compilers"
    offline = ["--", "--no-index", "--find-links", str(wheels), "--quiet"]
    done = devmem("compilers", "install", "--dir", str(folder), *offline)
    assert done.returncode == 0, done.stderr
    libtpu = compilers_install.libtpu_requirement(RUNTIME)
    assert (
        f"installing jax-cuda12-pjrt=={RUNTIME.jaxlib}, jax-cuda12-plugin=={RUNTIME.jaxlib} for jaxlib" in done.stdout
    )
    assert "installing nvidia-cuda-nvcc-cu12>=12.6.85 (what jax-cuda12-plugin" in done.stdout
    assert f"installing {libtpu} (what jax[tpu] {RUNTIME.jax} pins)" in done.stdout
    assert (
        f"installed into {folder}: jax-cuda12-pjrt {RUNTIME.jaxlib}, jax-cuda12-plugin {RUNTIME.jaxlib}" in done.stdout
    )
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert manifest["jaxlib"] == RUNTIME.jaxlib and manifest["python"] == PYTHON
    assert manifest["packages"]["nvidia-cuda-nvcc-cu12"] == "12.9.86"
    assert (folder / "gpu" / "jax_cuda12_plugin" / "__init__.py").is_file() and (folder / "tpu" / "libtpu").is_dir()
    assert not (folder / "gpu" / "libtpu").exists()  # a TPU session never finds the CUDA plugin, nor a GPU one libtpu
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left
    shown = devmem("compilers", "show", "--dir", str(folder))
    assert shown.returncode == 0 and f"gpu: jax-cuda12-pjrt {RUNTIME.jaxlib}" in shown.stdout

    again = devmem("compilers", "install", "--dir", str(folder), *offline)
    assert again.returncode == 0 and f"{folder} already holds the compilers for jaxlib {RUNTIME.jaxlib}" in again.stdout

    stale = {**manifest, "jaxlib": "0.9.0"}
    (folder / MANIFEST_NAME).write_text(json.dumps(stale))
    refused = devmem("compilers", "install", "--dir", str(folder), *offline)
    assert refused.returncode == 2
    assert "holds the compilers for jaxlib 0.9.0" in refused.stderr and f"has jaxlib {RUNTIME.jaxlib}" in refused.stderr
    replaced = devmem("compilers", "install", "--dir", str(folder), "--force", *offline)
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads((folder / MANIFEST_NAME).read_text())["jaxlib"] == RUNTIME.jaxlib


def test_a_failed_install_leaves_the_folder_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = folder_for(tmp_path / "compilers", jaxlib="0.9.0")
    before = sorted(p.name for p in folder.iterdir())
    calls: list[list[str]] = []

    def failing_pip(arguments: list[str]) -> int:
        calls.append(list(arguments))
        return 1

    with pytest.raises(CompilersError, match="pip could not install"):
        compilers_install.install(folder, force=True, run_pip=failing_pip)
    assert sorted(p.name for p in folder.iterdir()) == before
    assert [p.name for p in (tmp_path / "compilers").parent.iterdir()] == ["compilers"]
    assert calls[0][:4] == ["install", "--target", calls[0][2], "--no-deps"]


def test_a_folder_that_is_not_the_compilers_is_never_installed_over(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["compilers", "install", "--dir", str(tmp_path)]) == 2
    assert (tmp_path / "notes.txt").read_text() == "mine"


def fake_pip(arguments: list[str]) -> int:
    """pip install --target: each requirement's metadata (and RECORD) in the target, as pip leaves them."""
    target = Path(arguments[arguments.index("--target") + 1])
    for requirement in arguments[arguments.index("--disable-pip-version-check") + 1 :]:
        name, _, version = requirement.partition("==")
        dist_info(target, name, version.replace("*", "1") or "12.9.86")
    return 0


def test_force_replaces_only_what_the_manifest_says_it_installed(tmp_path: Path) -> None:
    folder = folder_for(tmp_path / "compilers", jaxlib="0.9.0")
    (folder / "notes.txt").write_text("mine")
    (folder / "mine").mkdir()
    (folder / "gpu" / "kept.txt").write_text("in the tool's folder: replaced with it")
    compilers_install.install(folder, force=True, run_pip=fake_pip, say=lambda line: None)
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "mine").is_dir()
    assert not (folder / "gpu" / "kept.txt").exists()
    assert compilers.check(folder, RUNTIME, "tpu").jaxlib == RUNTIME.jaxlib
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compilers"]  # no staging folder left


def test_a_folder_the_manifest_does_not_name_is_never_replaced(tmp_path: Path) -> None:
    folder = folder_for(tmp_path / "compilers", packages={"libtpu": "0.0.42.1"})
    (folder / "gpu").mkdir()
    (folder / "gpu" / "notes.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(CompilersError, match=f"{folder / 'gpu'} is not what devmem compilers install put there"):
            compilers_install.install(folder, gpu=True, tpu=False, force=force, run_pip=fake_pip)
    assert (folder / "gpu" / "notes.txt").read_text() == "mine"


def test_the_gpu_compilers_go_beside_the_tpus_without_force(tmp_path: Path) -> None:
    folder = folder_for(tmp_path / "compilers", packages={"libtpu": "0.0.42.1"})
    before = (folder / "tpu" / "libtpu" / "__init__.py").stat().st_ino
    manifest = compilers_install.install(folder, gpu=True, tpu=False, run_pip=fake_pip, say=lambda line: None)
    assert set(manifest.packages) == {*compilers.PLATFORMS["gpu"], "libtpu"}
    assert (folder / "tpu" / "libtpu" / "__init__.py").stat().st_ino == before  # the TPU's left as it was
    for name in compilers.PLATFORMS:
        compilers.check(folder, RUNTIME, name)


def test_a_damaged_manifest_advises_nothing_that_deletes_the_users_files(tmp_path: Path) -> None:
    folder = folder_for(tmp_path / "compilers")
    (folder / "notes.txt").write_text("mine")
    (folder / MANIFEST_NAME).write_text("{")
    for force in (False, True):
        with pytest.raises(CompilersError) as refused:
            compilers_install.install(folder, force=force, run_pip=fake_pip)
        assert f"remove {folder / MANIFEST_NAME} and the folders gpu and tpu beside it" in str(refused.value)
    for name in (MANIFEST_NAME, "gpu", "tpu"):  # as the message says
        shutil.rmtree(folder / name) if (folder / name).is_dir() else (folder / name).unlink()
    compilers_install.install(folder, force=True, run_pip=fake_pip, say=lambda line: None)
    assert (folder / "notes.txt").read_text() == "mine"


def test_a_package_whose_files_are_gone_or_cut_is_not_called_fine(tmp_path: Path) -> None:
    folder = folder_for(tmp_path / "compilers")
    (folder / "tpu" / "libtpu" / "__init__.py").write_text("#")  # cut short: another size than pip's RECORD
    with pytest.raises(CompilersError, match=r"libtpu 0.0.42.1 is damaged: .*__init__.py holds 1 bytes, not 11"):
        compilers.check(folder, RUNTIME, "tpu")
    shutil.rmtree(folder / "tpu" / "libtpu")
    with pytest.raises(CompilersError, match=r"libtpu 0.0.42.1 is damaged: .*__init__.py is missing.*--force"):
        compilers_install.install(folder, tpu=True, gpu=False, run_pip=fake_pip)
    assert main(["compilers", "show", "--dir", str(folder)]) == 0  # the GPU's are fine
    compilers_install.install(folder, tpu=True, gpu=False, force=True, run_pip=fake_pip, say=lambda line: None)
    compilers.check(folder, RUNTIME, "tpu")


# -- loading ---------------------------------------------------------------------------------

LIBTPU_IN_ENVIRONMENT = compilers.in_environment("tpu") and "tpu" not in compilers.loaded()
"""libtpu installed in the environment itself (the old tpu-compile extra): then nothing is loaded."""


@pytest.mark.skipif(LIBTPU_IN_ENVIRONMENT, reason="libtpu is installed in this environment itself: no folder is loaded")
def test_a_session_puts_the_folder_on_its_path_only_where_it_sizes_for_that_device(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    folder = folder_for(tmp_path / "compilers")
    pytester.makepyfile(
        f"""
        import sys

        def test_path(devmem):
            print("LOADED" if {str(folder / "tpu")!r} in sys.path else "NOT LOADED")
            assert {str(folder / "gpu")!r} not in sys.path
        """
    )
    args = ["-s", "-p", "no:cacheprovider", f"--devmem-compilers={folder}", "--devmem-compile-target=cpu"]
    cpu = pytester.runpytest_subprocess(*args, "--devmem-device=sim:TPU-v5e")
    cpu.stdout.fnmatch_lines(["*NOT LOADED*"])
    sized = pytester.runpytest_subprocess(*args[:-1], "--devmem-device=sim:TPU-v5e")
    sized.stdout.fnmatch_lines(["*LOADED*"])
    assert "NOT LOADED" not in sized.stdout.str()


@pytest.mark.skipif(LIBTPU_IN_ENVIRONMENT, reason="libtpu is installed in this environment itself: no folder is loaded")
def test_a_session_without_the_compiler_says_which_command_installs_it(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    stale = folder_for(tmp_path / "stale", jaxlib="0.9.0")
    pytester.makepyfile("def test_one(devmem):\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--devmem-device=sim:TPU-v5e", f"--devmem-compilers={stale}"
    )
    result.stdout.fnmatch_lines(
        [
            f"*JAX's sizes stay the CPU compile's, not a TPU v5e's: the TPU compiler for JAX (libtpu) is not installed: "
            f"{stale} holds the compilers for jaxlib 0.9.0*this environment has jaxlib {RUNTIME.jaxlib}*"
            f"run `devmem compilers install --dir {stale} --force`*"
        ]
    )


def tpu_session_with(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, folder: Path) -> pytest.RunResult:
    """A TPU preset's session, updating its baselines, that loads libtpu from `folder` alone."""
    # libtpu names itself in TPU_LIBRARY_PATH when a test of this process imports it; JAX would load that one
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    pytester.makepyfile("import jax.numpy as jnp\n\ndef test_one(devmem):\n    (jnp.ones(8) * 2).block_until_ready()\n")
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--devmem-device=sim:TPU-v5e",
        f"--devmem-compilers={folder}",
        "--devmem-mode=compact",
        "--devmem-update",
        "-W",
        "ignore::UserWarning",
    )


@pytest.mark.skipif(LIBTPU_IN_ENVIRONMENT, reason="libtpu is installed in this environment itself: no folder is loaded")
def test_a_damaged_libtpu_under_a_fine_manifest_keeps_the_cpu_sizes_class(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = folder_for(tmp_path / "compilers")
    (folder / "tpu" / "libtpu" / "__init__.py").unlink()  # libtpu/ gone, its dist-info and the manifest kept
    result = tpu_session_with(pytester, monkeypatch, folder)
    result.stdout.fnmatch_lines(["*not a TPU v5e's*libtpu 0.0.42.1 is damaged*__init__.py is missing*"])
    assert [p.name for p in (pytester.path / "baselines").iterdir()] == ["sim-TPU-v5e-cpu-sizes"]


@pytest.mark.skipif(LIBTPU_IN_ENVIRONMENT, reason="libtpu is installed in this environment itself: no folder is loaded")
def test_a_libtpu_that_cannot_start_under_a_fine_folder_stores_no_cpu_figures_as_a_tpus(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = folder_for(tmp_path / "compilers")  # every file pip listed is there: a libtpu that starts no compiler
    result = tpu_session_with(pytester, monkeypatch, folder)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*the target's compiler could not start, so JAX's executables kept the CPU compile's*"]
    )
    [stored] = [json.loads(path.read_text()) for path in (pytester.path / "baselines" / "sim-TPU-v5e").glob("*.json")]
    metrics = [entry["metrics"] for regimes in stored["records"].values() for entry in regimes.values()]
    assert metrics and all(figures["peak_bytes_in_use"] is None for figures in metrics)
