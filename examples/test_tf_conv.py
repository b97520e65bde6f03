"""A TensorFlow convolutional training step with GradientTape."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")


def make_model() -> tf.keras.Model:
    return tf.keras.Sequential(
        [
            tf.keras.layers.Input((32, 32, 3)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, activation="relu"),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(10),
        ]
    )


def test_conv_train_step() -> None:
    tf.random.set_seed(0)
    model = make_model()
    optimizer = tf.keras.optimizers.SGD(0.01)
    images = tf.random.normal((64, 32, 32, 3))
    labels = tf.range(64) % 10
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    first = step()
    for _ in range(3):
        last = step()
    assert float(last) < float(first)
