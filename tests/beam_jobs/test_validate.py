import json
import shutil

import pytest

from beam_jobs.validate import ShardValidationError, validate_shards


@pytest.fixture
def shards_copy(trainable_shards, tmp_path):
    copy = tmp_path / "shards"
    shutil.copytree(trainable_shards, copy)
    return copy


def test_complete_shards_pass_with_a_summary(trainable_shards):
    summary = validate_shards(trainable_shards, max_error_fraction=0.05, min_train_shards=2)
    assert summary["num_classes"] == 4
    assert sum(summary["records_per_split"].values()) == summary["num_records"] == 480
    assert summary["copies"]["groups"] == 0  # the sample has no image twice


def test_corrupted_shard_is_reported_by_name(shards_copy):
    shard = shards_copy / "train-00001-of-00002.tfrecord"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(ShardValidationError) as info:
        validate_shards(str(shards_copy), max_error_fraction=0.05)
    assert any(p.startswith("train-00001-of-00002.tfrecord") for p in info.value.problems)
    assert not any("train-00000" in p for p in info.value.problems)


def test_truncated_shard_is_reported(shards_copy):
    shard = shards_copy / "validation-00000-of-00002.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(ShardValidationError, match="validation-00000-of-00002"):
        validate_shards(str(shards_copy), max_error_fraction=0.05)


def test_every_problem_is_listed_at_once(shards_copy):
    (shards_copy / "_SUCCESS").unlink()
    (shards_copy / "test-00000-of-00002.tfrecord").unlink()
    with pytest.raises(ShardValidationError) as info:
        validate_shards(str(shards_copy), max_error_fraction=0.05, min_train_shards=4)
    text = str(info.value)
    assert "no _SUCCESS" in text and "test-00000-of-00002.tfrecord: missing" in text
    assert "2 train shard(s) for 4 workers" in text


def test_a_train_split_smaller_than_one_global_batch_fails_before_training(trainable_shards):
    train = validate_shards(trainable_shards, max_error_fraction=0.05)["records_per_split"]["train"]
    validate_shards(trainable_shards, max_error_fraction=0.05, min_train_records=train)
    with pytest.raises(ShardValidationError, match=rf"{train} train records, fewer than one "):
        validate_shards(trainable_shards, max_error_fraction=0.05, min_train_records=train + 1)


def test_error_fraction_over_the_limit_fails(shards_copy):
    metadata = json.loads((shards_copy / "metadata.json").read_text())
    metadata["error_fraction"] = 0.2
    (shards_copy / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ShardValidationError, match=r"error fraction 20\.0%"):
        validate_shards(str(shards_copy), max_error_fraction=0.05)


def test_the_cheap_check_reads_no_shard_but_catches_changed_sizes(shards_copy, monkeypatch):
    import beam_jobs.validate as validate

    def no_reads(path):
        raise AssertionError(f"read {path}")

    real_read = validate._read
    monkeypatch.setattr(
        validate, "_read", lambda path: no_reads(path) if "tfrecord" in path else real_read(path)
    )
    validate_shards(str(shards_copy), max_error_fraction=0.05, verify_records=False)
    shard = shards_copy / "train-00000-of-00002.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-7])
    with pytest.raises(ShardValidationError, match=r"train-00000-of-00002.tfrecord: \d+ bytes"):
        validate_shards(str(shards_copy), max_error_fraction=0.05, verify_records=False)


def test_shards_of_one_class_fail_before_training(shards_copy):
    """A one-class classifier is always right and learns nothing: refused by name."""
    metadata = json.loads((shards_copy / "metadata.json").read_text())
    metadata["label_map"] = {"images": 0}
    (shards_copy / "metadata.json").write_text(json.dumps(metadata))
    validate_shards(str(shards_copy), max_error_fraction=0.05)  # valid data as such
    with pytest.raises(ShardValidationError, match=r"1 class\(es\) \('images'\): a classifier"):
        validate_shards(str(shards_copy), max_error_fraction=0.05, min_classes=2)


def test_a_local_folder_is_validated_without_importing_beam(trainable_shards):
    """The DAG's validate_shards task runs on the Airflow worker: a local folder is read
    with the standard library (Beam's import alone is 0.9 s of the task), every record
    verified as by the full check."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from beam_jobs.validate import validate_shards\n"
        f"summary = validate_shards({str(trainable_shards)!r}, max_error_fraction=0.05)\n"
        "assert summary['num_records'] == 480, summary\n"
        "assert 'apache_beam' not in sys.modules, 'Beam was imported'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
