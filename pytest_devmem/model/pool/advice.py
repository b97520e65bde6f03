"""What to change when an allocation fails: a pure function of the policy and the OOM figures."""

from __future__ import annotations

import math

from ...errors import OutOfMemoryFigures
from ...units import format_size
from .policy import Mode, Policy

FRACTION_VARIABLE = "XLA_CLIENT_MEM_FRACTION"
"""The fraction variable jaxlib 0.10 reads (it still reads the deprecated XLA_PYTHON_CLIENT_MEM_FRACTION,
but refuses both at once)."""


def suggest_fix(policy: Policy, f: OutOfMemoryFigures) -> str:
    """One actionable sentence for the failure these figures describe.

    Order matters: a request that no device of this size could hold needs a smaller workload;
    a pool with enough free bytes but no block big enough is fragmented; otherwise the regime's
    limit or another tenant of the device is in the way.
    """
    needed = f.bytes_in_use + f.rounded
    held_by_others = max(0, f.device_capacity - f.device_free - f.pool_bytes)
    if needed > f.device_capacity:
        return (
            f"the live data would be {format_size(needed)}, more than the whole device ({format_size(f.device_capacity)}): "
            "reduce the batch or model size, free buffers earlier, or use a larger device"
        )
    if f.pool_free >= f.rounded:
        return (
            f"the pool has {format_size(f.pool_free)} free but no block of {format_size(f.rounded)} "
            "(fragmentation): allocating long-lived buffers first, another mode ('ondemand', 'growth') or a "
            "defragmenting allocator ('compact') may help; pytest-devmem replays the test's trace to say which fits"
        )
    if needed > f.device_capacity - held_by_others:
        return (
            f"other users of this device hold {format_size(held_by_others)}, leaving too little: lower their share "
            f"({FRACTION_VARIABLE}, XLA_PYTHON_CLIENT_PREALLOCATE=false, TF_FORCE_GPU_ALLOW_GROWTH=true) "
            "or give each its own GPU (CUDA_VISIBLE_DEVICES)"
        )
    fraction = min(1.0, math.ceil(needed / f.device_capacity * 100) / 100)
    if policy.mode is Mode.ONDEMAND:
        return f"raise the limit to at least fraction={fraction:.2f} of the device"
    # growth is capped at the same fraction (gpu_helpers.cc), so it is no way round the limit; a
    # fragmented pool may need more than this bound, which only a replay of the test can say
    return (
        f"raise the fraction to at least {fraction:.2f}: {FRACTION_VARIABLE}={fraction:.2f} "
        f"(marker devmem(fraction={fraction:.2f}) or --devmem-fraction={fraction:.2f})"
        + (
            f"; with {format_size(f.pool_free)} of the pool free but split, it may need more: pytest-devmem replays the test's trace to say what fits"
            if f.pool_free > f.largest_free_block
            else ""
        )
    )
