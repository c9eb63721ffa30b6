"""A run's held-out evaluation and the publish decision taken from it.

The candidate and the serving model (`LATEST` of the run's model name) are scored on
the same held-out records in one pass; `training.gate.bless` then decides whether the
candidate may replace it, and the verdict is kept in `evaluation.json`, the XCom that
`publish` reads, and the publish record. Where the scores are computed: here for the
local launcher, beside the training for the remote ones.

With `kubernetes` or `vertex` the trainers run with `--evaluate`, so their chief
scores the exported model where it trained and writes `evaluation.json` into the
run's train folder; the Airflow task then only reads that file (no TensorFlow,
no pass over the held-out shards on the scheduler's machine). The local
launcher trains on this machine anyway, so the task evaluates here.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

import fsspec

from orchestration.reuse import shards_content_id
from orchestration.runs import RunPaths
from runspec.layout import EVALUATION
from runspec.record import RunFolderError, read_json
from stageconfig import user_path
from training.gate import BlessingRules, bless, check_gate, verdict_line


class EvaluationMissing(RuntimeError):
    pass


def evaluate_run(
    launcher: str, *, model_dir: str, shards_dir: str, train_dir: str, baseline: str | None = None
) -> dict:
    if launcher == "local":
        from training.evaluate import evaluate_saved_model  # TensorFlow, on this machine

        return evaluate_saved_model(model_dir, shards_dir, baseline=baseline)
    path = posixpath.join(train_dir, EVALUATION)
    evaluation = read_json(path)
    if evaluation is None:
        raise EvaluationMissing(
            f"{path} was not written: the {launcher} trainers evaluate the model when run "
            "with --evaluate (train_flags sets it for remote launchers)"
        )
    return evaluation


def scored_before(model_dir: str, shards_dir: str, model_home_dir: str) -> dict | None:
    """The evaluation of a candidate that is the serving model itself (reuse_training took
    the run it was published from), on records with the same content as those it was
    scored on when published: those scores, for it and as its own baseline. None when any
    of that does not hold (then it is scored). Scoring it again would give the same
    numbers, after loading TensorFlow and two models and a pass over the held-out split."""
    from orchestration.publish import PUBLISH_RECORD, latest_version, model_identity

    try:
        home = model_home_dir.rstrip("/")
        version = latest_version(posixpath.dirname(home), posixpath.basename(home))
        if version is None:
            return None
        serving = posixpath.join(model_home_dir, str(version))
        record = read_json(posixpath.join(serving, PUBLISH_RECORD)) or {}
        earlier = record.get("evaluation") or {}
        if not earlier.get("evaluation_path") or not earlier.get("shards_dir"):
            return None
        if record.get("model") != model_identity(model_dir):
            return None
        now = shards_content_id(shards_dir)
        if not now or now != shards_content_id(earlier["shards_dir"]):
            return None
        scored = read_json(earlier["evaluation_path"])
    except (RunFolderError, OSError, ValueError):
        return None
    if not scored or "accuracy" not in scored:
        return None
    own = {k: v for k, v in scored.items() if k not in ("baseline", "baseline_skipped", "verdict")}
    scores = {k: v for k, v in own.items() if k not in ("split", "class_names")}
    return {
        **own,
        "baseline": {"path": serving, "version": version, **scores},
        "scored_before": (
            f"the candidate is the serving model (version {version}), scored on records of "
            f"the same content by {earlier['evaluation_path']}: not scored again"
        ),
    }


def write_json(document: dict, path: str) -> None:
    with fsspec.open(path, "w", auto_mkdir=True) as handle:
        json.dump(document, handle, indent=2)


def model_home(params: Mapping[str, Any]) -> str:
    """<model_root>/<model_name>: where the run publishes, and whose LATEST is its baseline."""
    return posixpath.join(user_path(params["model_root"]).rstrip("/"), params["model_name"])


def blessing_rules(params: Mapping[str, Any]) -> BlessingRules:
    return BlessingRules(
        max_regression=params.get("max_regression", BlessingRules.max_regression),
        max_class_regression=params.get("max_class_regression", BlessingRules.max_class_regression),
    )


def evaluate_and_bless(
    params: Mapping[str, Any], *, model_dir: str, paths: RunPaths, log=print
) -> dict:
    """The evaluate task: score, decide, write evaluation.json and the plots; the small
    summary `publish` and the run's note read. AccuracyGateFailed below the gate."""
    from orchestration.plots import write_run_plots

    # The run folder that trained the model: this run's, or with reuse_training an
    # earlier run's (its record, its curves, a remote launcher's evaluation).
    train_dir = posixpath.dirname(model_dir.rstrip("/"))
    evaluation = scored_before(model_dir, paths.shards, model_home(params))
    if evaluation:
        log(evaluation["scored_before"])
    else:
        evaluation = evaluate_run(
            params["training_launcher"],
            model_dir=model_dir,
            shards_dir=paths.shards,
            train_dir=train_dir,
            baseline=model_home(params),
        )
    verdict = bless(evaluation, blessing_rules(params))
    evaluation["verdict"] = verdict
    write_json(evaluation, paths.evaluation)
    pictures = write_run_plots(train_dir, evaluation, paths.root)
    per_class = ", ".join(f"{k} {v:.2f}" for k, v in evaluation["per_class_accuracy"].items())
    log(
        f"held-out accuracy {evaluation['accuracy']:.3f} on {evaluation['num_examples']} "
        f"{evaluation['split']} images (per class: {per_class}); plots: {', '.join(pictures)}"
    )
    log(verdict_line(verdict))
    check_gate(evaluation, params["accuracy_gate"])
    baseline = evaluation.get("baseline")
    return {  # small: XCom, and the publish record's copy
        "accuracy": evaluation["accuracy"],
        "split": evaluation["split"],
        "num_examples": evaluation["num_examples"],
        "per_class_accuracy": evaluation["per_class_accuracy"],
        "per_class_f1": evaluation.get("per_class_f1"),
        "baseline": {
            key: baseline.get(key)
            for key in ("version", "path", "accuracy", "per_class_accuracy", "per_class_f1")
        }
        if baseline
        else None,
        "verdict": verdict,
        "model_dir": model_dir,
        "shards_dir": paths.shards,  # what the next run's data checks compare with
        "evaluation_path": paths.evaluation,
    }
