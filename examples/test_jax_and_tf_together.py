"""JAX and TensorFlow in one test, as in a pipeline that preprocesses with tf.data and trains with JAX.
The marker makes pytest-devmem simulate both on the device, started in the order they allocated:
TensorFlow first here, which is the classic way to run JAX out of memory."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")
jnp = jax.numpy


@pytest.mark.devmem(frameworks=("jax", "tf"))
def test_tf_input_pipeline_feeds_a_jax_step() -> None:
    images = tf.random.uniform((4096, 1024), seed=0)  # TensorFlow allocates first: 16 MiB
    batch = next(iter(tf.data.Dataset.from_tensor_slices(images).batch(1024)))
    inputs = jnp.asarray(batch.numpy())  # then JAX: the batch, 4 MiB
    activations = jnp.full((320, 2**20), inputs.mean())  # and 1.25 GiB of activations
    assert activations.block_until_ready().shape == (320, 2**20)
