"""Where a run's held-out evaluation is computed: here for the local launcher, beside the
training for the remote ones.

With `kubernetes` or `vertex` the trainers run with `--evaluate`, so their chief
scores the exported model where it trained and writes `evaluation.json` into the
run's train folder; the Airflow task then only reads that file (no TensorFlow,
no pass over the held-out shards on the scheduler's machine). The local
launcher trains on this machine anyway, so the task evaluates here.
"""

from __future__ import annotations

import json
import posixpath

import fsspec

from runspec.layout import EVALUATION
from runspec.record import read_json


class EvaluationMissing(RuntimeError):
    pass


def evaluate_run(launcher: str, *, model_dir: str, shards_dir: str, train_dir: str) -> dict:
    if launcher == "local":
        from training.evaluate import evaluate_saved_model  # TensorFlow, on this machine

        return evaluate_saved_model(model_dir, shards_dir)
    path = posixpath.join(train_dir, EVALUATION)
    evaluation = read_json(path)
    if evaluation is None:
        raise EvaluationMissing(
            f"{path} was not written: the {launcher} trainers evaluate the model when run "
            "with --evaluate (train_flags sets it for remote launchers)"
        )
    return evaluation


def write_json(document: dict, path: str) -> None:
    with fsspec.open(path, "w", auto_mkdir=True) as handle:
        json.dump(document, handle, indent=2)
