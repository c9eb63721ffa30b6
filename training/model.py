"""Model architectures, all Keras 3, all built from scratch (`weights=None`: no downloads).

Every model takes float images in [0, 1] of shape [size, size, 3] and returns
logits; the last layer is float32 so mixed precision keeps a stable softmax.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from training.config import ARCHITECTURES


def build_model(architecture: str, image_size: int, num_classes: int) -> keras.Model:
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"unknown architecture {architecture!r}; choose one of {', '.join(ARCHITECTURES)}"
        )
    inputs = keras.Input(shape=(image_size, image_size, 3), name="image")
    if architecture == "small_cnn":
        features = _small_cnn(inputs)
    elif architecture == "mobilenet_v3_small":
        scaled = keras.layers.Rescaling(2.0, offset=-1.0)(inputs)  # the net expects [-1, 1]
        backbone = keras.applications.MobileNetV3Small(
            input_shape=(image_size, image_size, 3),
            include_top=False,
            weights=None,
            include_preprocessing=False,
            pooling="avg",
        )
        features = backbone(scaled)
    else:
        backbone = keras.applications.ResNet50(
            input_shape=(image_size, image_size, 3), include_top=False, weights=None, pooling="avg"
        )
        features = backbone(inputs)
    features = keras.layers.Dropout(0.2)(features)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(features)
    model = keras.Model(inputs, logits, name=architecture)
    synchronize_batch_norm(model)
    return model


def synchronize_batch_norm(model: keras.Model) -> None:
    """Make every BatchNormalization use global-batch statistics across replicas,
    exchanged in one all-reduce per layer.

    Keras 3 keeps BN moving statistics as replica-local variables (aggregation
    NONE): without synchronised moments each worker's moving mean/variance drift
    apart and the workers end training with different weights. Keras' own
    synchronised moments cost three all-reduces per layer forward (sum, sum of
    squares, count) and two backward; on CPU each collective is a round trip
    whose latency, not bytes, dominates, so they are packed into one.

    The packed moments replace the method on each layer instance rather than the
    layer class: the applications (ResNet50, MobileNetV3) build their own BN
    layers, and the instances keep their class, config and weights, so saving
    and serving see ordinary BatchNormalization layers.
    """
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.synchronized = True
            layer._moments = _packed_moments(layer, layer._moments)


def _packed_moments(layer: keras.layers.BatchNormalization, keras_moments):
    def moments(inputs, mask):
        replica = tf.distribute.get_replica_context()
        if mask is not None or replica is None:
            return keras_moments(inputs, mask)
        axes = list(layer._reduction_axes)
        channels = inputs.shape[layer.axis]  # static: BN needs a known channel count
        count = tf.cast(tf.reduce_prod(tf.shape(inputs)) // channels, inputs.dtype)
        local = tf.concat(
            [
                tf.reshape(tf.reduce_sum(inputs, axis=axes), [-1]),
                tf.reshape(tf.reduce_sum(tf.square(inputs), axis=axes), [-1]),
                tf.reshape(count, [1]),
            ],
            axis=0,
        )
        total = replica.all_reduce(tf.distribute.ReduceOp.SUM, local)
        total_sum, total_squares, total_count = tf.split(total, [channels, channels, 1])
        mean = tf.math.divide_no_nan(total_sum, total_count)
        # var = E(x^2) - E(x)^2, as Keras' synchronised moments compute it
        variance = tf.maximum(tf.math.divide_no_nan(total_squares, total_count) - mean**2, 0.0)
        return mean, variance

    return moments


def _small_cnn(inputs):
    """Four conv blocks, ~100k parameters: fast enough to train on two CPU cores."""
    x = inputs
    for filters in (16, 32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        # momentum 0.9: moving statistics settle within the few hundred steps of a CPU run
        x = keras.layers.BatchNormalization(momentum=0.9)(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    return keras.layers.GlobalAveragePooling2D()(x)
