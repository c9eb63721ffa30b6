import numpy as np
import pytest

from training.model import ARCHITECTURES, build_model


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_every_architecture_builds_offline_and_returns_logits(architecture):
    model = build_model(architecture, 32, 5)
    out = model(np.zeros((2, 32, 32, 3), np.float32), training=False)
    assert tuple(out.shape) == (2, 5)
    assert out.dtype.name == "float32"


def test_unknown_architecture_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of small_cnn"):
        build_model("vgg_huge", 32, 3)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_batch_norm_statistics_are_synchronised_across_replicas(architecture):
    import keras

    model = build_model(architecture, 32, 3)
    batch_norms = [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.BatchNormalization)
    ]
    assert batch_norms and all(layer.synchronized for layer in batch_norms)


_TWO_REPLICAS = r"""
import json
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from training.model import build_model

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = build_model("small_cnn", 16, 3)
bn = next(l for l in model._flatten_layers() if isinstance(l, keras.layers.BatchNormalization))
keras_moments = type(bn)._moments.__get__(bn)  # Keras' own synchronised moments

calls = []
original_all_reduce = tf.distribute.ReplicaContext.all_reduce
def counting_all_reduce(self, op, value, options=None):
    calls.append(1)
    return original_all_reduce(self, op, value, options)
tf.distribute.ReplicaContext.all_reduce = counting_all_reduce

rng = np.random.default_rng(0)
halves = [rng.normal(i, 1 + i, (4, 16, 16, 16)).astype("float32") for i in range(2)]
inputs = strategy.experimental_distribute_values_from_function(
    lambda ctx: tf.constant(halves[ctx.replica_id_in_sync_group])
)

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


def test_packed_batch_norm_moments_are_global_and_take_one_all_reduce():
    """Two replicas with different inputs: each gets the moments of the whole batch,
    equal to Keras' own synchronised moments, from one all-reduce instead of three."""
    import json
    import subprocess
    import sys

    from bench.common import REPO

    done = subprocess.run(
        [sys.executable, "-c", _TWO_REPLICAS], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # traced once per replica: 1 all-reduce each for packed, 3 each for Keras'
    assert result["calls_packed"] == 2
    assert result["calls_total"] == 2 * (1 + 3)
    for which in ("packed", "unpacked"):
        for statistic, expected in zip(result[which], result["whole"], strict=True):
            for replica in statistic:
                np.testing.assert_allclose(replica, expected, rtol=1e-4, atol=1e-5)
