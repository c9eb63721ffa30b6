"""What a shard folder's images look like, as `metadata.json` records it under "statistics".

The sharding job measures every image once, as it reads it (beam_jobs.transforms: one
partial per chunk, merged by a combiner), so a run can be compared with the run the
serving model was trained on (datacheck) without reading a shard. The buckets are fixed
here, not fitted to the data, so two runs' histograms always line up:

- `side`: the image's width and height as read (before --max-side), in pixels;
- `aspect`: width / height as read;
- `stored_bytes`: the bytes stored for the image (after any re-encoding).

Bucket i holds values in [edges[i-1], edges[i]); the first bucket everything below
edges[0], the last everything from edges[-1] up: len(edges) + 1 counts.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

VERSION = 1
SIDE_EDGES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
ASPECT_EDGES = (0.5, 0.75, 0.9, 1.12, 1.34, 2.0)
BYTES_EDGES = (1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22)  # 4 KiB .. 4 MiB
HISTOGRAMS = {
    "width": SIDE_EDGES,
    "height": SIDE_EDGES,
    "aspect": ASPECT_EDGES,
    "stored_bytes": BYTES_EDGES,
}


def bucket(edges: tuple, value: float) -> int:
    return bisect.bisect_right(edges, value)


def bucket_names(histogram: str) -> list[str]:
    """Readable names of a histogram's buckets: '<32', '32-64', ..., '>=4096' (bytes in
    K and M)."""
    edges = HISTOGRAMS[histogram]

    def text(edge: float) -> str:
        if histogram != "stored_bytes":
            return f"{edge:g}"
        return f"{edge >> 20}M" if edge >= 1 << 20 else f"{edge >> 10}K"

    middle = [f"{text(a)}-{text(b)}" for a, b in pairwise(edges)]
    return [f"<{text(edges[0])}", *middle, f">={text(edges[-1])}"]


@dataclass
class ImageStatistics:
    """Counts over stored images; merged across chunks and workers (a Beam combiner's
    accumulator). JSON-able through to_json / from_json."""

    num_images: int = 0
    reencoded: int = 0
    histograms: dict[str, list[int]] = field(
        default_factory=lambda: {name: [0] * (len(e) + 1) for name, e in HISTOGRAMS.items()}
    )
    source_formats: Counter = field(default_factory=Counter)
    stored_formats: Counter = field(default_factory=Counter)

    def add(
        self,
        *,
        width: int,
        height: int,
        stored_bytes: int,
        source_format: str,
        stored_format: str,
        reencoded: bool,
    ) -> None:
        self.num_images += 1
        self.reencoded += int(reencoded)
        values = {
            "width": width,
            "height": height,
            "aspect": width / height,
            "stored_bytes": stored_bytes,
        }
        for name, value in values.items():
            self.histograms[name][bucket(HISTOGRAMS[name], value)] += 1
        self.source_formats[source_format.lower()] += 1
        self.stored_formats[stored_format.lower()] += 1

    def merge(self, other: ImageStatistics) -> ImageStatistics:
        self.num_images += other.num_images
        self.reencoded += other.reencoded
        for name, counts in other.histograms.items():
            mine = self.histograms[name]
            for i, count in enumerate(counts):
                mine[i] += count
        self.source_formats.update(other.source_formats)
        self.stored_formats.update(other.stored_formats)
        return self

    def to_json(self) -> dict:
        return {
            "num_images": self.num_images,
            "reencoded": self.reencoded,
            "histograms": {name: list(counts) for name, counts in self.histograms.items()},
            "source_formats": dict(sorted(self.source_formats.items())),
            "stored_formats": dict(sorted(self.stored_formats.items())),
        }

    @classmethod
    def from_json(cls, raw: dict) -> ImageStatistics:
        stats = cls(
            num_images=int(raw["num_images"]),
            reencoded=int(raw["reencoded"]),
            source_formats=Counter(raw["source_formats"]),
            stored_formats=Counter(raw["stored_formats"]),
        )
        for name, counts in raw["histograms"].items():
            if name in stats.histograms and len(counts) == len(stats.histograms[name]):
                stats.histograms[name] = [int(c) for c in counts]
        return stats


@dataclass(frozen=True)
class DatasetStatistics:
    """metadata.json's "statistics", typed: what the data checks compare between runs."""

    version: int
    images: ImageStatistics
    per_label: dict[str, int]  # stored images per label, all splits
    per_split: dict[str, int]
    num_inputs: int
    errors_by_reason: dict[str, int]
    exact_duplicate_groups: int
    near_duplicate_groups: int
    near_duplicate_groups_across_splits: int
    held_out_with_near_copy_in_train: int  # validation and test images
    # Components of more than beam_jobs.perceptual_hash.MAX_GROUP_SIZE images: alike, not
    # copies (not counted above).
    alike_groups: int = 0
    alike_images: int = 0

    @property
    def error_share(self) -> float:
        return sum(self.errors_by_reason.values()) / self.num_inputs if self.num_inputs else 0.0

    @property
    def reencoded_share(self) -> float:
        return self.images.reencoded / self.images.num_images if self.images.num_images else 0.0

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "buckets": {
                "width": list(SIDE_EDGES),
                "height": list(SIDE_EDGES),
                "aspect": list(ASPECT_EDGES),
                "stored_bytes": list(BYTES_EDGES),
            },
            **self.images.to_json(),
            "reencoded_share": round(self.reencoded_share, 6),
            "per_label": dict(sorted(self.per_label.items())),
            "per_split": dict(self.per_split),
            "num_inputs": self.num_inputs,
            "errors_by_reason": dict(sorted(self.errors_by_reason.items())),
            "error_share": round(self.error_share, 6),
            "duplicates": {
                "exact_groups": self.exact_duplicate_groups,
                "near_groups": self.near_duplicate_groups,
                "near_groups_across_splits": self.near_duplicate_groups_across_splits,
                "held_out_with_near_copy_in_train": self.held_out_with_near_copy_in_train,
                "alike_groups": self.alike_groups,
                "alike_images": self.alike_images,
            },
        }


class StatisticsError(ValueError):
    pass


def read_statistics(metadata: dict[str, Any]) -> DatasetStatistics | None:
    """The one reader of a shard folder's statistics: None for folders written before
    they were measured; StatisticsError for a version this code does not read."""
    raw = metadata.get("statistics")
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        found = raw.get("version") if isinstance(raw, dict) else raw
        raise StatisticsError(
            f"statistics version {found!r}; this code reads version {VERSION}: reshard"
        )
    try:
        duplicates = raw["duplicates"]
        return DatasetStatistics(
            version=VERSION,
            images=ImageStatistics.from_json(raw),
            per_label={str(k): int(v) for k, v in raw["per_label"].items()},
            per_split={str(k): int(v) for k, v in raw["per_split"].items()},
            num_inputs=int(raw["num_inputs"]),
            errors_by_reason={str(k): int(v) for k, v in raw["errors_by_reason"].items()},
            exact_duplicate_groups=int(duplicates["exact_groups"]),
            near_duplicate_groups=int(duplicates["near_groups"]),
            near_duplicate_groups_across_splits=int(duplicates["near_groups_across_splits"]),
            held_out_with_near_copy_in_train=int(duplicates["held_out_with_near_copy_in_train"]),
            alike_groups=int(duplicates.get("alike_groups", 0)),
            alike_images=int(duplicates.get("alike_images", 0)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise StatisticsError(f"statistics are malformed: {type(err).__name__}: {err}") from None
