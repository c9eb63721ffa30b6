"""The trainer's remote-shard code path, offline.

TensorFlow's gs:// filesystem cannot be pointed at a GCS emulator, so the path
handling that gs:// shards need (no os.path, no local listing, every read
through tf.io.gfile and TFRecordDataset) is exercised on TensorFlow's
in-process `ram://` filesystem: another non-local scheme served by the same
gfile layer, where a stray `open()`/`os.*` on a shard path fails as it would on
gs://. Outputs stay local: ram:// cannot hold a SavedModel (its listing splits
`assets.extra` into `assets` + `.extra`, and folder renames drop the files).
"""

import json
import posixpath

import pytest
import tensorflow as tf

from training import train
from training.evaluate import evaluate_saved_model
from training.shards import ShardSet

pytestmark = pytest.mark.slow  # a training run


def copy_tree(source: str, target: str) -> None:
    for directory, _, files in tf.io.gfile.walk(source):
        for name in files:
            relative = posixpath.relpath(posixpath.join(directory, name), source)
            tf.io.gfile.makedirs(posixpath.dirname(posixpath.join(target, relative)))
            tf.io.gfile.copy(posixpath.join(directory, name), posixpath.join(target, relative))


def test_train_and_evaluate_from_shards_on_a_non_local_filesystem(trainable_shards, tmp_path):
    shards, output = "ram://bucket/shards", str(tmp_path / "train")
    copy_tree(trainable_shards, shards)
    assert ShardSet.open(shards).files("train")[0].startswith("ram://bucket/shards/train-")

    code = train.main(
        ["--data", shards, "--output", output, "--epochs", "1", "--per-replica-batch-size", "32"]
    )
    assert code == 0
    with tf.io.gfile.GFile(posixpath.join(output, "metrics.json")) as handle:
        metrics = json.load(handle)
    assert len(metrics["epochs"]) == 1
    assert tf.io.gfile.glob(posixpath.join(output, "checkpoints", "ckpt-*.index"))
    evaluation = evaluate_saved_model(posixpath.join(output, "model"), shards)
    assert evaluation["num_examples"] == ShardSet.open(shards).num_records(evaluation["split"])
