"""Deterministic train/validation/test assignment.

The split of an image is a pure function of its key (its path relative to the
input root, or its manifest uri), so reruns, added images and other runners
never move an existing image to another split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from shardspec.layout import SPLIT_NAMES

__all__ = [
    "SPLIT_ALIASES",
    "SPLIT_NAMES",
    "assign_split",
    "hash_fraction",
    "hash_fractions",
    "split_at",
    "split_name",
]

# What a manifest's split column may also say, in any case (spreadsheets and other tools'
# habits): the long forms and the usual short names of the validation split.
SPLIT_ALIASES = {
    "training": "train",
    "val": "validation",
    "valid": "validation",
    "dev": "validation",
    "testing": "test",
}
# 2**64 buckets: fine-grained enough that fractions are honoured exactly in expectation.
_BUCKETS = 2**64


def split_name(text: str) -> str | None:
    """A manifest's split cell as a split name; "" for none given, None for no split."""
    name = text.strip().lower()
    name = SPLIT_ALIASES.get(name, name)
    return name if name in SPLIT_NAMES or not name else None


def hash_fraction(key: str) -> float:
    """Map a key to [0, 1) uniformly and stably (sha256, not Python's salted hash)."""
    return hash_fractions(key)[0]


def hash_fractions(key: str) -> tuple[float, float]:
    """Two independent uniform fractions of one sha256 of the key: `hash_fraction(key)`
    (which decides the split) and one from the next 8 bytes (the planner's order within
    a split), so planning hashes each key once."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return (
        int.from_bytes(digest[:8], "big") / _BUCKETS,
        int.from_bytes(digest[8:16], "big") / _BUCKETS,
    )


def assign_split(key: str, fractions: Mapping[str, float]) -> str:
    """The split whose cumulative range holds `hash_fraction(key)` (see split_at)."""
    return split_at(hash_fraction(key), fractions)


def split_at(point: float, fractions: Mapping[str, float]) -> str:
    """Return the split whose cumulative range holds `point`.

    `fractions` is ordered (train, validation, test) and sums to 1; splits with
    a zero fraction never receive an image.
    """
    cumulative = 0.0
    last = None
    for name, fraction in fractions.items():
        if fraction <= 0:
            continue
        cumulative += fraction
        last = name
        if point < cumulative:
            return name
    if last is None:
        raise ValueError("all split fractions are zero")
    return last  # floating point rounding at the very top of the range


def group_splits(group: dict) -> dict[str, str]:
    """key -> split for every member of a group of copies: the split of its first member
    in split-hash order, so the choice depends only on the group's own images (nothing
    for a group of look-alikes, whose members keep their own splits)."""
    if not group["images"]:
        return {}
    first = min(group["images"], key=lambda image: (hash_fraction(image["key"]), image["key"]))
    return {image["key"]: first["split"] for image in group["images"]}
