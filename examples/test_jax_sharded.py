"""A data-parallel training step over four devices: the batch is sharded along its rows (4 MiB on
each device), the weights are replicated (4 MiB on every device), and each device runs its part of
the step. pytest-devmem records every device's memory and gates each of them."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402


@jax.jit
def train_step(weights: jax.Array, batch: jax.Array) -> jax.Array:
    def loss(w: jax.Array) -> jax.Array:
        return jnp.mean(jnp.tanh(batch @ w) ** 2)

    return weights - 0.1 * jax.grad(loss)(weights)


def test_sharded_train_step() -> None:
    devices = jax.devices()
    if len(devices) < 4:
        pytest.skip(
            "needs 4 devices: XLA_FLAGS=--xla_force_host_platform_device_count=4 before JAX starts (examples/conftest.py sets it)"
        )
    mesh = Mesh(devices[:4], ("data",))
    batch = jax.device_put(jnp.ones((4096, 1024)), NamedSharding(mesh, PartitionSpec("data", None)))
    weights = jax.device_put(jnp.full((1024, 1024), 0.01), NamedSharding(mesh, PartitionSpec()))
    for _ in range(3):
        weights = train_step(weights, batch)
    assert weights.sharding.is_fully_replicated and float(weights[0, 0]) < 0.01
