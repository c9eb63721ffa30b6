"""Pictures of a run a person would rather look at than read: training curves and the
held-out confusion matrix, as PNG beside the run's other outputs.

Written by the DAG's evaluate task from the training run's metrics and its evaluation; needs only
matplotlib (Agg, no display). Local paths and `gs://` both work (fsspec).
"""

from __future__ import annotations

import io
import posixpath

import fsspec

from runspec.layout import CONFUSION, CURVES
from runspec.record import RunFolderError, RunRecord


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: str) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    with fsspec.open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    return path


def training_curves(epochs: list[dict], path: str) -> str:
    """Loss and accuracy per epoch, training and validation."""
    plt = _pyplot()
    x = [e["epoch"] for e in epochs]
    figure, (loss, accuracy) = plt.subplots(1, 2, figsize=(9, 3.4))
    loss.plot(x, [e["train_loss"] for e in epochs], "o-", label="train")
    accuracy.plot(x, [e["train_accuracy"] for e in epochs], "o-", label="train")
    if all(e.get("val_loss") is not None for e in epochs):
        loss.plot(x, [e["val_loss"] for e in epochs], "s-", label="validation")
        accuracy.plot(x, [e["val_accuracy"] for e in epochs], "s-", label="validation")
    for axis, title in ((loss, "loss"), (accuracy, "accuracy")):
        axis.set_title(title)
        axis.set_xlabel("epoch")
        axis.grid(alpha=0.3)
        axis.legend()
    accuracy.set_ylim(0, 1)
    path = _save(figure, path)
    plt.close(figure)
    return path


def confusion_matrix(evaluation: dict, path: str) -> str:
    """Rows: true class; columns: predicted; each cell the count, shaded by row share."""
    plt = _pyplot()
    names, counts = evaluation["class_names"], evaluation["confusion"]
    shares = [[c / max(1, sum(row)) for c in row] for row in counts]
    size = max(3.5, 0.6 * len(names) + 1.5)
    figure, axis = plt.subplots(figsize=(size + 1, size))
    image = axis.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    axis.set_xticks(range(len(names)), names, rotation=45, ha="right")
    axis.set_yticks(range(len(names)), names)
    axis.set_xlabel("predicted")
    axis.set_ylabel("true")
    for i, row in enumerate(counts):
        for j, count in enumerate(row):
            axis.text(j, i, str(count), ha="center", va="center",
                      color="white" if shares[i][j] > 0.6 else "black")  # fmt: skip
    axis.set_title(
        f"{evaluation['split']} accuracy {evaluation['accuracy']:.3f} "
        f"({evaluation['num_examples']} images)"
    )
    figure.colorbar(image, ax=axis, fraction=0.046, label="share of the true class")
    path = _save(figure, path)
    plt.close(figure)
    return path


def write_run_plots(train_dir: str, evaluation: dict, out_dir: str) -> list[str]:
    """Both plots into `out_dir`; returns their paths."""
    record = RunRecord.read(train_dir)
    if record is None or not record.epochs:
        raise RunFolderError(f"{train_dir} holds no training run with epochs to plot")
    return [
        training_curves(record.epochs, posixpath.join(out_dir, CURVES)),
        confusion_matrix(evaluation, posixpath.join(out_dir, CONFUSION)),
    ]
