"""Device-memory pools under the five regimes (prealloc, fraction, ondemand, growth, compact), with statistics
and traces. Nothing here imports pytest."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..device import Device
from .base import STAT_KEYS, Pool
from .bfc import BFCPool, bin_for_size, rounded_bytes
from .ondemand import OnDemandPool
from .policy import DEFAULT_PREALLOC_FRACTION, Mode, Policy, parse_fraction, parse_mode

__all__ = [
    "STAT_KEYS",
    "BFCPool",
    "DEFAULT_PREALLOC_FRACTION",
    "Mode",
    "OnDemandPool",
    "Policy",
    "Pool",
    "ReplayResult",
    "Trace",
    "TraceEvent",
    "TracingPool",
    "bin_for_size",
    "make_pool",
    "parse_fraction",
    "parse_mode",
    "replay",
    "rounded_bytes",
]


if TYPE_CHECKING:
    from ..trace import Trace, TraceEvent
    from .tracing import ReplayResult, TracingPool, replay

_TRACE_NAMES = {"Trace", "TraceEvent"}
_TRACING_NAMES = {"TracingPool", "ReplayResult", "replay"}


def __getattr__(name: str) -> object:
    """Trace classes, imported on first use: the plugin's start-up does not need csv and friends."""
    if name in _TRACE_NAMES:
        from .. import trace

        return getattr(trace, name)
    if name in _TRACING_NAMES:
        from . import tracing

        return getattr(tracing, name)
    raise AttributeError(f"module 'pytest_devmem.model.pool' has no attribute {name!r}")


def make_pool(device: Device, policy: Policy, *, release_free_regions: bool = False, dump_on_oom: bool = False) -> Pool:
    """The pool that implements `policy` on `device`."""
    if policy.mode is Mode.ONDEMAND:
        return OnDemandPool(device, policy, dump_on_oom=dump_on_oom)
    if policy.mode is Mode.COMPACT:
        from .compacting import CompactingPool

        return CompactingPool(device, policy, release_free_regions=release_free_regions, dump_on_oom=dump_on_oom)
    return BFCPool(device, policy, release_free_regions=release_free_regions, dump_on_oom=dump_on_oom)
