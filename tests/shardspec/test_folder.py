"""One set of folder rules for every reader: the same verdict through Beam's and
TensorFlow's filesystems, and a metadata model that refuses what it cannot trust."""

import json
import shutil
from pathlib import Path

import pytest

from shardspec.folder import LOCAL_FILES as LOCAL
from shardspec.folder import FolderMetadata, MetadataError, check_folder


@pytest.fixture
def broken(trainable_shards, tmp_path):
    folder = tmp_path / "shards"
    shutil.copytree(trainable_shards, folder)
    (folder / "_SUCCESS").unlink()
    (folder / "test-00001-of-00002.tfrecord").unlink()
    shard = folder / "validation-00000-of-00002.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-9])
    return str(folder)


def test_beam_and_tensorflow_readers_find_the_same_problems(broken):
    from beam_jobs.validate import BEAM_FILES
    from training.shards import GFILE

    verdicts = [
        check_folder(broken, files, min_train_shards=4)[1] for files in (LOCAL, BEAM_FILES, GFILE)
    ]
    assert verdicts[0] == verdicts[1] == verdicts[2]
    text = "\n".join(verdicts[0])
    assert "no _SUCCESS marker" in text
    assert "test-00001-of-00002.tfrecord: missing" in text
    assert "validation-00000-of-00002.tfrecord: " in text and "changed after" in text
    assert "2 train shard(s) for 4 workers" in text


def test_a_folder_the_sharding_job_never_wrote_is_named_as_such(tmp_path):
    """--data pointed at the raw images (or a run folder) is not "a job that did not
    finish": say what the folder is not, through every reader."""
    from beam_jobs.validate import BEAM_FILES
    from training.shards import GFILE

    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "1.jpg").write_bytes(b"x")
    for files in (LOCAL, BEAM_FILES, GFILE):
        assert check_folder(str(tmp_path), files) == (
            None,
            [
                "not a shard folder (no _SUCCESS, metadata.json or _config.json): give the "
                "folder the sharding job wrote (its --output)"
            ],
        )
    (tmp_path / "_config.json").write_text("{}")  # started there, never finished
    assert "no _SUCCESS marker" in check_folder(str(tmp_path), LOCAL)[1][0]


def test_a_complete_folder_has_no_problems_and_typed_metadata(trainable_shards):
    metadata, problems = check_folder(trainable_shards, LOCAL, max_error_fraction=0.0)
    assert problems == []
    train = metadata.splits["train"]
    assert metadata.num_records("train") == sum(s.num_records for s in train.shards) > 0
    assert sorted(metadata.label_map.values()) == list(range(len(metadata.label_map)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 2}, "schema_version 2; this code reads version 1"),
        ({"label_map": ["a"]}, "is malformed"),
        ({"compression": "zstd"}, "unknown compression 'zstd'"),
        ({"splits": {"train": {"num_records": 1, "shards": [{"file": "../x", "num_records": 1}]}}},
         "shard outside its folder: '../x'"),
    ],
)  # fmt: skip
def test_metadata_that_cannot_be_trusted_is_refused_in_one_line(trainable_shards, change, message):
    raw = json.loads((Path(trainable_shards) / "metadata.json").read_text())
    with pytest.raises(MetadataError, match=message):
        FolderMetadata.from_json({**raw, **change})


def test_a_reused_output_whose_target_changed_is_refused(trainable_shards, tmp_path):
    pointer = tmp_path / "run"
    pointer.mkdir()
    raw = json.loads((Path(trainable_shards) / "metadata.json").read_text())
    raw.update(location=trainable_shards, fingerprint="not-the-targets")
    (pointer / "metadata.json").write_text(json.dumps(raw))
    (pointer / "_SUCCESS").write_text("")
    _, problems = check_folder(str(pointer), LOCAL)
    assert problems == [
        f"reuses the shards in {trainable_shards}, which were replaced or removed since "
        "(rerun the sharding job with --force-reshard)"
    ]


def test_content_id_names_the_records_not_the_folder(trainable_shards, tmp_path):
    """A copy of the shards elsewhere is the same data; another shard or label map is not."""
    raw = json.loads((Path(trainable_shards) / "metadata.json").read_text())
    original = FolderMetadata.from_json(raw).content_id
    moved = shutil.copytree(trainable_shards, tmp_path / "moved")
    assert (
        FolderMetadata.from_json(json.loads((moved / "metadata.json").read_text())).content_id
        == original
    )

    changed_shard = json.loads(json.dumps(raw))
    changed_shard["splits"]["train"]["shards"][0]["sha256"] = "0" * 64
    relabelled = json.loads(json.dumps(raw))
    relabelled["label_map"] = {f"x{name}": index for name, index in raw["label_map"].items()}
    ids = {FolderMetadata.from_json(doc).content_id for doc in (changed_shard, relabelled)}
    assert original not in ids and len(ids) == 2
