"""What a person wants to know after a run, in a few lines: the published model, how good
it is per class, and where the evaluation, plots and TensorBoard logs are.

    python -m orchestration.summary --model-root MODELS [--model-name shapes]
"""

from __future__ import annotations

import argparse
import posixpath
import sys

import fsspec

from orchestration.publish import LATEST, PUBLISH_RECORD, latest_version
from runspec.layout import CONFUSION, CURVES, EVALUATION, METRICS, TENSORBOARD
from runspec.record import RunFolderError, RunRecord, read_json
from stageconfig import user_path


class SummaryError(ValueError):
    """Nothing (readable) is published under that name."""


def summary(model_root: str, model_name: str) -> str:
    home = posixpath.join(model_root.rstrip("/"), model_name)
    try:
        version = latest_version(model_root.rstrip("/"), model_name)
    except ValueError:
        raise SummaryError(f"{home}/{LATEST} does not hold a version number") from None
    if version is None:
        raise SummaryError(f"nothing published under {home} (no {LATEST})")
    published = posixpath.join(home, str(version))
    fs, path = fsspec.core.url_to_fs(published)
    if not fs.isdir(path):
        raise SummaryError(f"{home}/{LATEST} names version {version}, which is not there")
    record = read_json(posixpath.join(published, PUBLISH_RECORD)) or {}
    evaluation = record.get("evaluation") or {}
    train_dir = posixpath.dirname(record.get("source", "").rstrip("/"))
    run_dir = posixpath.dirname(train_dir)
    lines = [f"published {model_name} version {version}: {published}"]
    if evaluation:
        classes = len(evaluation.get("per_class_accuracy", {})) or 1
        per_class = ", ".join(
            f"{name} {accuracy:.2f}"
            for name, accuracy in sorted(evaluation.get("per_class_accuracy", {}).items())
        )
        lines.append(
            f"held-out {evaluation['split']} accuracy {evaluation['accuracy']:.3f} on "
            f"{evaluation['num_examples']} images (chance {1 / classes:.2f}); "
            f"per class: {per_class}"
        )
    if run_dir:
        lines.append(f"run folder: {run_dir}")
        lines.append(
            f"  {EVALUATION}, {CURVES}, {CONFUSION}; train/{METRICS}; "
            f"TensorBoard: tensorboard --logdir {posixpath.join(train_dir, TENSORBOARD)}"
        )
        run = RunRecord.read(train_dir)
        advice = (run.input_diagnosis if run else {}).get("advice")
        if advice:
            lines.append(f"input: {advice}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestration.summary", description=__doc__)
    parser.add_argument("--model-root", required=True, type=user_path)
    parser.add_argument("--model-name", default="shapes")
    args = parser.parse_args(argv)
    try:
        print(summary(args.model_root, args.model_name))
    except (SummaryError, RunFolderError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
