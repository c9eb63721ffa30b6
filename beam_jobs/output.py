"""The sharding job's output folder: staging, publishing, metadata, `_SUCCESS`.

Readers trust an output folder only while it holds `_SUCCESS`. A run first
removes that marker, writes everything into a private staging folder, and only
after the pipeline succeeded replaces the previous shards, writes
`metadata.json`, and writes `_SUCCESS` last. A killed run therefore leaves an
output that readers refuse (no marker) and that the next run cleans up,
including staging folders of earlier killed runs. Works on any filesystem Beam
supports, including GCS, which has no atomic folder rename.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import uuid
from collections import Counter

from beam_jobs import fs
from beam_jobs.config import ShardConfig
from beam_jobs.fs import files_under, json_bytes
from beam_jobs.plan import InputError, PlanOutline
from beam_jobs.splits import SPLIT_NAMES
from shardspec.example import SCHEMA_VERSION
from shardspec.folder import FolderMetadata
from shardspec.layout import CONFIG, COPIES_DIR, ERRORS_DIR, METADATA, SUCCESS, shard_name
from shardspec.statistics import VERSION as STATISTICS_VERSION
from shardspec.statistics import DatasetStatistics, ImageStatistics
from shardspec.tfrecord import encode_shard

log = logging.getLogger(__name__)

STAGING_PREFIX = "_staging-"


join = fs.join


def new_staging_dir(output: str) -> str:
    return join(output, f"{STAGING_PREFIX}{uuid.uuid4().hex[:12]}")


def check_output_is_ours(output: str) -> None:
    """Refuse an output folder that holds files this job did not write: each run replaces
    the shards, errors/ and copies/ there, and would delete a user's `test-plan.txt` or
    `errors/` along with them."""
    output = output.rstrip("/")
    tops = {path[len(output) + 1 :].split("/", 1)[0] for path in files_under(output)}
    if not tops or tops & {CONFIG, METADATA, SUCCESS}:
        return  # new, empty, or written by this job before (finished or not)
    if all(name.startswith(STAGING_PREFIX) for name in tops):
        return  # a run killed before it wrote anything else
    shown = ", ".join(sorted(tops)[:3]) + (", ..." if len(tops) > 3 else "")
    raise InputError(
        f"--output {output} holds other files ({shown}) and is not a shard folder (no "
        f"{CONFIG} or {METADATA}): each run replaces the shards and errors/ there, so give "
        "a new or empty folder"
    )


def invalidate(output: str) -> None:
    """Make the output untrusted for the duration of a rerun."""
    marker = join(output, SUCCESS)
    if fs.exists(marker):
        fs.delete([marker])


def delete_tree(directory: str) -> None:
    paths = files_under(directory)
    if paths:
        fs.delete(paths)
    if fs.exists(directory):  # local folders (GCS has no folder objects)
        fs.delete([directory])


def read_json_lines(directory: str, pattern: str) -> list[dict]:
    """Rows of the JSON-lines files matching `pattern` in the literal `directory`."""
    return fs.read_json_lines(files_under(directory, pattern))


def write_bytes(path: str, data: bytes) -> None:
    with fs.create(path) as handle:
        handle.write(data)


def complete_shards(
    staging: str, plan: PlanOutline, reports: list[dict], config: ShardConfig
) -> list[dict]:
    """Write empty files for shards whose every image was rejected, so the
    `-of-N` set is always whole."""
    present = {(r["split"], r["index"]) for r in reports}
    empty = encode_shard([], config.compression)
    for split, count in plan.shard_counts.items():
        for index in range(count):
            if (split, index) in present:
                continue
            name = shard_name(split, index, count, config.compression)
            write_bytes(join(staging, name), empty)
            reports.append(
                {
                    "split": split,
                    "index": index,
                    "file": name,
                    "num_records": 0,
                    "num_bytes": len(empty),
                    "sha256": _sha256(empty),
                    "per_label": {},
                }
            )
    return sorted(reports, key=lambda r: (SPLIT_NAMES.index(r["split"]), r["index"]))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_metadata(
    config: ShardConfig,
    plan: PlanOutline,
    shard_reports: list[dict],
    errors: list[dict],
    runner: str,
    copies: list[dict] = (),
    statistics: list[dict] = (),
) -> dict:
    splits = {}
    for split in SPLIT_NAMES:
        shards = [r for r in shard_reports if r["split"] == split]
        per_label: Counter = Counter()
        for report in shards:
            per_label.update(report["per_label"])
        splits[split] = {
            "num_records": sum(r["num_records"] for r in shards),
            "num_shards": len(shards),
            "per_label": dict(sorted(per_label.items())),
            "shards": [
                {k: r[k] for k in ("file", "num_records", "num_bytes", "sha256")} for r in shards
            ],
        }
    num_inputs = plan.num_inputs
    num_errors = len(errors)
    error_fraction = num_errors / num_inputs if num_inputs else 0.0
    return {
        "schema_version": SCHEMA_VERSION,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "label_map": dict(sorted(plan.label_map.items(), key=lambda kv: kv[1])),
        "num_classes": len(plan.label_map),
        "compression": config.compression,
        "splits": splits,
        "num_inputs": num_inputs,
        "num_records": sum(s["num_records"] for s in splits.values()),
        "num_errors": num_errors,
        "error_fraction": round(error_fraction, 6),
        "errors_by_reason": dict(sorted(Counter(e["reason"] for e in errors).items())),
        "copies": copies_summary([c for c in copies if c.get("kind", "exact") == "exact"]),
        "statistics": dataset_statistics(statistics, splits, num_inputs, errors, copies).to_json(),
        "max_error_fraction": config.max_error_fraction,
        "params": config.to_json(),
        "runner": runner,
    }


def dataset_statistics(
    statistics: list[dict], splits: dict, num_inputs: int, errors: list[dict], copies: list[dict]
) -> DatasetStatistics:
    """The job's merged image statistics (one row, none when nothing was stored) with the
    counts metadata.json holds elsewhere, as shardspec.statistics types them."""
    per_label: Counter = Counter()
    for split in splits.values():
        per_label.update(split["per_label"])
    near = [c for c in copies if c.get("kind") == "near"]
    alike = [c for c in copies if c.get("kind") == "alike"]
    across = [g for g in near if len({i["split"] for i in g["images"]}) > 1]
    held_out = sum(
        1
        for group in across
        if any(i["split"] == "train" for i in group["images"])
        for image in group["images"]
        if image["split"] != "train"
    )
    return DatasetStatistics(
        version=STATISTICS_VERSION,
        images=ImageStatistics.from_json(statistics[0]) if statistics else ImageStatistics(),
        per_label=dict(per_label),
        per_split={name: split["num_records"] for name, split in splits.items()},
        num_inputs=num_inputs,
        errors_by_reason=dict(Counter(e["reason"] for e in errors)),
        exact_duplicate_groups=sum(1 for c in copies if c.get("kind", "exact") == "exact"),
        near_duplicate_groups=len(near),
        near_duplicate_groups_across_splits=len(across),
        held_out_with_near_copy_in_train=held_out,
        alike_groups=len(alike),
        alike_images=sum(c["num_images"] for c in alike),
    )


def copies_summary(groups: list[dict]) -> dict:
    """What metadata.json says of FindCopies' rows."""
    return {
        "groups": len(groups),
        "extra_copies": sum(len(g["images"]) - 1 for g in groups),
        "groups_across_labels": sum(len({i["label"] for i in g["images"]}) > 1 for g in groups),
        "groups_across_splits": sum(len({i["split"] for i in g["images"]}) > 1 for g in groups),
    }


def replace_output(output: str, staging: str, metadata: dict, *, success: bool) -> None:
    """Replace the previous output with the staged one; `_SUCCESS` last, if `success`."""
    # The readers' model of metadata.json is the contract: refuse, before touching the
    # previous output, to write a document they would refuse.
    FolderMetadata.from_json(metadata)
    for path in files_under(output, "*"):
        name = path.rsplit("/", 1)[-1]
        if name == METADATA or any(name.startswith(f"{s}-") for s in SPLIT_NAMES):
            fs.delete([path])
    for folder in (ERRORS_DIR, COPIES_DIR):
        delete_tree(join(output, folder))
    for stale in _staging_dirs(output) - {staging.rstrip("/")}:
        delete_tree(stale)

    staged = files_under(staging)
    sources, destinations = [], []
    for path in staged:
        relative = path[len(staging) :].lstrip("/")
        if relative.startswith("_"):  # the plan and shard reports stay private
            continue
        sources.append(path)
        destinations.append(join(output, relative))
    for parent in sorted({d.rsplit("/", 1)[0] for d in destinations}):
        fs.mkdirs(parent)
    fs.rename(sources, destinations)
    write_bytes(join(output, METADATA), json_bytes(metadata, indent=2))
    delete_tree(staging)
    if success:
        write_bytes(join(output, SUCCESS), b"")


def _staging_dirs(output: str) -> set[str]:
    """Staging folders in `output`, including those of earlier killed runs."""
    prefix = join(output, STAGING_PREFIX)
    return {
        prefix + path[len(prefix) :].split("/", 1)[0]
        for path in files_under(output, f"{STAGING_PREFIX}*/**")
    }
