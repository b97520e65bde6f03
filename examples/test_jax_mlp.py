"""A JAX MLP training step (forward, backward, SGD update), at two batch sizes."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy


def init_mlp(key: jax.Array, sizes: list[int]) -> list[tuple[jax.Array, jax.Array]]:
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (fan_in, fan_out)) / jnp.sqrt(fan_in), jnp.zeros(fan_out)))
    return params


def loss(params: list[tuple[jax.Array, jax.Array]], x: jax.Array, y: jax.Array) -> jax.Array:
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    logits = x @ w + b
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


@jax.jit
def train_step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)]


@pytest.mark.parametrize("batch", [256, 1024])
def test_mlp_train_step(batch: int) -> None:
    key = jax.random.PRNGKey(0)
    params = init_mlp(key, [784, 512, 512, 10])
    x = jax.random.normal(key, (batch, 784))
    y = jax.nn.one_hot(jnp.arange(batch) % 10, 10)
    before = loss(params, x, y)
    for _ in range(3):
        params = train_step(params, x, y)
    assert loss(params, x, y) < before
