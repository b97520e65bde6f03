"""An out-of-memory message never shows the free memory as the request's own figure: where rounding to
two decimals hides a shortfall, the bytes missing are stated."""

from __future__ import annotations

from pytest_devmem.errors import OutOfMemoryError
from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.explain import oom_message
from pytest_devmem.model.pool import BFCPool, Policy
from pytest_devmem.units import GiB, format_short_of


def test_a_256_byte_shortfall_hidden_by_rounding_is_shown_in_bytes() -> None:
    oom = {
        "kind": "fragmentation",
        "allocator": "jax",
        "device": "gpu:0",
        "requested": 2 * GiB,
        "rounded": 2 * GiB,
        "in_use": 256,
        "pool_bytes": 2 * GiB + 256 + 2 * GiB - 256,
        "largest_free_block": 2 * GiB - 256,
        "limit": 6 * GiB,
        "fragmentation": 0.5,
        "capacity": 8 * GiB,
        "device_in_use": 256,
        "device_free": 2 * GiB,
    }
    text = oom_message(oom, None, "prealloc", "sim:8GiB")
    assert "largest free block 2.00 GiB (256 bytes short of the 2147483648 needed)" in text
    assert "4.00 GiB of it free," in text  # enough bytes free: nothing to add


def test_the_pools_own_error_states_the_gap() -> None:
    pool = BFCPool(SimulatedDevice(4 * GiB), Policy.of("fraction", 0.5))  # a 2 GiB pool
    pool.alloc(256)
    try:
        pool.alloc(2 * GiB)
    except OutOfMemoryError as error:
        assert "2.00 GiB (256 bytes short of the 2147483648 needed) of it free" in str(error)
        assert "largest free block 2.00 GiB (256 bytes short of the 2147483648 needed)" in str(error)
    else:
        raise AssertionError("2 GiB fitted in a 2 GiB pool holding 256 B")


def test_figures_that_differ_visibly_are_left_as_they_are() -> None:
    assert format_short_of(GiB, 2 * GiB) == "1.00 GiB"
    assert format_short_of(2 * GiB, 2 * GiB) == "2.00 GiB"
    assert format_short_of(100, 200) == "100 B"
