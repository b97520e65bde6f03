"""Long-lived small state interleaved with large temporaries, the classic way to fragment a pool: each
step makes a large activation (16 MiB, 20 MiB, ...) that lives until the loop ends, and keeps a small
summary (256 KiB) for good. Once the activations go, each summary sits between two holes: the pool
has the bytes, but not the block. The marker runs the test in a small pool (5% of the device: 819 MiB
of the simulated 16 GiB) and bounds how fragmented it may get; the report names the summaries that
pin the holes."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy


@pytest.mark.devmem(fraction=0.05, max_fragmentation=0.5)
def test_cached_summaries_pin_the_holes_of_freed_activations() -> None:
    summaries, activations = [], []
    for step in range(8):
        activations.append(jnp.full(((16 + 4 * step) * 2**18,), step, dtype=jnp.float32))
        summaries.append(jnp.full((2**16,), step, dtype=jnp.float32))
    del activations
    assert [int(summary[0]) for summary in summaries] == list(range(8))
