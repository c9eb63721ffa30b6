"""Checks that a shard folder is complete and trustworthy before training starts.

Run by the DAG's `validate_shards` task (and usable by hand): a gate that turns
a half-written, tampered or too-dirty output into one clear error listing every
problem, instead of a failure deep inside multi-worker training.

Two depths. The DAG's task reads only `_SUCCESS`, `metadata.json` and one stat
per shard (`verify_records=False`): the sharding job already hashed what it
wrote, and rereading terabytes on the Airflow worker to hash them again would
take hours there; the trainer checks every record's CRC as it reads. The full
check (every shard's sha256, CRCs and record count) is for a folder of unknown
history, such as one copied by hand.
"""

from __future__ import annotations

import hashlib
import json

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_jobs import cache
from shardspec.example import SCHEMA_VERSION
from shardspec.layout import DEFAULT_COMPRESSION, METADATA, SUCCESS
from shardspec.tfrecord import CorruptShardError, iter_records


class ShardValidationError(ValueError):
    def __init__(self, directory: str, problems: list[str]):
        super().__init__(
            f"shards in {directory} failed validation:\n" + "\n".join(f"- {p}" for p in problems)
        )
        self.problems = problems


def _read(path: str) -> bytes:
    """The file's bytes as stored (Beam would otherwise gunzip *.gz on the fly)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return handle.read()


def validate_shards(
    directory: str,
    *,
    max_error_fraction: float,
    min_train_shards: int = 1,
    min_train_records: int = 0,
    verify_records: bool = True,
) -> dict:
    """Return a small summary (for XCom) or raise ShardValidationError with every problem."""
    directory = directory.rstrip("/")
    problems: list[str] = []
    if not FileSystems.exists(FileSystems.join(directory, SUCCESS)):
        problems.append(f"no {SUCCESS} marker: the sharding job did not complete")
    metadata_path = FileSystems.join(directory, METADATA)
    if not FileSystems.exists(metadata_path):
        raise ShardValidationError(directory, [*problems, f"no {METADATA}"])
    try:
        metadata = json.loads(_read(metadata_path))
    except ValueError as err:
        raise ShardValidationError(
            directory, [*problems, f"{METADATA} is not JSON: {err}"]
        ) from None

    if metadata.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version {metadata.get('schema_version')!r} != {SCHEMA_VERSION}")
    shard_root = metadata.get("location") or directory  # a reused output points elsewhere
    if shard_root != directory and not cache.holds(shard_root, metadata.get("fingerprint", "")):
        problems.append(
            f"reuses the shards in {shard_root}, which were replaced or removed since "
            "(rerun the sharding job with --force-reshard)"
        )
    if metadata.get("error_fraction", 1.0) > max_error_fraction:
        problems.append(
            f"error fraction {metadata.get('error_fraction'):.1%} is above the limit "
            f"{max_error_fraction:.1%} ({metadata.get('errors_by_reason')})"
        )
    splits = metadata.get("splits", {})
    train_shards = splits.get("train", {}).get("num_shards", 0)
    if train_shards < min_train_shards:
        problems.append(
            f"{train_shards} train shard(s) for {min_train_shards} workers: each worker needs "
            f"its own file (reshard with --min-shards {min_train_shards})"
        )
    train_records = splits.get("train", {}).get("num_records", 0)
    if train_records < min_train_records:
        problems.append(
            f"{train_records} train records, fewer than one global batch "
            f"({min_train_records}): lower per_replica_batch_size or add images"
        )
    compression = metadata.get("compression", DEFAULT_COMPRESSION)
    for split_name, split in splits.items():
        counted = 0
        for shard in split.get("shards", []):
            path = FileSystems.join(shard_root, shard["file"])
            try:
                size = FileSystems.get_filesystem(path).size(path)
            except OSError:
                problems.append(f"{shard['file']}: missing")
                continue
            if "num_bytes" in shard and size != shard["num_bytes"]:
                problems.append(
                    f"{shard['file']}: {size} bytes, {METADATA} says {shard['num_bytes']}"
                )
                continue
            if not verify_records:
                counted += shard["num_records"]
                continue
            data = _read(path)
            if hashlib.sha256(data).hexdigest() != shard["sha256"]:
                problems.append(f"{shard['file']}: sha256 differs from {METADATA}")
            try:
                records = sum(1 for _ in iter_records(data, compression))
            except CorruptShardError as err:
                problems.append(f"{shard['file']}: corrupt ({err})")
                continue
            if records != shard["num_records"]:
                problems.append(
                    f"{shard['file']}: {records} records, {METADATA} says {shard['num_records']}"
                )
            counted += records
        if counted != split.get("num_records", 0) and not any(
            p.startswith(split_name) for p in problems
        ):
            problems.append(
                f"{split_name}: shards hold {counted} records, "
                f"{METADATA} says {split.get('num_records')}"
            )
    if problems:
        raise ShardValidationError(directory, problems)
    return {
        "shards_dir": directory,
        "reused_from": metadata.get("location", ""),
        "num_records": metadata["num_records"],
        "records_per_split": {name: s["num_records"] for name, s in splits.items()},
        "num_classes": metadata["num_classes"],
        "error_fraction": metadata["error_fraction"],
    }
