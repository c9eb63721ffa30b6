import pytest
import tensorflow as tf

from shardspec.layout import shard_name, tf_compression_type
from shardspec.tfrecord import encode_shard


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_shards_are_readable_by_tensorflow(tmp_path, compression):
    records = [b"", b"a", bytes(range(256)) * 40]
    path = tmp_path / "shard"
    path.write_bytes(encode_shard(records, compression))
    dataset = tf.data.TFRecordDataset(str(path), compression_type=tf_compression_type(compression))
    assert [r.numpy() for r in dataset] == records


def test_encoding_is_reproducible():
    records = [b"x" * 1000, b"y"]
    assert encode_shard(records, "gzip") == encode_shard(records, "gzip")


def test_corruption_is_detected_by_the_crc(tmp_path):
    data = bytearray(encode_shard([b"hello world" * 10], "none"))
    data[20] ^= 0xFF
    path = tmp_path / "bad"
    path.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(path)))


def test_shard_name():
    assert shard_name("train", 3, 16, "gzip") == "train-00003-of-00016.tfrecord.gz"
