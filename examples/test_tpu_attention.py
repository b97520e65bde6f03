"""An attention training step, sharded over the suite's four devices: what a TPU v5e 2x2 slice would
hold of it, from a CPU-only CI.

Under the main job (`--devmem-device=sim:16GiB`) it is sized by the CPU compile like every example.
Run it under a TPU preset to see a TPU's figures: each of the four CPU devices stands for one chip of
a v5e 2x2, every executable is compiled for that slice by libtpu (the `tpu-compile` extra), and every
array takes its tiled size:

    pytest examples/test_tpu_attention.py --devmem-device=sim:TPU-v5e --devmem-mode=compact

On a CPU the attention's scores are fused away (no temporary); the v5e compile keeps them, 128 MiB
per chip, and the record says `sized_for: TPU-v5e`. See docs/tpu.md.
"""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
np = pytest.importorskip("numpy")
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402


def attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(q.shape[-1])
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


@jax.jit
def train_step(w: jax.Array, x: jax.Array) -> jax.Array:
    def loss(w: jax.Array) -> jax.Array:
        q = jnp.einsum("bhsd,de->bhse", x, w)
        return jnp.mean(attention(q, x, x) ** 2)

    return w - 0.1 * jax.grad(loss)(w)


def test_sharded_attention_train_step() -> None:
    devices = jax.devices()
    if len(devices) != 4:
        pytest.skip("the example suite runs JAX on four CPU devices (examples/conftest.py)")
    batch = NamedSharding(Mesh(np.array(devices), ("batch",)), PartitionSpec("batch"))
    x = jax.device_put(jnp.ones((8, 16, 1024, 64), jnp.float32), batch)  # 2 sequences of 1024 tokens per chip
    w = jnp.eye(64)
    for _ in range(2):
        w = train_step(w, x)
    assert bool(jnp.all(jnp.isfinite(w)))
