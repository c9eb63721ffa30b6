"""Reusing a finished training run instead of training again (DAG Param `reuse_training`).

Off by default: training is not a pure function of its inputs (thread scheduling,
random augmentation), so a second run is a different model of the same recipe,
which is sometimes what a scheduled run is for. When asked, a run reuses the
newest earlier run that trained on shards with the same content fingerprint,
with the same training parameters and worker count, and finished (exported its
model after its last step). Copy-free: the run's result points at that model.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

import fsspec

from shardspec.folder import FolderMetadata, MetadataError
from shardspec.layout import METADATA


def _json(fs, path: str) -> dict | None:
    try:
        with fs.open(path) as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def shards_fingerprint(shards_dir: str) -> str:
    """The content fingerprint the sharding job recorded ("" when it did not)."""
    fs, path = fsspec.core.url_to_fs(shards_dir)
    metadata = _json(fs, posixpath.join(path, "metadata.json")) or {}
    return str(metadata.get("fingerprint", ""))


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
    for config_path in sorted(fs.glob(posixpath.join(root, "runs", "*", "train", "config.json")),
                              reverse=True):  # fmt: skip
        train_dir = posixpath.dirname(config_path)
        if protocol + train_dir == exclude.rstrip("/"):
            continue
        config = _json(fs, config_path) or {}
        if config.get("num_workers") != num_workers or any(
            config.get(key) != value for key, value in train_flags.items()
        ):
            continue
        metrics = _json(fs, posixpath.join(train_dir, "metrics.json")) or {}
        epochs = metrics.get("epochs") or [{}]
        finished = epochs[-1].get("step") == config.get("total_steps")
        if not finished or not fs.exists(posixpath.join(train_dir, "model", "saved_model.pb")):
            continue
        if shards_fingerprint(str(config.get("data", ""))) == fingerprint:
            return protocol + train_dir
    return None


def discard_stale_training(train_dir: str, shards_dir: str) -> str:
    """Remove `train_dir` when its checkpoints were trained on other shards than
    `shards_dir` holds now, and say why ("" when kept: none there, or the same shards).

    Within one DAG run the parameters are fixed, but the shards are not: clearing
    `shard_images` with its downstream tasks after the images changed re-makes them, and
    the trainer refuses to resume checkpoints of other data (training/config.py's
    RESUME_KEYS). A retry of `train` alone finds the same shards and resumes."""
    fs, path = fsspec.core.url_to_fs(train_dir.rstrip("/"))
    config = _json(fs, posixpath.join(path, "config.json")) or {}
    trained_on = config.get("shards_content")
    if not trained_on:
        return ""
    shards_fs, shards_path = fsspec.core.url_to_fs(shards_dir.rstrip("/"))
    try:
        now = FolderMetadata.from_json(
            _json(shards_fs, posixpath.join(shards_path, METADATA))
        ).content_id
    except MetadataError:
        return ""  # the trainer names what is wrong with the shards
    if now == trained_on:
        return ""
    fs.rm(path, recursive=True)
    return (
        f"{train_dir} was trained on other shards (content {trained_on}, now {now}: "
        "shard_images ran again on changed input); removed it to train anew"
    )
