"""reuse_training finds a finished run with the same shards content and recipe, only that."""

import json
from pathlib import Path

import pytest

from orchestration.reuse import discard_stale_training, find_finished_training

FLAGS = {"epochs": 3, "learning_rate": 0.002, "per_replica_batch_size": 32}


def _run(root, name, *, fingerprint="f1", flags=FLAGS, workers=2, finished=True, model=True):
    run = root / "runs" / name
    shards, train = run / "shards", run / "train"
    shards.mkdir(parents=True)
    train.mkdir()
    (shards / "metadata.json").write_text(json.dumps({"fingerprint": fingerprint}))
    config = {**flags, "data": str(shards), "num_workers": workers, "total_steps": 30}
    (train / "config.json").write_text(json.dumps(config))
    (train / "metrics.json").write_text(json.dumps({"epochs": [{"step": 30 if finished else 20}]}))
    if model:
        (train / "model").mkdir()
        (train / "model" / "saved_model.pb").write_bytes(b"pb")
    return str(train)


def _find(root, **overrides):
    query = {"fingerprint": "f1", "train_flags": FLAGS, "num_workers": 2, **overrides}
    return find_finished_training(str(root), **query)


def test_the_newest_matching_finished_run_is_reused(tmp_path):
    _run(tmp_path, "manual__2026-12-01")
    newest = _run(tmp_path, "manual__2026-12-02")
    assert _find(tmp_path) == newest
    assert _find(tmp_path, exclude=newest) != newest  # never the run itself


@pytest.mark.parametrize(
    ("run", "query"),
    [
        ({"fingerprint": "f2"}, {}),  # other images or sharding parameters
        ({"flags": {**FLAGS, "learning_rate": 0.01}}, {}),  # another recipe
        ({"workers": 4}, {}),  # another global batch
        ({"finished": False}, {}),  # killed before its last step
        ({"model": False}, {}),  # trained, never exported
        ({}, {"fingerprint": ""}),  # shards without a fingerprint: nothing to compare
    ],
)
def test_anything_that_differs_or_is_unfinished_is_not_reused(tmp_path, run, query):
    _run(tmp_path, "manual__2026-12-01", **run)
    assert _find(tmp_path, **query) is None


def test_a_train_folder_of_other_shards_is_removed_one_of_these_shards_kept(
    trainable_shards, tmp_path
):
    """shard_images cleared and rerun on changed images: the train task's folder holds
    checkpoints of the old shards, which the trainer would refuse to resume."""
    from shardspec.folder import FolderMetadata

    content = FolderMetadata.from_json(
        json.loads((Path(trainable_shards) / "metadata.json").read_text())
    ).content_id
    same, other, fresh = (tmp_path / name for name in ("same", "other", "fresh"))
    for train, trained_on in ((same, content), (other, "0123456789abcdef")):
        (train / "checkpoints").mkdir(parents=True)
        (train / "config.json").write_text(json.dumps({"shards_content": trained_on}))

    assert discard_stale_training(str(same), trainable_shards) == ""
    assert (same / "checkpoints").is_dir()
    said = discard_stale_training(str(other), trainable_shards)
    assert f"content 0123456789abcdef, now {content}" in said and "removed" in said
    assert not other.exists()
    assert discard_stale_training(str(fresh), trainable_shards) == ""  # nothing there yet
