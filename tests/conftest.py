from __future__ import annotations

import pytest

from pytest_devmem.device import cuda_device_count

pytest_plugins = ["pytester"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip GPU-marked tests, with the reason, where the CUDA driver sees no GPU."""
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and its driver (libcuda); none found on this machine")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
