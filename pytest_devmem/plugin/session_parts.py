"""What a session decides once, before any test, and each of its parts reads: pytest's config, the
settings, the device, the baseline store and the compile target (`DevmemSession` builds them;
`Checks` and `SessionResults` are made of them)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ..gate.baseline import BaselineStore
from ..model.device import Device
from .compile_target import CompileTarget
from .settings import Settings


@dataclass(eq=False)
class SessionParts:
    config: pytest.Config
    settings: Settings
    device: Device
    store: BaselineStore
    compile_target: CompileTarget
