"""Allocating through the plugin's own pool: a training-loop pattern, under the session's regime and
under growth (which runs in a child process when the session's regime differs)."""

from __future__ import annotations

import pytest

MiB = 2**20


def training_steps(pool, layers: int = 8, steps: int = 4) -> None:
    weights = [pool.alloc(4 * MiB) for _ in range(layers)]
    for _ in range(steps):
        activations = [pool.alloc(6 * MiB + 1000 * i) for i in range(layers)]
        for handle in reversed(activations):  # backward frees activations in reverse
            pool.free(handle)
    for handle in weights:
        pool.free(handle)


def test_training_loop_in_pool(devmem) -> None:
    training_steps(devmem.pool)
    assert devmem.pool.stats()["bytes_in_use"] == 0


@pytest.mark.devmem(mode="growth", limit="256MiB")
def test_training_loop_under_growth(devmem) -> None:
    training_steps(devmem.pool)
    assert devmem.pool.stats()["num_regions"] >= 2
