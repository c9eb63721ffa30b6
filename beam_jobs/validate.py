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
import posixpath

from beam_jobs.fs import filesystems
from shardspec.folder import LOCAL_FILES, CallableFiles, FolderMetadata, check_folder
from shardspec.layout import METADATA
from shardspec.tfrecord import CorruptShardError, iter_records
from stageconfig import is_remote


class ShardValidationError(ValueError):
    def __init__(self, directory: str, problems: list[str]):
        super().__init__(
            f"shards in {directory} failed validation:\n" + "\n".join(f"- {p}" for p in problems)
        )
        self.problems = problems


# Beam is imported when a path needs it (beam_jobs.fs.filesystems): a local folder is
# checked with the standard library, so the DAG's validate_shards task does not import
# Beam (0.9 s) for it.
def _beam_read(path: str) -> bytes:
    """The file's bytes as stored (Beam would otherwise gunzip *.gz on the fly)."""
    from apache_beam.io.filesystem import CompressionTypes

    with filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return handle.read()


def _beam_size(path: str) -> int:
    try:
        return filesystems().get_filesystem(path).size(path)
    except Exception:  # Beam raises BeamIOError or OSError, depending on the filesystem
        raise FileNotFoundError(path) from None


# The folder checks of shardspec.folder, through Beam's filesystems (local, gs://, ...).
BEAM_FILES = CallableFiles(
    exists=lambda p: filesystems().exists(p), read_bytes=_beam_read, size=_beam_size
)


def _files(path: str) -> CallableFiles:
    """Local paths through the standard library, the others through Beam's filesystems."""
    return BEAM_FILES if is_remote(path) else LOCAL_FILES


def _read(path: str) -> bytes:
    return _files(path).read_bytes(path)


# (_read through a lambda: looked up at call time, so a test can watch what is read.)
FILES = CallableFiles(
    exists=lambda p: _files(p).exists(p),
    read_bytes=lambda p: _read(p),
    size=lambda p: _files(p).size(p),
)


def validate_shards(
    directory: str,
    *,
    max_error_fraction: float,
    min_train_shards: int = 1,
    min_train_records: int = 0,
    min_classes: int = 0,
    verify_records: bool = True,
) -> dict:
    """Return a small summary (for XCom) or raise ShardValidationError with every problem."""
    directory = directory.rstrip("/")
    folder, problems = check_folder(
        directory,
        FILES,
        max_error_fraction=max_error_fraction,
        min_train_shards=min_train_shards,
        min_train_records=min_train_records,
        min_classes=min_classes,
    )
    if folder is None:
        raise ShardValidationError(directory, problems)
    if verify_records:
        problems += _verify_records(folder, directory, problems)
    if problems:
        raise ShardValidationError(directory, problems)
    per_split = {name: s.num_records for name, s in folder.splits.items()}
    return {
        "shards_dir": directory,
        "reused_from": folder.location,
        "num_records": sum(per_split.values()),
        "records_per_split": per_split,
        "num_classes": len(folder.label_map),
        "error_fraction": folder.error_fraction,
        # Images stored more than once (outputs written before copies were counted: None).
        "copies": folder.raw.get("copies"),
    }


def _verify_records(folder: FolderMetadata, directory: str, found: list[str]) -> list[str]:
    """Rehash every shard and count its records (reads everything)."""
    problems = []
    root = folder.shard_root(directory)
    for split_name, split in folder.splits.items():
        counted = 0
        for shard in split.shards:
            if any(p.startswith(f"{shard.file}:") for p in found):
                continue  # missing or resized: already reported
            data = _read(posixpath.join(root, shard.file))
            if hashlib.sha256(data).hexdigest() != shard.sha256:
                problems.append(f"{shard.file}: sha256 differs from {METADATA}")
            try:
                records = sum(1 for _ in iter_records(data, folder.compression))
            except CorruptShardError as err:
                problems.append(f"{shard.file}: corrupt ({err})")
                continue
            if records != shard.num_records:
                problems.append(
                    f"{shard.file}: {records} records, {METADATA} says {shard.num_records}"
                )
            counted += records
        if counted != split.num_records and not any(
            p.startswith(split_name) for p in [*found, *problems]
        ):
            problems.append(
                f"{split_name}: shards hold {counted} records, {METADATA} says {split.num_records}"
            )
    return problems
