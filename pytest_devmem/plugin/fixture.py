"""The `devmem` fixture: a test's regime and a pool under it on the session's device."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import pytest

from ..model.device import Device
from ..model.pool.base import Pool
from ..model.regime import Regime


@dataclass
class DevmemFixture:
    """What the `devmem` fixture gives a test: its regime, its pool on the session's device."""

    regime: Regime  # prealloc where neither --devmem-mode nor the marker names one
    pool: Pool
    device: Device


@pytest.fixture
def devmem(request: pytest.FixtureRequest) -> Generator[DevmemFixture, None, None]:
    """The test's regime and a pool under it on the session's device; the pool is closed afterwards."""
    from .disabled import DisabledSession
    from .session import PLUGIN_NAME, DevmemSession

    session = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    if not isinstance(session, (DevmemSession, DisabledSession)):
        raise pytest.UsageError(
            "the devmem fixture needs the pytest-devmem plugin, which is disabled here (-p no:devmem?)"
        )
    fixture = session.make_fixture(request.node)
    try:
        yield fixture
    finally:
        fixture.pool.close()
