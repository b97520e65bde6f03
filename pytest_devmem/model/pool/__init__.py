"""Device-memory pools under the five regimes (prealloc, fraction, ondemand, growth, compact), with statistics
and traces. Nothing here imports pytest."""

from __future__ import annotations

from ..device import Device
from ..trace import Trace, TraceEvent
from .base import STAT_KEYS, Pool
from .bfc import BFCPool, rounded_bytes
from .chunk_table import bin_for_size
from .compacting import CompactingPool
from .ondemand import OnDemandPool
from .policy import DEFAULT_PREALLOC_FRACTION, Mode, Policy, parse_fraction, parse_mode
from .tracing import ReplayResult, TracingPool, replay

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


def make_pool(device: Device, policy: Policy, *, release_free_regions: bool = False, dump_on_oom: bool = False) -> Pool:
    """The pool that implements `policy` on `device`."""
    if policy.mode is Mode.ONDEMAND:
        return OnDemandPool(device, policy, dump_on_oom=dump_on_oom)
    if policy.mode is Mode.COMPACT:
        return CompactingPool(device, policy, release_free_regions=release_free_regions, dump_on_oom=dump_on_oom)
    return BFCPool(device, policy, release_free_regions=release_free_regions, dump_on_oom=dump_on_oom)
