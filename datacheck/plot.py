"""The data check's one picture: label shares and the size histograms, this run beside the
baseline (matplotlib, Agg; local paths and gs:// through fsspec)."""

from __future__ import annotations

import io

import fsspec

from shardspec.statistics import DatasetStatistics, bucket_names


def draw(current: DatasetStatistics, baseline: DatasetStatistics | None, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("label share", sorted({*current.per_label, *(baseline.per_label if baseline else {})})),
        ("width", bucket_names("width")),
        ("height", bucket_names("height")),
        ("stored_bytes", bucket_names("stored_bytes")),
    ]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for axis, (name, buckets) in zip(axes, panels, strict=True):
        series = [("this run", current)] + ([("baseline", baseline)] if baseline else [])
        width = 0.8 / len(series)
        for n, (label, stats) in enumerate(series):
            if name == "label share":
                total = sum(stats.per_label.values()) or 1
                values = [stats.per_label.get(b, 0) / total for b in buckets]
            else:
                counts = stats.images.histograms[name]
                values = [c / (sum(counts) or 1) for c in counts]
            axis.bar([i + n * width for i in range(len(buckets))], values, width, label=label)
        axis.set_xticks([i + 0.4 - width / 2 for i in range(len(buckets))])
        axis.set_xticklabels(buckets, rotation=60, ha="right", fontsize=7)
        axis.set_title(name.replace("_", " ") + ("" if name == "label share" else " (share)"))
    axes[0].legend(fontsize=8)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    with fsspec.open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    return path
