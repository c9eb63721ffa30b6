"""Model architectures, all Keras 3, all built from scratch (`weights=None`: no downloads).

Every model takes float images in [0, 1] of shape [size, size, 3] and returns
logits; the last layer is float32 so mixed precision keeps a stable softmax.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from training.config import ARCHITECTURES, BATCH_NORM_MODES

HEAD = "logits"  # the classifier layer: what a warm start may re-initialise, what stays
# trainable while the backbone is frozen


def build_model(
    architecture: str, image_size: int, num_classes: int, *, batch_norm: str = "local"
) -> keras.Model:
    """`batch_norm`: "sync" makes BatchNorm use global-batch statistics under a
    distribution strategy; "local" leaves each replica its own batch's statistics (the
    trainer then averages the moving statistics with `average_moving_statistics`)."""
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"unknown architecture {architecture!r}; choose one of {', '.join(ARCHITECTURES)}"
        )
    if batch_norm not in BATCH_NORM_MODES:
        raise ValueError(f"batch_norm {batch_norm!r}: choose one of {', '.join(BATCH_NORM_MODES)}")
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
    logits = keras.layers.Dense(num_classes, dtype="float32", name=HEAD)(features)
    model = keras.Model(inputs, logits, name=architecture)
    if batch_norm == "sync":
        synchronize_batch_norm(model)
    return model


def freeze_backbone(model: keras.Model, frozen: bool) -> None:
    """Freeze (or thaw) every layer but the classifier head: the first phase of the
    transfer recipe (`--freeze-epochs`). A frozen BatchNormalization also runs in
    inference mode (Keras 3 normalises with batch statistics only when the layer is
    trainable), so the pretrained statistics are kept, not re-estimated on a few batches.
    Compiled steps read `trainable_variables` when traced: trace new ones after a change."""
    for layer in model.layers:
        if layer.name != HEAD and layer.weights:
            layer.trainable = not frozen


def moving_statistics(model: keras.Model) -> list:
    """Every BatchNormalization layer's moving mean and variance, in layer order."""
    return [
        variable
        for layer in model._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, keras.layers.BatchNormalization)
        for variable in (layer.moving_mean, layer.moving_variance)
    ]


def average_moving_statistics(statistics: list) -> None:
    """Set each replica's BatchNorm moving statistics to their mean over the replicas, in
    one all-reduce; called in replica context.

    With local batch statistics each replica's moving mean and variance follow its own
    batches (Keras 3 keeps them replica-local) and drift apart; averaging them every
    few steps keeps the replicas' weights identical wherever they are read (checkpoints,
    evaluation, export), at one small collective per call instead of two per layer per
    step. timm's `distribute_bn` does the same for PyTorch.
    """
    replica = tf.distribute.get_replica_context()
    if not statistics or replica is None or replica.num_replicas_in_sync == 1:
        return
    flat = tf.concat([tf.reshape(variable.value, [-1]) for variable in statistics], axis=0)
    mean = replica.all_reduce(tf.distribute.ReduceOp.MEAN, flat)
    sizes = [int(np.prod(variable.shape)) for variable in statistics]
    for variable, part in zip(statistics, tf.split(mean, sizes), strict=True):
        variable.assign(tf.reshape(part, variable.shape))


def synchronize_batch_norm(model: keras.Model) -> None:
    """Make every BatchNormalization use global-batch statistics across replicas,
    exchanged in one all-reduce per layer (`--batch-norm sync`).

    Keras 3 keeps BN moving statistics as replica-local variables (aggregation
    NONE): with synchronised moments every replica computes the same moving
    mean/variance (with local ones they drift apart until averaged). Keras' own
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
