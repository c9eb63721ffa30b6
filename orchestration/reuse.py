"""Reusing a finished training run instead of training again (DAG Param `reuse_training`).

Off by default: training is not a pure function of its inputs (thread scheduling,
random augmentation), so a second run is a different model of the same recipe,
which is sometimes what a scheduled run is for. When asked, a run reuses the
newest earlier run that trained on shards with the same content fingerprint,
with the same training parameters and worker count, and finished (exported its
model after its last step). Copy-free: the run's result points at that model.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Mapping
from typing import Any

import fsspec

from runspec.layout import CONFIG
from runspec.record import RunFolderError, RunRecord, read_json
from shardspec.folder import FolderMetadata, MetadataError
from shardspec.layout import METADATA

log = logging.getLogger(__name__)


def shards_fingerprint(shards_dir: str) -> str:
    """The content fingerprint the sharding job recorded ("" when it did not, or its
    metadata cannot be read: then nothing is reused)."""
    try:
        metadata = read_json(posixpath.join(shards_dir.rstrip("/"), METADATA)) or {}
    except RunFolderError:
        return ""
    return str(metadata.get("fingerprint", ""))


def shards_content_id(shards_dir: str) -> str:
    """What the shards hold (FolderMetadata.content_id; "" when their metadata cannot be
    read: then nothing matches it)."""
    try:
        raw = read_json(posixpath.join(shards_dir.rstrip("/"), METADATA))
        return FolderMetadata.from_json(raw).content_id
    except (MetadataError, RunFolderError):
        return ""


def find_finished_training(
    output_root: str,
    *,
    fingerprint: str,
    train_flags: Mapping[str, Any],
    num_workers: int,
    exclude: str = "",
) -> str | None:
    """The train folder of the newest finished run that matches, or None."""
    if not fingerprint:
        return None
    fs, root = fsspec.core.url_to_fs(output_root.rstrip("/"))
    protocol = output_root.split("://", 1)[0] + "://" if "://" in output_root else ""
    for config_path in sorted(fs.glob(posixpath.join(root, "runs", "*", "train", CONFIG)),
                              reverse=True):  # fmt: skip
        train_dir = protocol + posixpath.dirname(config_path)
        if train_dir == exclude.rstrip("/"):
            continue
        try:
            record = RunRecord.read(train_dir)
        except RunFolderError as err:
            log.warning("reuse_training: skipping %s: %s", train_dir, err)
            continue
        if record is None or not record.finished:
            continue
        config = record.config
        if config.get("num_workers") != num_workers or any(
            config.get(key) != value for key, value in train_flags.items()
        ):
            continue
        if shards_fingerprint(str(config.get("data", ""))) == fingerprint:
            return train_dir
    return None


def discard_stale_training(train_dir: str, shards_dir: str) -> str:
    """Remove `train_dir` when its checkpoints were trained on other shards than
    `shards_dir` holds now, and say why ("" when kept: none there, or the same shards).

    Within one DAG run the parameters are fixed, but the shards are not: clearing
    `shard_images` with its downstream tasks after the images changed re-makes them, and
    the trainer refuses to resume checkpoints of other data (training/config.py's
    resume_keys()). A retry of `train` alone finds the same shards and resumes."""
    try:
        config = read_json(posixpath.join(train_dir.rstrip("/"), CONFIG)) or {}
    except RunFolderError:
        return ""  # the trainer refuses a folder it cannot read, in one line
    trained_on = config.get("shards_content")
    if not trained_on:
        return ""
    now = shards_content_id(shards_dir)
    if not now:
        return ""  # the trainer names what is wrong with the shards
    fs, path = fsspec.core.url_to_fs(train_dir.rstrip("/"))
    if now == trained_on:
        return ""
    fs.rm(path, recursive=True)
    return (
        f"{train_dir} was trained on other shards (content {trained_on}, now {now}: "
        "shard_images ran again on changed input); removed it to train anew"
    )
