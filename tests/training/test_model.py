import numpy as np
import pytest

from training.model import ARCHITECTURES, build_model


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_every_architecture_builds_offline_and_learns_a_fixed_batch(architecture):
    """Logits per class that depend on the image, and that a few Adam steps on one batch
    (dark images are class 0, bright ones class 1) fit: the model can learn at all."""
    import keras
    import tensorflow as tf

    model = build_model(architecture, 32, 2)
    rng = np.random.default_rng(0)
    images = np.concatenate([rng.uniform(0, 0.2, (8, 32, 32, 3)),
                             rng.uniform(0.8, 1, (8, 32, 32, 3))]).astype(np.float32)  # fmt: skip
    labels = np.array([0] * 8 + [1] * 8)
    out = model(images, training=False)
    assert tuple(out.shape) == (16, 2) and out.dtype.name == "float32"
    assert not np.array_equal(out[0], out[-1])  # the image reaches the logits
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.Adam(1e-3)
    before = float(loss_fn(labels, model(images, training=False)))
    for _ in range(15):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    assert float(loss_fn(labels, model(images, training=True))) < 0.5 * before


def test_unknown_architecture_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of small_cnn"):
        build_model("vgg_huge", 32, 3)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("batch_norm", ["sync", "local"])
def test_batch_norm_is_synchronised_only_when_asked(architecture, batch_norm):
    import keras

    model = build_model(architecture, 32, 3, batch_norm=batch_norm)
    batch_norms = [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.BatchNormalization)
    ]
    assert batch_norms
    assert all(layer.synchronized == (batch_norm == "sync") for layer in batch_norms)


def test_an_unknown_batch_norm_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of local, sync"):
        build_model("small_cnn", 32, 3, batch_norm="ghost")


# Two replicas on two logical CPUs of one process, each given its own half of a batch
# (`halves`, `inputs`); the scripts run in a subprocess (the logical devices must be set
# before TensorFlow initialises) and print one JSON line.
_TWO_REPLICAS_WITH = r"""
import json
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from training.model import average_moving_statistics, build_model, moving_statistics

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = build_model("small_cnn", 16, 3, batch_norm=BATCH_NORM)
rng = np.random.default_rng(0)
halves = [rng.normal(3 * i, 1 + i, HALF).astype("float32") for i in range(2)]
inputs = strategy.experimental_distribute_values_from_function(
    lambda ctx: tf.constant(halves[ctx.replica_id_in_sync_group])
)
"""


def _two_replicas(batch_norm: str, half_shape: tuple, script: str) -> dict:
    import json
    import subprocess
    import sys

    from bench.common import REPO

    preamble = _TWO_REPLICAS_WITH.replace("BATCH_NORM", repr(batch_norm))
    done = subprocess.run(
        [sys.executable, "-c", preamble.replace("HALF", repr(half_shape)) + script],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_PACKED_MOMENTS = r"""
bn = next(l for l in model._flatten_layers() if isinstance(l, keras.layers.BatchNormalization))
keras_moments = type(bn)._moments.__get__(bn)  # Keras' own synchronised moments

calls = []
original_all_reduce = tf.distribute.ReplicaContext.all_reduce
def counting_all_reduce(self, op, value, options=None):
    calls.append(1)
    return original_all_reduce(self, op, value, options)
tf.distribute.ReplicaContext.all_reduce = counting_all_reduce

def both(x):
    packed = bn._moments(x, None)
    n = len(calls)
    unpacked = keras_moments(x, None)
    return packed, unpacked, n

packed, unpacked, n = strategy.run(tf.function(both), (inputs,))
whole = np.concatenate(halves)
local = strategy.experimental_local_results
print(json.dumps({
    "calls_packed": int(strategy.experimental_local_results(n)[0]),
    "calls_total": len(calls),
    "packed": [[r.numpy().tolist() for r in local(t)] for t in packed],
    "unpacked": [[r.numpy().tolist() for r in local(t)] for t in unpacked],
    "whole": [whole.mean(axis=(0, 1, 2)).tolist(), whole.var(axis=(0, 1, 2)).tolist()],
}))
"""


@pytest.mark.slow
def test_packed_batch_norm_moments_are_global_and_take_one_all_reduce():
    """Two replicas with different inputs: each gets the moments of the whole batch,
    equal to Keras' own synchronised moments, from one all-reduce instead of three."""
    result = _two_replicas("sync", (4, 16, 16, 16), _PACKED_MOMENTS)
    # traced once per replica: 1 all-reduce each for packed, 3 each for Keras'
    assert result["calls_packed"] == 2
    assert result["calls_total"] == 2 * (1 + 3)
    for which in ("packed", "unpacked"):
        for statistic, expected in zip(result[which], result["whole"], strict=True):
            for replica in statistic:
                np.testing.assert_allclose(replica, expected, rtol=1e-4, atol=1e-5)


_AVERAGED_STATISTICS = r"""
statistics = moving_statistics(model)

@tf.function
def forward(x):
    strategy.run(lambda images: model(images, training=True), args=(x,))

@tf.function
def average():
    strategy.run(lambda: average_moving_statistics(statistics))

def replicas():
    return [
        [r.numpy().tolist() for r in strategy.experimental_local_results(v.value)]
        for v in statistics
    ]

forward(inputs)
before = replicas()
average()
print(json.dumps({"before": before, "after": replicas()}))
"""


@pytest.mark.slow
def test_local_batch_norm_statistics_differ_per_replica_until_averaged():
    """Local statistics: two replicas that saw different batches hold different moving
    statistics; one call of the averaging leaves both with their mean."""
    result = _two_replicas("local", (4, 16, 16, 3), _AVERAGED_STATISTICS)
    assert len(result["before"]) == 2 * 4  # mean and variance of the small CNN's 4 layers
    first_before = np.array(result["before"][0])  # the first layer's moving mean
    assert not np.allclose(first_before[0], first_before[1])
    for before, after in zip(result["before"], result["after"], strict=True):
        before, after = np.array(before), np.array(after)
        np.testing.assert_allclose(after[0], after[1], rtol=0, atol=0)
        np.testing.assert_allclose(after[0], before.mean(axis=0), rtol=1e-5, atol=1e-6)
