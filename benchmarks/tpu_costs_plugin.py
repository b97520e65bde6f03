"""A pytest plugin the TPU benchmark loads into each run it times (`-p benchmarks.tpu_costs_plugin`):
at the session's end it writes the TPU sizer's measured costs (`SizingCosts`) as JSON to the file
named by DEVMEM_BENCH_TPU_COSTS. Nothing where that is unset or no TPU sizer ran."""

from __future__ import annotations

import json
import os

import pytest

COSTS_FILE = "DEVMEM_BENCH_TPU_COSTS"


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    path = os.environ.get(COSTS_FILE)
    session = config.pluginmanager.get_plugin("devmem-manager")
    measurement = getattr(session, "measurement", None)
    sizer = getattr(getattr(measurement, "jax_capture", None), "sizer", None)
    if not path or sizer is None or not hasattr(sizer, "sizing_costs"):
        return
    with open(path, "w", encoding="utf-8") as out:
        json.dump(sizer.sizing_costs().to_json(), out)
