"""Hooks a project may implement in its conftest.py (or a plugin) to shape what pytest-devmem
records, as pytest-benchmark's `pytest_benchmark_update_machine_info` does for its runs. Registered
with `config.pluginmanager.add_hookspecs` when the plugin loads; each is optional."""

from __future__ import annotations

import pytest


@pytest.hookspec
def pytest_devmem_update_run_info(config: pytest.Config, run_info: dict[str, object]) -> None:
    """Add to the run's metadata: what you put in `run_info` (plain JSON values) is stored in the
    report's session as `run_info`, beside the commit, machine and versions, and travels into
    autosaved reports and merged shard reports. Called once, on the process that writes the report
    (the pytest-xdist controller), after the tests ran. A value JSON has no form for is stored as
    its text (NaN and the infinities as "NaN", "Infinity", "-Infinity"); a hook that raises, or
    stores a cycle, a key that is not text or a number, or an integer too long to write, is named in
    the summary and fails the session, and every measurement is written all the same.

    Example, in conftest.py::

        def pytest_devmem_update_run_info(config, run_info):
            run_info["runner"] = os.environ.get("RUNNER_NAME", "local")
            run_info["dataset"] = "imagenet-2012-v3"
    """
