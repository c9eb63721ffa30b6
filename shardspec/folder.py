"""Checking a shard folder: the one set of rules every reader applies before trusting it.

The DAG's `validate_shards` (Beam's filesystems, on the Airflow worker) and the
trainer (TensorFlow's `tf.io.gfile`, on each worker) open the same folders
through different filesystem layers; each passes its own `Files`, and both get
the same verdict and the same words for every problem. Reads `_SUCCESS`,
`metadata.json` and one size per shard; never a shard's bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from shardspec.example import SCHEMA_VERSION
from shardspec.layout import COMPRESSIONS, CONFIG, DEFAULT_COMPRESSION, METADATA, SUCCESS

# A classifier of one class is always right and learns nothing; the usual cause is an
# --input one folder above the class folders (everything under it becomes one label).
MIN_CLASSES = 2


def too_few_classes(label_map: dict[str, int], min_classes: int = MIN_CLASSES) -> str | None:
    """What is wrong with training on these labels, or None."""
    if len(label_map) >= min_classes:
        return None
    names = ", ".join(repr(name) for name in sorted(label_map)) or "none"
    return f"{len(label_map)} class(es) ({names}): a classifier needs {min_classes} or more"


class Files(Protocol):
    """The three calls a check needs, on whatever filesystem holds the folder."""

    def exists(self, path: str) -> bool: ...

    def read_bytes(self, path: str) -> bytes: ...

    def size(self, path: str) -> int:
        """Bytes in the file; FileNotFoundError when there is none."""


@dataclass(frozen=True)
class CallableFiles:
    """`Files` from three functions (a filesystem layer's own calls)."""

    exists: Callable[[str], bool]
    read_bytes: Callable[[str], bytes]
    size: Callable[[str], int]


def _local_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        raise FileNotFoundError(path) from None


def _local_read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


# Local paths with nothing but the standard library: for checks before an engine loads.
LOCAL_FILES = CallableFiles(exists=os.path.exists, read_bytes=_local_read, size=_local_size)


class MetadataError(ValueError):
    pass


@dataclass(frozen=True)
class ShardEntry:
    file: str
    num_records: int
    num_bytes: int | None = None
    sha256: str = ""


@dataclass(frozen=True)
class SplitEntry:
    num_records: int
    shards: tuple[ShardEntry, ...] = ()


@dataclass(frozen=True)
class FolderMetadata:
    """What readers rely on in `metadata.json`, typed and checked (schema_version 1).

    `raw` keeps the whole document: the writer records more (parameters, error
    counts by reason, per-label counts) for people and for the run report.
    """

    schema_version: int
    label_map: dict[str, int]
    compression: str
    splits: dict[str, SplitEntry]
    error_fraction: float
    fingerprint: str = ""
    location: str = ""  # set when this output reuses another folder's shards
    # The writer's --max-side: images were resized to at most this many pixels on their
    # longer side (0: stored as read). Readers size their decode and cache by it.
    max_side: int = 0
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: Any) -> FolderMetadata:
        if not isinstance(raw, dict):
            raise MetadataError(f"{METADATA} is not a JSON object")
        version = raw.get("schema_version")
        if version != SCHEMA_VERSION:
            raise MetadataError(
                f"{METADATA} has schema_version {version!r}; this code reads version "
                f"{SCHEMA_VERSION}: reshard with the matching beam_jobs"
            )
        try:
            label_map = {str(k): int(v) for k, v in raw["label_map"].items()}
            splits = {
                str(name): SplitEntry(
                    num_records=int(split.get("num_records", 0)),
                    shards=tuple(
                        ShardEntry(
                            file=str(shard["file"]),
                            num_records=int(shard.get("num_records", 0)),
                            num_bytes=(
                                None if shard.get("num_bytes") is None else int(shard["num_bytes"])
                            ),
                            sha256=str(shard.get("sha256", "")),
                        )
                        for shard in split.get("shards", [])
                    ),
                )
                for name, split in raw.get("splits", {}).items()
            }
            compression = str(raw.get("compression", DEFAULT_COMPRESSION))
            error_fraction = float(raw.get("error_fraction", 0.0))
            max_side = int((raw.get("params") or {}).get("max_side") or 0)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise MetadataError(f"{METADATA} is malformed ({type(err).__name__}: {err})") from None
        if compression not in COMPRESSIONS:
            raise MetadataError(f"{METADATA} names an unknown compression {compression!r}")
        for split in splits.values():
            for shard in split.shards:
                if "/" in shard.file or shard.file in ("", ".", ".."):
                    raise MetadataError(
                        f"{METADATA} names a shard outside its folder: {shard.file!r}"
                    )
        return cls(
            schema_version=version,
            label_map=label_map,
            compression=compression,
            splits=splits,
            error_fraction=error_fraction,
            fingerprint=str(raw.get("fingerprint", "")),
            location=str(raw.get("location") or ""),
            max_side=max_side,
            raw=raw,
        )

    @property
    def content_id(self) -> str:
        """Names what the shards hold (each shard's sha256, records and split, the label
        map), whatever folder they sit in: two folders share it only when a reader would
        read the same records from them."""
        digest = hashlib.sha256()
        digest.update(json.dumps(sorted(self.label_map.items())).encode())
        for name in sorted(self.splits):
            for shard in self.splits[name].shards:
                digest.update(
                    f"\n{name}\t{shard.file}\t{shard.num_records}\t{shard.sha256}".encode()
                )
        return digest.hexdigest()[:16]

    def shard_root(self, directory: str) -> str:
        """Where the shard files are: here, or the folder a reused output points at."""
        return self.location or directory

    def num_records(self, split: str) -> int:
        entry = self.splits.get(split)
        return entry.num_records if entry else 0


def _read_metadata(files: Files, directory: str) -> FolderMetadata:
    path = posixpath.join(directory, METADATA)
    if not files.exists(path):
        raise MetadataError(f"no {METADATA}")
    try:
        raw = json.loads(files.read_bytes(path))
    except ValueError as err:
        raise MetadataError(f"{METADATA} is not JSON: {err}") from None
    return FolderMetadata.from_json(raw)


def _still_there(files: Files, metadata: FolderMetadata) -> bool:
    """A reused output's target is still the complete output it pointed at."""
    target = metadata.location
    if not files.exists(posixpath.join(target, SUCCESS)):
        return False
    try:
        return _read_metadata(files, target).fingerprint == metadata.fingerprint
    except MetadataError:
        return False


def check_folder(
    directory: str,
    files: Files,
    *,
    max_error_fraction: float | None = None,
    min_train_shards: int = 0,
    min_train_records: int = 0,
    min_classes: int = 0,
) -> tuple[FolderMetadata | None, list[str]]:
    """The folder's metadata and every problem found (none: it can be trained on).

    The metadata is None when it could not be read at all; the problems then say why.
    """
    directory = directory.rstrip("/")
    if not files.exists(directory) and not files.exists(posixpath.join(directory, METADATA)):
        return None, ["shard directory does not exist"]
    finished, described, started = (
        files.exists(posixpath.join(directory, name)) for name in (SUCCESS, METADATA, CONFIG)
    )
    if not (finished or described or started):  # a folder of images, a run folder, ...
        return None, [
            f"not a shard folder (no {SUCCESS}, {METADATA} or {CONFIG}): give the folder the "
            "sharding job wrote (its --output)"
        ]
    problems: list[str] = []
    if not finished:
        problems.append(
            f"no {SUCCESS} marker: the sharding job did not finish there (still running, "
            "failed or killed); rerun it"
        )
    try:
        metadata = _read_metadata(files, directory)
    except MetadataError as err:
        return None, [*problems, str(err)]
    if metadata.location and not _still_there(files, metadata):
        problems.append(
            f"reuses the shards in {metadata.location}, which were replaced or removed since "
            "(rerun the sharding job with --force-reshard)"
        )
    if max_error_fraction is not None and metadata.error_fraction > max_error_fraction:
        problems.append(
            f"error fraction {metadata.error_fraction:.1%} is above the limit "
            f"{max_error_fraction:.1%} ({metadata.raw.get('errors_by_reason')})"
        )
    if problem := too_few_classes(metadata.label_map, min_classes):
        problems.append(problem)
    train = metadata.splits.get("train", SplitEntry(0))
    if len(train.shards) < min_train_shards:
        problems.append(
            f"{len(train.shards)} train shard(s) for {min_train_shards} workers: each worker "
            f"needs its own file (reshard with --min-shards {min_train_shards})"
        )
    if train.num_records < min_train_records:
        problems.append(
            f"{train.num_records} train records, fewer than one global batch "
            f"({min_train_records}): lower per_replica_batch_size or add images"
        )
    root = metadata.shard_root(directory)
    for name, split in metadata.splits.items():
        listed = sum(shard.num_records for shard in split.shards)
        if listed != split.num_records:
            problems.append(
                f"{name}: its shards list {listed} records, {METADATA} says {split.num_records}"
            )
        for shard in split.shards:
            try:
                size = files.size(posixpath.join(root, shard.file))
            except FileNotFoundError:
                problems.append(f"{shard.file}: missing")
                continue
            if shard.num_bytes is not None and size != shard.num_bytes:
                problems.append(
                    f"{shard.file}: {size} bytes, {METADATA} says {shard.num_bytes} "
                    "(changed after the sharding job wrote it)"
                )
    return metadata, problems
