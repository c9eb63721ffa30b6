"""The sharding job's one typed config, built from CLI flags and validated there.

Beam's own flags (runner, workers, Dataflow project...) are not part of it:
they stay ordinary `PipelineOptions`, so every runner's options pass through.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

import stageconfig
from beam_jobs.perceptual_hash import DEFAULT_MAX_DISTANCE, MAX_DISTANCE_LIMIT
from beam_jobs.splits import SPLIT_NAMES
from shardspec.example import MAX_PIXELS
from shardspec.layout import COMPRESSIONS, DEFAULT_COMPRESSION
from stageconfig import ConfigError, param

DEFAULT_SPLITS = "train=0.8,validation=0.1,test=0.1"


def parse_split_fractions(text: str) -> dict[str, float]:
    """'train=0.8,validation=0.2' -> ordered {train: .8, validation: .2, test: 0}."""
    given: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in SPLIT_NAMES:
            raise ConfigError(
                f"expected NAME=FRACTION with NAME in {', '.join(SPLIT_NAMES)}, got {part!r}"
            )
        try:
            given[name] = float(value)
        except ValueError:
            raise ConfigError(f"{value!r} is not a number") from None
    fractions = {name: given.get(name, 0.0) for name in SPLIT_NAMES}
    if any(f < 0 for f in fractions.values()):
        raise ConfigError("fractions must not be negative")
    if fractions["train"] <= 0:
        raise ConfigError("the train fraction must be positive")
    if abs(sum(fractions.values()) - 1.0) > 1e-6:
        raise ConfigError(f"fractions must sum to 1, got {sum(fractions.values()):g}")
    return fractions


@dataclass(frozen=True)
class ShardConfig:
    input: str = param(
        help="Root folder in <label>/<file> layout, or a manifest (.csv or .jsonl with "
        "uri,label and optional split columns); local path or gs://",
        section="Data",
    )
    output: str = param(
        help="Output folder (local or gs://): new, empty, or an earlier output of this job "
        "(a folder holding other files is refused). Replaced as a whole by each run; "
        "readers must wait for its _SUCCESS marker",
        section="Data",
    )
    max_side: int = param(
        0,
        minimum=0,
        maximum=8192,
        help="Shrink stored images so their longest side is at most this many pixels "
        "(re-encoded); 0 keeps the original size and bytes",
        section="Data",
    )
    split_fractions: dict[str, float] = param(
        flag="splits",
        parse=parse_split_fractions,
        default_factory=lambda: parse_split_fractions(DEFAULT_SPLITS),
        help=f"Split fractions by hash of the image path ({DEFAULT_SPLITS}); "
        "a manifest's split column overrides this per image",
        section="Data",
    )
    target_shard_mb: float = param(
        128.0,
        minimum=0,
        exclusive_minimum=True,
        maximum=1 << 20,
        help="Target size of one shard in MB; sets the shard count per split",
        section="Data",
    )
    num_shards: int | None = param(
        None,
        minimum=1,
        maximum=1 << 20,
        help="Fixed number of shards per split, overriding --target-shard-mb",
        section="Data",
    )
    min_shards: int = param(
        2,
        minimum=1,
        maximum=1 << 16,
        help="At least this many shards per non-empty split (the number of training "
        "workers, so each gets its own files)",
        section="Data",
    )
    compression: str = param(
        DEFAULT_COMPRESSION,
        choices=COMPRESSIONS,
        help="Shard compression (none: JPEG/PNG bytes do not shrink under gzip, "
        "which only costs the readers CPU; see bench/)",
        section="Data",
    )
    max_error_fraction: float = param(
        0.05,
        minimum=0,
        maximum=1,
        help="Fail the job (exit 1, no _SUCCESS) when more than this fraction of the "
        "inputs is rejected",
        section="Data",
    )
    max_pixels: int = param(
        MAX_PIXELS,
        minimum=1,
        maximum=1 << 40,
        help="Reject images whose header claims more pixels than this, before decoding "
        "them (decompression-bomb guard)",
        section="Data",
    )
    max_file_mb: float = param(
        256.0,
        minimum=0,
        exclusive_minimum=True,
        maximum=1 << 20,
        help="Dead-letter files larger than this many MB (file_too_large) instead of "
        "reading them: every read is bounded",
        section="Data",
    )
    near_duplicate_distance: int = param(
        DEFAULT_MAX_DISTANCE,
        minimum=0,
        maximum=MAX_DISTANCE_LIMIT,
        help="Images whose 64-bit perceptual hashes differ in at most this many bits are "
        "near-copies (resized, re-encoded, slightly cropped or colour-jittered): listed in "
        "copies/ with kind near, and warned of when they span splits (0: the same pixels "
        "at 32x32 grey only)",
        section="Data",
    )
    leak_free_splits: bool = param(
        False,
        help="Keep each group of near-copies (and exact copies) in one split: the split its "
        "first member by split hash would get. Costs a first pass that reads and hashes "
        "every image; a manifest's split column still wins",
        section="Data",
    )
    cache_dir: str | None = param(
        None,
        help="Index of finished outputs by the fingerprint of their inputs and parameters: "
        "a run whose fingerprint is indexed there (and still complete) reuses that output "
        "instead of sharding again, copy-free (its metadata.json points at it)",
        section="Data",
    )
    force_reshard: bool = param(
        False, help="Shard even when --cache-dir holds an output for the same inputs"
    )
    label_map: str | None = param(
        None,
        help="JSON file {label_name: id} to use instead of ids from sorted label names; "
        "images with other labels are dead-lettered",
        section="Data",
    )
    allow_one_class: bool = param(
        False,
        help="Shard an input of a single label (no classifier trains on such shards alone); "
        "without it, one label is refused: usually --input is one folder above the class "
        "folders",
    )

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_dir", "label_map"):  # file://, ~ -> a path
            if getattr(self, name):
                object.__setattr__(self, name, stageconfig.user_path(getattr(self, name)))
        if not self.input:
            raise ConfigError("--input is required")
        if not self.output:
            raise ConfigError("--output is required")
        if self.input.rstrip("/") == self.output.rstrip("/"):
            raise ConfigError("--output must differ from --input")
        stageconfig.check(self)
        stageconfig.check_output_folder("--output", self.output)

    def to_json(self) -> dict:
        return asdict(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stageconfig.add_arguments(parser, ShardConfig)


def config_from_args(args: argparse.Namespace) -> ShardConfig:
    return stageconfig.from_args(ShardConfig, args)
