"""Reusing a finished output whose inputs did not change: stage caching by content.

A fingerprint covers everything that decides the shards' bytes: every input's
uri, key, label and version (size and modification time, or the object's last
update on `gs://`), every parameter that changes the output, the label map, the
shard counts and the record schema version. An index folder (`--cache-dir`)
maps a fingerprint to the output that holds it (`<fingerprint>.json`). When a
run finds a complete output (`_SUCCESS`, same fingerprint in its
`metadata.json`) for its own fingerprint, it writes no shards: its output gets
a `metadata.json` whose `location` names the folder that holds them, and
`_SUCCESS`. Readers (the trainer's `ShardSet`, `validate_shards`) follow
`location` and check that the folder there still has that fingerprint.

Safe by construction: a partial output has no `_SUCCESS` and is never reused;
two concurrent runs with one fingerprint each write their own output and the
index ends naming one of them (both complete); a changed image changes its
version and so the fingerprint; an output replaced since it was indexed no
longer carries the fingerprint and is not reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from dataclasses import asdict

from beam_jobs import fs
from beam_jobs.config import ShardConfig
from beam_jobs.plan import Plan
from beam_jobs.validate import FILES
from shardspec.example import FEATURE_KINDS, SCHEMA_VERSION
from shardspec.folder import check_folder
from shardspec.statistics import VERSION as STATISTICS_VERSION

log = logging.getLogger(__name__)

# Parameters that do not change which records are written, or how.
NOT_IN_FINGERPRINT = {
    "output",
    "cache_dir",
    "force_reshard",
    "max_error_fraction",
    "allow_one_class",
}


def fingerprint(config: ShardConfig, plan: Plan) -> str:
    """sha256 of what decides the output's bytes. Stats manifest entries (a folder's
    listing already did): one metadata request per object on `gs://`."""
    params = {k: v for k, v in asdict(config).items() if k not in NOT_IN_FINGERPRINT}
    digest = hashlib.sha256()
    head = {
        "schema_version": SCHEMA_VERSION,
        # What a folder holds besides the records' schema version: an output written
        # before a key or the statistics were added is not reused for this code's.
        "record_keys": sorted(FEATURE_KINDS),
        "statistics_version": STATISTICS_VERSION,
        "params": params,
        "label_map": plan.label_map,
        "shard_counts": plan.shard_counts,
    }
    digest.update(json.dumps(head, sort_keys=True).encode())
    for item in sorted(plan.items, key=lambda i: (i.key, i.uri)):
        if not item.version and not item.reject:
            item = item._replace(version=fs.check_readable(item.uri, 2**63).version)
        row = [item.uri, item.key, item.label, item.split, item.reject, item.version]
        # surrogateescape: a file name that is not UTF-8 hashes as its own bytes
        digest.update(
            json.dumps(row, ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n"
        )
    return digest.hexdigest()


def _read_json(path: str) -> dict | None:
    # exists() first: a missing object on GCS raises the client's NotFound, not OSError.
    if not fs.exists(path):
        return None
    try:
        with fs.open_read(path) as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


def _index_path(cache_dir: str, key: str) -> str:
    return fs.join(cache_dir, f"{key}.json")


def holds(directory: str, key: str) -> dict | None:
    """The metadata of `directory` if it is a complete output with fingerprint `key`.

    Complete as every reader checks it (`shardspec.folder.check_folder`: `_SUCCESS`,
    readable metadata, every shard present at its recorded size), so the cache never
    points a run at a folder its validation would then refuse.
    """
    folder, problems = check_folder(directory, FILES)
    if problems or folder is None or folder.fingerprint != key or folder.location:
        return None
    return folder.raw


def lookup(cache_dir: str, key: str) -> tuple[str, dict] | None:
    """(folder, metadata) of a complete output with this fingerprint, if one is indexed."""
    entry = _read_json(_index_path(cache_dir, key))
    if not entry or not isinstance(entry.get("output"), str):
        return None
    metadata = holds(entry["output"], key)
    return (entry["output"], metadata) if metadata else None


def record(cache_dir: str, key: str, output: str) -> None:
    """Index `output` under its fingerprint; a reader sees the old entry or the new one."""
    data = json.dumps({"output": output}).encode()
    path = _index_path(cache_dir, key)
    if fs.is_remote(path):  # an object appears whole when its upload completes
        with fs.create(path) as handle:
            handle.write(data)
        return
    os.makedirs(cache_dir, exist_ok=True)
    temporary = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with open(temporary, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)
