import json
import shutil

import pytest
import tensorflow as tf

from training import features
from training.config import DataConfig
from training.data import build_dataset, measure_throughput, shard_files
from training.shards import ShardError, ShardSet


def test_training_batches_hold_the_records_pixels_and_labels(trainable_shards):
    """Without augmentation every training example is one of the split's records,
    decoded and resized, with that record's label; batches are full."""
    from training.data import _decode

    shard_set = ShardSet.open(trainable_shards)
    by_pixels = {}
    for path in shard_set.files("train"):
        for raw in tf.data.TFRecordDataset(path, compression_type=shard_set.compression_type):
            image, label = _decode(raw, 40)
            by_pixels[image.numpy().tobytes()] = int(label)
    ds = build_dataset(
        shard_set.files("train"),
        batch_size=8,
        training=True,
        compression_type=shard_set.compression_type,
        options=DataConfig(image_size=40, augment=False),
    )
    seen = 0
    for images, labels in ds.take(5):
        assert images.shape == (8, 40, 40, 3) and images.dtype == tf.float32
        assert labels.shape == (8,) and labels.dtype == tf.int32
        # The resize's kernel may overshoot [0, 1] by float rounding, never more.
        assert float(tf.reduce_min(images)) >= -1e-5 and float(tf.reduce_max(images)) <= 1 + 1e-5
        for image, label in zip(images.numpy(), labels.numpy(), strict=True):
            assert by_pixels[image.tobytes()] == int(label)
            seen += 1
    assert seen == 40


def test_evaluation_reads_every_record_once_across_pipelines(trainable_shards):
    shard_set = ShardSet.open(trainable_shards)
    files = shard_set.files("validation")
    total = 0
    for pipeline_id in range(3):
        ds = build_dataset(
            files,
            batch_size=7,
            training=False,
            compression_type=shard_set.compression_type,
            options=DataConfig(image_size=32),
            num_pipelines=3,
            pipeline_id=pipeline_id,
        )
        total += sum(int(labels.shape[0]) for _, labels in ds)
    assert total == shard_set.num_records("validation")


def test_two_workers_see_disjoint_files_covering_all():
    files = [f"train-{i:05d}-of-00005" for i in range(5)]
    first, first_by_record = shard_files(files, 2, 0)
    second, second_by_record = shard_files(files, 2, 1)
    assert not first_by_record and not second_by_record
    assert set(first).isdisjoint(second)
    assert sorted(first + second) == files


def test_fewer_files_than_workers_falls_back_to_records(caplog):
    files = ["only-one"]
    own, by_record = shard_files(files, 2, 1)
    assert own == files and by_record
    assert "DATA" in caplog.text


def test_two_worker_training_pipelines_read_disjoint_records(trainable_shards):
    """Through the real builder: each worker's records come only from its own files."""
    shard_set = ShardSet.open(trainable_shards)
    files = shard_set.files("train")
    assert len(files) == 2
    seen = []
    for pipeline_id in range(2):
        own, _ = shard_files(files, 2, pipeline_id)
        ids = set()
        for path in own:
            for raw in tf.data.TFRecordDataset(path, compression_type=shard_set.compression_type):
                ids.add(features.parse_example(raw)[features.IMAGE_ID].numpy())
        seen.append(ids)
    assert seen[0].isdisjoint(seen[1])
    assert len(seen[0] | seen[1]) == shard_set.num_records("train")


def test_throughput_counts_the_images_of_the_timed_batches_only(monkeypatch):
    """Images per second of the timed batches: the warm-up batch (100 images) is not
    counted, three batches of 16 over the 2 s the clock says are 24 images/s."""
    import numpy as np

    from training import data

    sizes = [100, 16, 16, 16, 16]
    ds = tf.data.Dataset.from_generator(
        lambda: ((np.zeros((n, 2), np.float32), np.zeros(n, np.int32)) for n in sizes),
        output_signature=(tf.TensorSpec([None, 2]), tf.TensorSpec([None], tf.int32)),
    )
    ticks = iter([100.0, 102.0])
    monkeypatch.setattr(data.time, "perf_counter", lambda: next(ticks))
    assert measure_throughput(ds, batches=3, warmup=1) == 24.0


def test_incomplete_shard_directory_is_refused(trainable_shards, tmp_path):
    copy = tmp_path / "shards"
    shutil.copytree(trainable_shards, copy)
    (copy / "_SUCCESS").unlink()
    with pytest.raises(ShardError, match="no _SUCCESS"):
        ShardSet.open(str(copy))


def test_schema_mismatch_is_refused(trainable_shards, tmp_path):
    copy = tmp_path / "shards"
    shutil.copytree(trainable_shards, copy)
    metadata = json.loads((copy / "metadata.json").read_text())
    metadata["schema_version"] = 999
    (copy / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ShardError, match="schema_version 999"):
        ShardSet.open(str(copy))


def test_missing_directory_is_refused(tmp_path):
    with pytest.raises(ShardError, match="does not exist"):
        ShardSet.open(str(tmp_path / "nope"))


def test_batched_decode_equals_decoding_each_record(trainable_shards):
    from training.data import _decode, _decode_batch

    shard_set = ShardSet.open(trainable_shards)
    records = list(
        tf.data.TFRecordDataset(
            shard_set.files("train")[:1], compression_type=shard_set.compression_type
        ).take(6)
    )
    images, labels = _decode_batch(tf.stack(records), 40)
    for index, record in enumerate(records):
        image, label = _decode(record, 40)
        assert int(labels[index]) == int(label)
        assert tf.reduce_all(images[index] == image)


@pytest.mark.parametrize(
    ("records", "budget", "expected"), [(100, 10, "memory"), (10_000, 10, ""), (None, 10, "")]
)
def test_auto_cache_caches_in_memory_only_what_fits(records, budget, expected, caplog):
    from training.data import cache_choice

    options = DataConfig(image_size=32, cache="auto", cache_budget_mb=budget)
    with caplog.at_level("INFO"):
        assert cache_choice(options, records) == expected
    if records is not None:
        assert ("caching" if expected else "not caching") in caplog.text


def test_auto_cache_leaves_evaluation_uncached():
    from training.data import cache_choice

    options = DataConfig(image_size=32, cache="auto", cache_budget_mb=10)
    assert cache_choice(options, 100, training=False) == ""
    assert cache_choice(DataConfig(cache="memory"), 100, training=False) == "memory"


def test_auto_cached_training_pipeline_serves_each_image_once_per_epoch(trainable_shards):
    shard_set = ShardSet.open(trainable_shards)
    count = shard_set.num_records("train")
    ds = build_dataset(
        shard_set.files("train"),
        batch_size=1,
        training=True,
        compression_type=shard_set.compression_type,
        options=DataConfig(image_size=32, augment=False, shuffle_buffer=1),
        num_records=count,
    )
    first, second = [], []
    for index, (image, _) in enumerate(ds.take(2 * count)):
        (first if index < count else second).append(float(tf.reduce_sum(image)))
    assert sorted(first) == pytest.approx(sorted(second))


def test_augmentation_flips_about_half_the_images_and_crops_inside_them():
    from training.data import BRIGHTNESS_DELTA, MIN_CROP_SCALE, _augment_batch

    tf.random.set_seed(7)
    size, batch = 32, 256
    left_bright = tf.concat([tf.ones([size, size // 2, 3]), tf.zeros([size, size // 2, 3])], 1)
    images, labels = _augment_batch(tf.stack([left_bright] * batch), tf.range(batch), size)
    assert images.shape == (batch, size, size, 3)
    assert labels.numpy().tolist() == list(range(batch))  # labels travel with their image
    assert float(tf.reduce_min(images)) >= 0.0 and float(tf.reduce_max(images)) <= 1.0
    left = tf.reduce_mean(images[:, :, : size // 4], axis=[1, 2, 3])
    right = tf.reduce_mean(images[:, :, -size // 4 :], axis=[1, 2, 3])
    flipped = int(tf.reduce_sum(tf.cast(left < right, tf.int32)))
    assert 0.35 * batch < flipped < 0.65 * batch
    # A crop keeps at least MIN_CROP_SCALE of each side, so the outer quarters stay on
    # their own side of the edge; only the brightness shift moves them.
    assert float(tf.reduce_max(tf.minimum(left, right))) <= BRIGHTNESS_DELTA + 1e-6
    assert float(tf.reduce_min(tf.maximum(left, right))) >= 1 - BRIGHTNESS_DELTA - 1e-6
    assert MIN_CROP_SCALE > 0.5
