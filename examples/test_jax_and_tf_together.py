"""JAX and TensorFlow in one test, as in a pipeline that preprocesses with tf.data and trains with JAX.
The marker makes pytest-devmem check that both fit on the device under their configured regimes."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")


@pytest.mark.devmem(frameworks=("jax", "tf"))
def test_tf_input_pipeline_feeds_a_jax_step() -> None:
    images = tf.random.uniform((4096, 1024), seed=0)  # 16 MiB held by TensorFlow
    batch = next(iter(tf.data.Dataset.from_tensor_slices(images).batch(1024)))
    weights = jax.numpy.ones((1024, 512))
    activations = jax.numpy.tanh(jax.numpy.asarray(batch.numpy()) @ weights).block_until_ready()
    assert activations.shape == (1024, 512)
