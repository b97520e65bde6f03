"""A tf.data input pipeline: map, shuffle, batch, prefetch, consumed like a training loop."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")


def test_input_pipeline() -> None:
    images = tf.random.uniform((512, 28, 28), maxval=255, dtype=tf.int32)
    labels = tf.range(512) % 10
    dataset = (
        tf.data.Dataset.from_tensor_slices((images, labels))
        .map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, tf.one_hot(y, 10)), num_parallel_calls=2)
        .shuffle(256, seed=0)
        .batch(64)
        .prefetch(2)
    )
    batches = 0
    for x, y in dataset:
        assert x.shape[1:] == (28, 28) and y.shape[1:] == (10,)
        batches += 1
    assert batches == 8
