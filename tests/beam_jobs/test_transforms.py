import io
import json

import apache_beam as beam
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image

from beam_jobs.plan import WorkItem
from beam_jobs.transforms import ERRORS, RECORDS, ReadImageFn, ReadImages, WriteShards
from training import features


def _jpeg(path, size=(20, 10)):
    buffer = io.BytesIO()
    Image.new("RGB", size, (1, 2, 3)).save(buffer, format="JPEG")
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def _item(path, key, **kwargs):
    return WorkItem(
        uri=str(path), key=key, label="cat", label_id=0, split="train", shard=1, **kwargs
    )


def test_read_images_routes_good_and_bad_files(tmp_path):
    good = tmp_path / "good.jpg"
    _jpeg(good)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"nope")
    items = [
        _item(good, "cat/good.jpg"),
        _item(bad, "cat/bad.jpg"),
        _item(tmp_path / "missing.jpg", "cat/missing.jpg"),
        WorkItem(uri="x", key="x", label="", reject="no_label_dir"),
    ]
    with TestPipeline() as p:
        results = p | beam.Create(items) | ReadImages(max_side=0, max_pixels=10**6)
        keys = results[RECORDS] | "RecordKeys" >> beam.Map(lambda kv: (kv[0], kv[1][0]))
        reasons = results[ERRORS] | "Reasons" >> beam.Map(lambda e: (e["key"], e["reason"]))
        assert_that(keys, equal_to([(("train", 1), "cat/good.jpg")]), label="records")
        assert_that(
            reasons,
            equal_to(
                [
                    ("cat/bad.jpg", "not_an_image"),
                    ("cat/missing.jpg", "unreadable"),
                    ("x", "no_label_dir"),
                ]
            ),
            label="errors",
        )


def test_read_image_fn_builds_the_shared_example(tmp_path):
    path = tmp_path / "a.jpg"
    data = _jpeg(path, size=(30, 12))
    [(shard_key, (key, serialized, label))] = list(
        ReadImageFn(max_side=0, max_pixels=10**6).process(_item(path, "cat/a.jpg"))
    )
    parsed = features.parse_example(tf.constant(serialized))
    assert shard_key == ("train", 1) and key == "cat/a.jpg" and label == "cat"
    assert parsed[features.IMAGE_ENCODED].numpy() == data
    assert parsed[features.IMAGE_WIDTH].numpy() == 30
    assert parsed[features.IMAGE_HEIGHT].numpy() == 12
    assert parsed[features.IMAGE_ID].numpy() == b"cat/a.jpg"
    assert parsed[features.LABEL_TEXT].numpy() == b"cat"


def test_write_shards_writes_one_sorted_file_per_shard(tmp_path):
    records = [
        (("train", 0), ("b", b"rec-b", "dog")),
        (("train", 0), ("a", b"rec-a", "cat")),
        (("train", 1), ("c", b"rec-c", "cat")),
    ]
    with TestPipeline() as p:
        reports = (
            p
            | beam.Create(records)
            | WriteShards(str(tmp_path), {"train": 2}, "gzip", ".tfrecord.gz")
            | beam.Map(
                lambda r: (r["file"], r["num_records"], json.dumps(r["per_label"], sort_keys=True))
            )
        )
        assert_that(
            reports,
            equal_to(
                [
                    ("train-00000-of-00002.tfrecord.gz", 2, '{"cat": 1, "dog": 1}'),
                    ("train-00001-of-00002.tfrecord.gz", 1, '{"cat": 1}'),
                ]
            ),
        )
    first = tf.data.TFRecordDataset(
        str(tmp_path / "train-00000-of-00002.tfrecord.gz"), compression_type="GZIP"
    )
    assert [r.numpy() for r in first] == [b"rec-a", b"rec-b"]
