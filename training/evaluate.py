"""Evaluate an exported SavedModel the way it will be served, and gate on accuracy.

The model is fed the raw `image/encoded` bytes of a held-out split through its
`serving_default` signature, so the number measures the whole serving path
(decode, resize, model), not only the network on pre-decoded tensors.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
from collections import Counter

import tensorflow as tf

from runspec.layout import SAVED_MODEL
from shardspec.layout import SPLIT_NAMES
from stageconfig import user_path
from training import features
from training.gate import AccuracyGateFailed, BlessingRules, bless, check_gate, verdict_line
from training.model_files import EXTRA_DIR, LABELS_FILE, LATEST
from training.shards import ShardError, ShardSet


def model_file(model_dir: str, name: str):
    """A JSON file the exporter put beside the model (labels, training metadata), or None:
    a model not exported by this project has none (its labels are the shards' by trust)."""
    path = posixpath.join(model_dir, EXTRA_DIR, name)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def _model_labels(model_dir: str) -> list[str] | None:
    return model_file(model_dir, LABELS_FILE)


def _listed(names: list[str]) -> str:
    return f"{len(names)}: {', '.join(names[:6])}{', ...' if len(names) > 6 else ''}"


def resolve_baseline(path: str) -> tuple[str, int | None] | None:
    """(model folder, version) that `path` names: a model folder, or a published model's
    home (<model_root>/<name>) whose LATEST names the version; None: nothing published."""
    latest = posixpath.join(path, LATEST)
    if tf.io.gfile.exists(latest):
        with tf.io.gfile.GFile(latest) as handle:
            version = int(handle.read().strip())
        return posixpath.join(path, str(version)), version
    if tf.io.gfile.exists(posixpath.join(path, SAVED_MODEL)):
        return path, None
    return None


def _held_out(shard_set: ShardSet, shards_dir: str, split: str) -> tuple[str, list[str]]:
    """`split` test falls back to validation when the shards have no test records."""
    if split == "test" and not shard_set.num_records(split):
        split = "validation"  # a dataset without a test split still gets a held-out number
    files = shard_set.files(split)
    if not files or not shard_set.num_records(split):
        wanted = "test or validation" if split == "validation" else split
        raise ValueError(f"{shards_dir} has no {wanted} records to evaluate on")
    return split, files


class _Scores:
    """One model's counts over the held-out records."""

    def __init__(self, model_dir: str, num_classes: int):
        self.serve = tf.saved_model.load(model_dir).signatures["serving_default"]
        self.correct, self.total = Counter(), Counter()
        self.confusion = [[0] * num_classes for _ in range(num_classes)]  # [true][predicted]

    def add(self, encoded, labels) -> None:
        predicted = self.serve(images=encoded)["class_id"].numpy()
        for label, guess in zip(labels, predicted, strict=True):
            self.total[int(label)] += 1
            self.correct[int(label)] += int(label == guess)
            self.confusion[int(label)][int(guess)] += 1

    def f1(self, c: int) -> float:
        """The class's F1: its accuracy (recall) alone rewards calling everything `c`."""
        true_positive = self.confusion[c][c]
        predicted = sum(row[c] for row in self.confusion)
        denominator = self.total[c] + predicted
        return 2 * true_positive / denominator if denominator else 0.0

    def result(self, names: list[str]) -> dict:
        return {
            "num_examples": sum(self.total.values()),
            "accuracy": sum(self.correct.values()) / sum(self.total.values()),
            "per_class_accuracy": {
                names[c]: self.correct[c] / self.total[c] for c in sorted(self.total)
            },
            "per_class_examples": {names[c]: self.total[c] for c in sorted(self.total)},
            "per_class_f1": {names[c]: round(self.f1(c), 6) for c in sorted(self.total)},
            "confusion": self.confusion,
        }


def evaluate_saved_model(
    model_dir: str,
    shards_dir: str,
    split: str = "test",
    batch_size: int = 64,
    *,
    baseline: str | None = None,
) -> dict:
    """The model's scores on the held-out split, through its serving signature. With
    `baseline` (a model folder, or a published model's home: its LATEST), the baseline is
    scored on the same records in the same pass, under `"baseline"`; when it cannot be
    compared (nothing published, another label map), `"baseline_skipped"` says why."""
    shard_set = ShardSet.open(shards_dir)
    split, files = _held_out(shard_set, shards_dir, split)
    names = shard_set.label_names
    model_labels = _model_labels(model_dir)
    if model_labels is not None and model_labels != names:
        # Records carry label ids: under another label map every id means another class,
        # and the score is a number about nothing (it read 0.000 for a good model).
        raise ValueError(
            f"the model's labels ({_listed(model_labels)}) are not those of {shards_dir} "
            f"({_listed(names)}): give the shard folder the model was trained on"
        )
    models = {"candidate": _Scores(model_dir, len(names))}
    found, skipped = resolve_baseline(baseline) if baseline else None, None
    if baseline and found is None:
        skipped = f"nothing published at {baseline} yet: blessed on the gate alone"
    elif found:
        baseline_labels = _model_labels(found[0])
        if baseline_labels is not None and baseline_labels != names:
            skipped = (
                f"the serving model's labels ({_listed(baseline_labels)}) are not this "
                f"run's ({_listed(names)}): no comparison, blessed on the gate alone"
            )
        else:
            models["baseline"] = _Scores(found[0], len(names))
    records = (
        tf.data.TFRecordDataset(files, compression_type=shard_set.compression_type)
        .map(features.parse_example)
        .map(lambda f: (f[features.IMAGE_ENCODED], tf.cast(f[features.LABEL], tf.int32)))
        .batch(batch_size)
        .prefetch(2)
    )
    for encoded, labels in records:  # one pass: every model sees each batch once
        label_ids = labels.numpy()
        for scores in models.values():
            scores.add(encoded, label_ids)
    evaluation = {"split": split, "class_names": names, **models["candidate"].result(names)}
    if "baseline" in models:
        assert found is not None
        evaluation["baseline"] = {
            "path": found[0],
            "version": found[1],
            **models["baseline"].result(names),
        }
    elif skipped:
        evaluation["baseline_skipped"] = skipped
    return evaluation


__all__ = [  # the gate lives in training.gate (no TensorFlow); here for the CLI's users
    "AccuracyGateFailed",
    "check_gate",
    "evaluate_saved_model",
    "main",
    "write_evaluation",
]


def write_evaluation(evaluation: dict, path: str) -> None:
    tf.io.gfile.makedirs(posixpath.dirname(path))
    with tf.io.gfile.GFile(path, "w") as handle:
        json.dump(evaluation, handle, indent=2)


def main(argv: list[str] | None = None) -> int:
    """`python -m training.evaluate`: the DAG's evaluate task by hand."""
    parser = argparse.ArgumentParser(
        prog="python -m training.evaluate",
        description="Score an exported model on the held-out split of a shard folder (test, "
        "else validation) through its serving signature; print the accuracy per class, "
        "optionally compare it with a baseline (the serving model) on the same records, "
        "write evaluation.json, and exit 1 below the gate or when not blessed.",
    )
    parser.add_argument(
        "--model", required=True, type=user_path, help="SavedModel folder (RUN_DIR/model)."
    )
    parser.add_argument(
        "--data", required=True, type=user_path, help="Shard folder the model was trained on."
    )
    parser.add_argument(
        "--split",
        default="test",
        choices=SPLIT_NAMES,
        help="Split to score (default test; validation when there is no test split).",
    )
    parser.add_argument(
        "--output", type=user_path, help="Write the evaluation here (evaluation.json)."
    )
    parser.add_argument(
        "--accuracy-gate", type=float, default=0.0, help="Exit 1 below this accuracy."
    )
    parser.add_argument(
        "--baseline",
        type=user_path,
        help="The model to compare with: a SavedModel folder, or a published model's home "
        "(MODEL_ROOT/NAME: the version its LATEST names). Exit 1 when not blessed.",
    )
    defaults = BlessingRules()
    for flag, default, what in (
        ("--max-regression", defaults.max_regression, "overall accuracy"),
        ("--max-class-regression", defaults.max_class_regression, "a class's F1"),
    ):
        parser.add_argument(
            flag,
            type=float,
            default=default,
            help=f"Most {what} may fall below the baseline's and still be blessed "
            f"(default {default:g}; classes with fewer than {defaults.min_class_examples} "
            "held-out images are not compared).",
        )
    args = parser.parse_args(argv)
    for flag in ("accuracy_gate", "max_regression", "max_class_regression"):
        if not 0.0 <= getattr(args, flag) <= 1.0:
            name = "--" + flag.replace("_", "-")
            parser.error(f"argument {name}: {getattr(args, flag):g} is not in [0, 1]")
    if not tf.io.gfile.exists(posixpath.join(args.model, SAVED_MODEL)):
        print(f"error: no SavedModel at {args.model}", file=sys.stderr)
        return 2
    try:
        evaluation = evaluate_saved_model(
            args.model, args.data, split=args.split, baseline=args.baseline
        )
    except (ShardError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rules = BlessingRules(args.max_regression, args.max_class_regression)
    verdict = bless(evaluation, rules) if args.baseline else None
    if verdict:
        evaluation["verdict"] = verdict
    if args.output:
        write_evaluation(evaluation, args.output)
    per_class = ", ".join(f"{k} {v:.3f}" for k, v in evaluation["per_class_accuracy"].items())
    print(
        f"{evaluation['split']} accuracy {evaluation['accuracy']:.3f} on "
        f"{evaluation['num_examples']} images; per class: {per_class}"
    )
    if verdict:
        print(verdict_line(verdict))
    try:
        check_gate(evaluation, args.accuracy_gate)
    except AccuracyGateFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0 if verdict is None or verdict["blessed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
