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
from training.gate import AccuracyGateFailed, check_gate
from training.model_files import EXTRA_DIR, LABELS_FILE
from training.shards import ShardError, ShardSet


def _model_labels(model_dir: str) -> list[str] | None:
    path = posixpath.join(model_dir, EXTRA_DIR, LABELS_FILE)
    if not tf.io.gfile.exists(path):
        return None  # not exported by this project: its labels are the shards' by trust
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def _listed(names: list[str]) -> str:
    return f"{len(names)}: {', '.join(names[:6])}{', ...' if len(names) > 6 else ''}"


def evaluate_saved_model(
    model_dir: str, shards_dir: str, split: str = "test", batch_size: int = 64
) -> dict:
    """`split` test falls back to validation when the shards have no test records."""
    shard_set = ShardSet.open(shards_dir)
    if split == "test" and not shard_set.num_records(split):
        split = "validation"  # a dataset without a test split still gets a held-out number
    files = shard_set.files(split)
    if not files or not shard_set.num_records(split):
        wanted = "test or validation" if split == "validation" else split
        raise ValueError(f"{shards_dir} has no {wanted} records to evaluate on")
    names = shard_set.label_names
    model_labels = _model_labels(model_dir)
    if model_labels is not None and model_labels != names:
        # Records carry label ids: under another label map every id means another class,
        # and the score is a number about nothing (it read 0.000 for a good model).
        raise ValueError(
            f"the model's labels ({_listed(model_labels)}) are not those of {shards_dir} "
            f"({_listed(names)}): give the shard folder the model was trained on"
        )
    serve = tf.saved_model.load(model_dir).signatures["serving_default"]
    records = (
        tf.data.TFRecordDataset(files, compression_type=shard_set.compression_type)
        .map(features.parse_example)
        .map(lambda f: (f[features.IMAGE_ENCODED], tf.cast(f[features.LABEL], tf.int32)))
        .batch(batch_size)
    )
    correct, total = Counter(), Counter()
    confusion = [[0] * len(names) for _ in names]  # [true][predicted]
    for encoded, labels in records:
        predicted = serve(images=encoded)["class_id"].numpy()
        for label, guess in zip(labels.numpy(), predicted, strict=True):
            total[int(label)] += 1
            correct[int(label)] += int(label == guess)
            confusion[int(label)][int(guess)] += 1
    return {
        "split": split,
        "num_examples": sum(total.values()),
        "accuracy": sum(correct.values()) / sum(total.values()),
        "per_class_accuracy": {names[c]: correct[c] / total[c] for c in sorted(total)},
        "class_names": names,
        "confusion": confusion,
    }


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
        "optionally write evaluation.json and refuse below a gate (exit 1).",
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
    args = parser.parse_args(argv)
    if not 0.0 <= args.accuracy_gate <= 1.0:
        parser.error(f"argument --accuracy-gate: {args.accuracy_gate:g} is not in [0, 1]")
    if not tf.io.gfile.exists(posixpath.join(args.model, SAVED_MODEL)):
        print(f"error: no SavedModel at {args.model}", file=sys.stderr)
        return 2
    try:
        evaluation = evaluate_saved_model(args.model, args.data, split=args.split)
    except (ShardError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.output:
        write_evaluation(evaluation, args.output)
    per_class = ", ".join(f"{k} {v:.3f}" for k, v in evaluation["per_class_accuracy"].items())
    print(
        f"{evaluation['split']} accuracy {evaluation['accuracy']:.3f} on "
        f"{evaluation['num_examples']} images; per class: {per_class}"
    )
    try:
        check_gate(evaluation, args.accuracy_gate)
    except AccuracyGateFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
