from __future__ import annotations

import gc
import itertools
import os
import sys
from typing import Any

import pytest
from installed_libraries import keep_installed_libraries_imported

# the one module of the plugin's that its inner runs import lazily: imported here, it outlives
# pytester's restores, and so does its cached machine id (each report's provenance)
from pytest_devmem import provenance  # noqa: F401
from pytest_devmem.capture.jax import compilers
from pytest_devmem.hardware.devices import cuda_device_count

pytest_plugins = ["pytester"]

# Bytecode caches on for this suite and every process it starts (pytester's subprocesses, the plugin's
# children, the benchmarks' sessions): where PYTHONDONTWRITEBYTECODE is set, as some CI images set it,
# each of those processes would compile, and rewrite the asserts of, the plugin's modules from source
# again (measured in a fresh clone: tests/plugin/test_plugin_isolation.py took 28-29 s of CPU with it
# set, 15-17 s without). Git ignores __pycache__.
# The test modules this process imports from here on write theirs too.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# This suite sizes for GPUs and TPUs in its own process (GpuSizer and TpuSizer, in-process pytester
# runs under a GPU or TPU preset): their compilers go on its sys.path from their folder (`devmem
# compilers install`) before anything here imports JAX, as a sizing session's first hook puts them
# (plugin/environment.py); where they are missing, the tests that need them skip, naming the command.
for _platform in compilers.PLATFORMS:
    compilers.load(_platform)
# pytester's runs get a HOME of their own (no user configuration), where the default folder (in
# ~/.cache) is not: they are told where it is, as a user would name one (DEVMEM_COMPILERS)
for _folder in {folder.parent for folder in compilers.loaded().values()}:
    os.environ.setdefault(compilers.ENVIRONMENT_VARIABLE, str(_folder))

# a library first imported inside a pytester run stays imported: jaxlib and TensorFlow abort the
# process when imported twice (tests/installed_libraries.py, docs/known-issues.md)
keep_installed_libraries_imported()


_pytester_tests = itertools.count()

FULL_COLLECTION_EVERY = 50
"""Before one test in this many that use pytester, the whole process is collected before it is
frozen (`_lean_inner_runs`): what an inner run left as cyclic garbage and a later freeze kept is
freed then, so this process's memory stays bounded (a full collection takes half a second once
TensorFlow is loaded)."""


@pytest.fixture(autouse=True)
def _lean_inner_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs (pytester) skip hypothesis's plugin, which costs ~0.5 s a run to import,
    never take this process's xdist worker variables for their own, and find what this process held
    before them frozen."""
    if "pytester" in request.fixturenames:
        # The plugin's first measured test of a session starts with a full collection (each test's
        # collector counters start from zero), which scans all this process holds: JAX, TensorFlow and
        # what every earlier test left, up to half a second, in each of some 600 in-process runs
        # (127 s of a worker's 460 s, sampled with py-spy). What this process holds is frozen before
        # each run, as a long-lived host would freeze it (gc.freeze's documented use), so that
        # collection scans the run's own objects; the plugin thaws everything when its session ends.
        if next(_pytester_tests) % FULL_COLLECTION_EVERY == 0:
            gc.collect()
        pytester: pytest.Pytester = request.getfixturevalue("pytester")  # it clears PYTEST_ADDOPTS when it starts
        inline_run = pytester.inline_run

        def frozen_inline_run(*args: Any, **kwargs: Any) -> pytest.HookRecorder:
            gc.freeze()
            return inline_run(*args, **kwargs)

        monkeypatch.setattr(pytester, "inline_run", frozen_inline_run)
        monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
        # when this suite itself runs under xdist, inner runs are not workers of it
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
        # this suite runs with oneDNN on and off (TF_ENABLE_ONEDNN_OPTS, read once by the TensorFlow
        # already loaded here); inner runs see no user setting, so their device class is the plain one
        # (the -onednn class a user's setting gives is tested on its own)
        monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)


@pytest.fixture(scope="session")
def jax_loaded() -> object:
    """JAX imported before any pytester snapshot of sys.modules: pytester drops modules imported
    during a test, and importing jaxlib twice in one process aborts it."""
    return pytest.importorskip("jax")


@pytest.fixture(scope="session")
def tensorflow_loaded() -> object:
    """TensorFlow imported once for the session, for the same reason as `jax_loaded`."""
    return pytest.importorskip("tensorflow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the files with tests that load TensorFlow into this process last; skip GPU-marked tests, with the
    reason, where the CUDA driver sees no GPU, TPU-marked ones where JAX's check of the PCI devices
    finds no TPU chip."""
    # Once imported, TensorFlow stays (tests/installed_libraries.py) and quadruples the objects the
    # garbage collector scans: each full collection of this process goes from ~0.05 s to ~0.2 s, and
    # the plugin runs one at the start of each module's first measured test, in every pytester run.
    # Whole files move, so that the order within each file stays as written; the sort is stable.
    loading = {item.path for item in items if "tensorflow_loaded" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: item.path in loading)
    if any(item.get_closest_marker("tpu") for item in items):
        from pytest_devmem.capture.jax.tpu_plugin import tpu_present

        if not tpu_present():
            skip_tpu = pytest.mark.skip(reason="needs a TPU (libtpu and its chips); none found on this machine")
            for item in items:
                if item.get_closest_marker("tpu"):
                    item.add_marker(skip_tpu)
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and its driver (libcuda); none found on this machine")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pandas_loaded() -> object:
    """pandas (and numpy under it) imported once for the session, for the same reason as `jax_loaded`."""
    return pytest.importorskip("pandas")


@pytest.fixture(scope="session")
def matplotlib_loaded() -> object:
    """matplotlib imported once for the session, for the same reason as `jax_loaded`."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    return matplotlib
