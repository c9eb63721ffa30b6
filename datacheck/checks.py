"""Anomalies between two runs' dataset statistics: pure functions over shardspec's types.

Each kind of anomaly is reported at most once per comparison, however many labels or
buckets it concerns, so a report reads as one line per problem and `fail` stops on each.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from datacheck.config import DataCheckConfig
from shardspec.statistics import DatasetStatistics

# Values equal to a threshold pass: computed shares carry float noise (0.15000000000000002).
TIE = 1e-9
KINDS = ("labels_added", "labels_gone", "label_shift", "size_drift", "error_share", "fewer_images")


@dataclass(frozen=True)
class Anomaly:
    kind: str
    message: str
    value: float
    threshold: float

    def to_json(self) -> dict:
        return asdict(self)


def shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def linf_distance(p: dict[str, float], q: dict[str, float]) -> float:
    """max |p_i - q_i| over the union of keys (a missing key has share 0)."""
    return max((abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in {*p, *q}), default=0.0)


def js_distance(p: list[int], q: list[int]) -> float:
    """Jensen-Shannon distance (the square root of the divergence, base 2: 0..1) between
    two histograms over the same buckets; 0 when either is empty."""
    sp, sq = sum(p), sum(q)
    if not sp or not sq or len(p) != len(q):
        return 0.0
    a, b = [x / sp for x in p], [x / sq for x in q]
    m = [(x + y) / 2 for x, y in zip(a, b, strict=True)]

    def kl(x: list[float]) -> float:
        return sum(xi * math.log2(xi / mi) for xi, mi in zip(x, m, strict=True) if xi > 0)

    return math.sqrt(max(0.0, (kl(a) + kl(b)) / 2))


def _names(labels: list[str]) -> str:
    shown = ", ".join(repr(label) for label in labels[:5])
    return shown + (f" and {len(labels) - 5} more" if len(labels) > 5 else "")


def compare(
    current: DatasetStatistics, baseline: DatasetStatistics, config: DataCheckConfig
) -> list[Anomaly]:
    """This run's anomalies against the baseline's data, in KINDS order."""
    found: list[Anomaly] = []
    added = sorted(set(current.per_label) - set(baseline.per_label))
    gone = sorted(set(baseline.per_label) - set(current.per_label))
    if added:
        found.append(
            Anomaly("labels_added", f"{len(added)} new label(s): {_names(added)}", len(added), 0)
        )
    if gone:
        found.append(
            Anomaly(
                "labels_gone",
                f"{len(gone)} label(s) gone (no stored image): {_names(gone)}",
                len(gone),
                0,
            )
        )
    now, before = shares(current.per_label), shares(baseline.per_label)
    shift = linf_distance(now, before)
    if shift > config.max_label_shift + TIE:
        label = max({*now, *before}, key=lambda k: abs(now.get(k, 0.0) - before.get(k, 0.0)))
        found.append(
            Anomaly(
                "label_shift",
                f"label shares moved by {shift:.3f} (L-infinity; allowed "
                f"{config.max_label_shift:g}): most {label!r}, {before.get(label, 0.0):.1%} -> "
                f"{now.get(label, 0.0):.1%}",
                round(shift, 6),
                config.max_label_shift,
            )
        )
    drifts = {
        name: js_distance(current.images.histograms[name], baseline.images.histograms[name])
        for name in ("width", "height")
    }
    name, drift = max(drifts.items(), key=lambda kv: kv[1])
    if drift > config.max_size_drift + TIE:
        found.append(
            Anomaly(
                "size_drift",
                f"image {name}s moved (Jensen-Shannon distance {drift:.3f}; allowed "
                f"{config.max_size_drift:g}): see the size histograms in data_check.png",
                round(drift, 6),
                config.max_size_drift,
            )
        )
    rise = current.error_share - baseline.error_share
    if rise > config.max_error_share_rise + TIE:
        found.append(
            Anomaly(
                "error_share",
                f"rejected inputs rose from {baseline.error_share:.1%} to "
                f"{current.error_share:.1%} (allowed +{config.max_error_share_rise:g}); by "
                f"reason: {current.errors_by_reason}",
                round(rise, 6),
                config.max_error_share_rise,
            )
        )
    before_n, now_n = baseline.images.num_images, current.images.num_images
    drop = (before_n - now_n) / before_n if before_n else 0.0
    if drop > config.max_image_drop + TIE:
        found.append(
            Anomaly(
                "fewer_images",
                f"{now_n} images stored, {drop:.0%} fewer than the baseline's {before_n} "
                f"(allowed {config.max_image_drop:.0%})",
                round(drop, 6),
                config.max_image_drop,
            )
        )
    return found
