"""The shard folder's layout: file names, the completion marker, compression.

<output>/_config.json                  the job's parameters, written when it starts
<output>/_SUCCESS                      written last; readers trust nothing without it
<output>/metadata.json                 schema version, label map, every shard's size
                                       and sha256 (see beam_jobs/output.py), and the
                                       data's statistics (shardspec/statistics.py)
<output>/{split}-{i:05d}-of-{n:05d}.tfrecord[.gz]
<output>/errors/                       dead letters, one JSON object per line
<output>/copies/                       copies-*.jsonl: images stored more than once
                                       (same bytes), one JSON object per content, kind
                                       exact; near-*.jsonl: groups of near-copies (pHash
                                       within --near-duplicate-distance), kind near
"""

from __future__ import annotations

SUCCESS = "_SUCCESS"
CONFIG = "_config.json"
METADATA = "metadata.json"
ERRORS_DIR = "errors"
COPIES_DIR = "copies"

# The splits a folder holds, in this order (its shard files are named after them).
SPLIT_NAMES = ("train", "validation", "test")

COMPRESSIONS = ("gzip", "none")
# What the writer uses by default and what a reader assumes when metadata.json
# does not say (it always does since schema 1; the fallback is only for safety).
DEFAULT_COMPRESSION = "none"


def shard_suffix(compression: str) -> str:
    return ".tfrecord.gz" if compression == "gzip" else ".tfrecord"


def shard_name(split: str, index: int, count: int, compression: str) -> str:
    return f"{split}-{index:05d}-of-{count:05d}{shard_suffix(compression)}"


def tf_compression_type(compression: str) -> str:
    """The `compression_type` string TensorFlow's readers expect."""
    return {"gzip": "GZIP", "none": ""}[compression]
