"""`--devmem-disable`: the session measures nothing, as pytest-benchmark's `--benchmark-disable`
runs a benchmark once without timing it. The marker stays registered and checked (a bad one still
errors its test), the `devmem` fixture still gives a pool, unmeasured, on a simulated device under
the test's regime, and nothing is compared or written; the environment the frameworks read is left
as the user set it."""

from __future__ import annotations

import pytest

from ..model.device import open_simulated
from ..model.pool import make_pool
from .items import mark_key, prepare_item, regime_of
from .settings import DevmemFixture


class DisabledSession:
    """Registered in place of the measuring session under --devmem-disable."""

    def __init__(self) -> None:
        self.device = open_simulated("sim")  # a pool needs a device; no driver is asked

    def pytest_report_header(self, config: pytest.Config) -> str:
        return "devmem: disabled (--devmem-disable): no test is measured, compared or recorded"

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            prepare_item(item, None)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        __tracebackhide__ = True
        spec = item.stash.get(mark_key, None)
        if isinstance(spec, str):
            raise pytest.UsageError(spec)

    def make_fixture(self, item: pytest.Item) -> DevmemFixture:
        regime = regime_of(item)
        return DevmemFixture(regime, make_pool(self.device, regime.policy), self.device)
