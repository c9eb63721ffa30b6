"""A damaged shard is named, with a clear error, before or during training; never a hang."""

import shutil
import subprocess
import sys

import pytest

from tests.dags.airflow_env import REPO
from training.shards import ShardError, ShardSet

pytestmark = pytest.mark.slow  # training runs


@pytest.fixture
def shards_copy(trainable_shards, tmp_path):
    return shutil.copytree(trainable_shards, tmp_path / "shards")


def _train(shards, out):
    return subprocess.run(
        [sys.executable, "-m", "training.train", "--data", str(shards), "--output", str(out),
         "--epochs", "1", "--per-replica-batch-size", "32"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_truncated_shard_is_refused_by_name_before_training(shards_copy):
    shard = sorted(shards_copy.glob("train-*"))[1]
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(ShardError, match=shard.name + r": \d+ bytes, metadata.json says"):
        ShardSet.open(str(shards_copy))


def test_flipped_bits_stop_training_with_the_shard_named(shards_copy, tmp_path):
    shard = sorted(shards_copy.glob("train-*"))[0]
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(255 - b for b in data[middle : middle + 16])
    shard.write_bytes(bytes(data))  # same size: only the CRCs can tell
    proc = _train(shards_copy, tmp_path / "run")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"corrupt: {shard.name}; rerun the sharding job" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_record_the_decoder_refuses_is_named_in_one_line(shards_copy, tmp_path):
    """Shards not written by this job (or a decoder change) may hold a record that does
    not decode: training names the shard and record and exits 2, no traceback."""
    import hashlib
    import json

    from shardspec.example import encode_example
    from shardspec.tfrecord import encode_shard, iter_records

    shard = sorted(shards_copy.glob("train-*"))[0]
    records = list(iter_records(shard.read_bytes(), "none"))
    bad = encode_example(
        encoded=b"\x89PNG\r\n\x1a\n" + b"\0" * 60,  # a PNG header, then nothing decodable
        image_format="png",
        height=8,
        width=8,
        image_id="square/broken.png",
        sha256="0" * 64,
        label=0,
        label_text="square",
    )
    data = encode_shard([bad, *records], "none")
    shard.write_bytes(data)
    metadata_path = shards_copy / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    for entry in metadata["splits"]["train"]["shards"]:
        if entry["file"] == shard.name:
            entry.update(
                num_bytes=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                num_records=len(records) + 1,
            )
    metadata["splits"]["train"]["num_records"] += 1
    metadata_path.write_text(json.dumps(metadata))
    proc = _train(shards_copy, tmp_path / "run")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{shard.name}: 'square/broken.png'" in proc.stderr
    assert "Traceback" not in proc.stderr
