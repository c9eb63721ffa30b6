"""The sharding job's one typed config, built from CLI flags and validated there.

Beam's own flags (runner, workers, Dataflow project...) are not part of it:
they stay ordinary `PipelineOptions`, so every runner's options pass through.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field

from beam_jobs.splits import SPLIT_NAMES
from shardspec.example import MAX_PIXELS

COMPRESSIONS = ("gzip", "none")
DEFAULT_SPLITS = "train=0.8,validation=0.1,test=0.1"


class ConfigError(ValueError):
    """A user mistake in the job's parameters; reported as one line, exit code 2."""


def parse_split_fractions(text: str) -> dict[str, float]:
    """'train=0.8,validation=0.2' -> ordered {train: .8, validation: .2, test: 0}."""
    given: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in SPLIT_NAMES:
            raise ConfigError(
                f"--splits: expected NAME=FRACTION with NAME in {', '.join(SPLIT_NAMES)}, "
                f"got {part!r}"
            )
        try:
            given[name] = float(value)
        except ValueError:
            raise ConfigError(f"--splits: {value!r} is not a number") from None
    fractions = {name: given.get(name, 0.0) for name in SPLIT_NAMES}
    if any(f < 0 for f in fractions.values()):
        raise ConfigError("--splits: fractions must not be negative")
    if fractions["train"] <= 0:
        raise ConfigError("--splits: the train fraction must be positive")
    if abs(sum(fractions.values()) - 1.0) > 1e-6:
        raise ConfigError(f"--splits: fractions must sum to 1, got {sum(fractions.values()):g}")
    return fractions


@dataclass(frozen=True)
class ShardConfig:
    input: str
    output: str
    max_side: int = 0
    split_fractions: dict[str, float] = field(
        default_factory=lambda: parse_split_fractions(DEFAULT_SPLITS)
    )
    target_shard_mb: float = 128.0
    num_shards: int | None = None
    min_shards: int = 2
    compression: str = "none"
    max_error_fraction: float = 0.05
    max_pixels: int = MAX_PIXELS
    label_map: str | None = None

    def __post_init__(self) -> None:
        if not self.input:
            raise ConfigError("--input is required")
        if not self.output:
            raise ConfigError("--output is required")
        if self.input.rstrip("/") == self.output.rstrip("/"):
            raise ConfigError("--output must differ from --input")
        if self.max_side < 0:
            raise ConfigError("--max-side must be >= 0 (0 keeps the original size)")
        if self.target_shard_mb <= 0:
            raise ConfigError("--target-shard-mb must be positive")
        if self.num_shards is not None and self.num_shards < 1:
            raise ConfigError("--num-shards must be >= 1")
        if self.min_shards < 1:
            raise ConfigError("--min-shards must be >= 1")
        if self.compression not in COMPRESSIONS:
            raise ConfigError(f"--compression must be one of {COMPRESSIONS}")
        if not 0.0 <= self.max_error_fraction <= 1.0:
            raise ConfigError("--max-error-fraction must be between 0 and 1")
        if self.max_pixels < 1:
            raise ConfigError("--max-pixels must be >= 1")

    @property
    def shard_suffix(self) -> str:
        return ".tfrecord.gz" if self.compression == "gzip" else ".tfrecord"

    def to_json(self) -> dict:
        return asdict(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        required=True,
        help="Root folder in <label>/<file> layout, or a manifest (.csv or .jsonl with "
        "uri,label and optional split columns); local path or gs://.",
    )
    parser.add_argument(
        "--output",
        required=True,
        help="Output folder (local or gs://). Replaced as a whole by each run; "
        "readers must wait for its _SUCCESS marker.",
    )
    parser.add_argument(
        "--max-side",
        type=int,
        default=0,
        help="Shrink images so their longest side is at most this many pixels "
        "(re-encoded). 0 (default) keeps the original size and bytes.",
    )
    parser.add_argument(
        "--splits",
        default=DEFAULT_SPLITS,
        help=f"Split fractions by hash of the image path (default {DEFAULT_SPLITS}). "
        "A manifest's split column overrides this per image.",
    )
    parser.add_argument(
        "--target-shard-mb",
        type=float,
        default=128.0,
        help="Target size of one shard in MB; sets the shard count per split (default 128).",
    )
    parser.add_argument(
        "--num-shards",
        type=int,
        default=None,
        help="Fixed number of shards per split, overriding --target-shard-mb.",
    )
    parser.add_argument(
        "--min-shards",
        type=int,
        default=2,
        help="At least this many shards per non-empty split (set it to the number of "
        "training workers so each gets its own files; default 2).",
    )
    parser.add_argument(
        "--compression",
        choices=COMPRESSIONS,
        default="none",
        help="Shard compression (default none: JPEG/PNG bytes do not shrink under gzip, "
        "which only costs the readers CPU; see bench/).",
    )
    parser.add_argument(
        "--max-error-fraction",
        type=float,
        default=0.05,
        help="Fail the job (exit 1, no _SUCCESS) when more than this fraction of the "
        "inputs is rejected (default 0.05).",
    )
    parser.add_argument(
        "--max-pixels",
        type=int,
        default=MAX_PIXELS,
        help="Reject images whose header claims more pixels than this, before decoding "
        f"them (decompression-bomb guard; default {MAX_PIXELS}).",
    )
    parser.add_argument(
        "--label-map",
        default=None,
        help="JSON file {label_name: id} to use instead of ids from sorted label names; "
        "images with other labels are dead-lettered.",
    )


def config_from_args(args: argparse.Namespace) -> ShardConfig:
    return ShardConfig(
        input=args.input,
        output=args.output,
        max_side=args.max_side,
        split_fractions=parse_split_fractions(args.splits),
        target_shard_mb=args.target_shard_mb,
        num_shards=args.num_shards,
        min_shards=args.min_shards,
        compression=args.compression,
        max_error_fraction=args.max_error_fraction,
        max_pixels=args.max_pixels,
        label_map=args.label_map,
    )
