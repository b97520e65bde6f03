"""What the `devmem` fixture gives a test: its regime and a pool under it on the session's device (the
fixture itself is the plugin's, in `plugin/__init__.py`, beside the session objects that make it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..model.device import Device
from ..model.pool.base import Pool
from ..model.regime import Regime


@dataclass
class DevmemFixture:
    """What the `devmem` fixture gives a test: its regime, its pool on the session's device."""

    regime: Regime  # prealloc where neither --devmem-mode nor the marker names one
    pool: Pool
    device: Device
