"""Remote launchers evaluate where they trained; the Airflow task only reads the result."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.evaluation import EvaluationMissing, evaluate_run
from orchestration.params import dag_params, train_flags

PARAMS = dag_params(input_uri="i", output_root="o", model_root="m")
DEFAULTS = {name: fields["default"] for name, fields in PARAMS.items()}


def test_remote_launchers_ask_the_trainers_to_evaluate_and_local_does_not():
    assert "evaluate" not in train_flags(DEFAULTS) and "baseline" not in train_flags(DEFAULTS)
    for launcher in ("kubernetes", "vertex"):
        flags = train_flags({**DEFAULTS, "training_launcher": launcher})
        # Beside the serving model: LATEST of the run's model name, read by the trainer.
        assert flags["evaluate"] is True and flags["baseline"] == "m/shapes"


@pytest.mark.slow
def test_a_remote_runs_evaluation_is_read_without_tensorflow(tmp_path):
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    written = {"accuracy": 0.9, "split": "test", "num_examples": 10, "per_class_accuracy": {}}
    (train_dir / "evaluation.json").write_text(json.dumps(written))
    script = (
        "import json, sys; from orchestration.evaluation import evaluate_run; "
        "e = evaluate_run('kubernetes', model_dir='x', shards_dir='y', train_dir=sys.argv[1]); "
        "print(json.dumps([e, 'tensorflow' in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(train_dir)], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [written, False]


def test_a_missing_remote_evaluation_says_why_in_one_line(tmp_path):
    with pytest.raises(EvaluationMissing, match="--evaluate"):
        evaluate_run("vertex", model_dir="m", shards_dir="s", train_dir=str(tmp_path))


def test_a_reused_training_is_evaluated_and_plotted_from_its_own_run_folder(tmp_path):
    """reuse_training: the model is an earlier run's; its evaluation (remote launchers)
    and training curves are in that run's folder, and this run's train/ is empty."""
    from orchestration.evaluation import evaluate_and_bless
    from orchestration.runs import RunPaths
    from tests.orchestration.test_run_report import EVALUATION, METRICS

    earlier = RunPaths.for_run(str(tmp_path), "manual__1")
    train = tmp_path / "runs" / "manual__1" / "train"
    train.mkdir(parents=True)
    (train / "metrics.json").write_text(json.dumps(METRICS))
    (train / "config.json").write_text("{}")
    (train / "evaluation.json").write_text(json.dumps(EVALUATION))
    this = RunPaths.for_run(str(tmp_path), "manual__2")
    params = {**DEFAULTS, "training_launcher": "kubernetes", "model_root": str(tmp_path / "m")}
    result = evaluate_and_bless(
        params, model_dir=f"{earlier.train}/model", paths=this, log=lambda _: None
    )
    assert result["accuracy"] == EVALUATION["accuracy"]
    written = json.loads((tmp_path / "runs" / "manual__2" / "evaluation.json").read_text())
    assert written["accuracy"] == EVALUATION["accuracy"]
    assert (tmp_path / "runs" / "manual__2" / "training_curves.png").exists()


def _shards(folder, sha="a1"):
    from shardspec.example import SCHEMA_VERSION

    folder.mkdir(parents=True)
    shard = {"file": "test-00000-of-00001.tfrecord", "num_records": 40, "sha256": sha}
    metadata = {
        "schema_version": SCHEMA_VERSION,
        "label_map": {"circle": 0, "square": 1},
        "compression": "none",
        "splits": {"test": {"num_records": 40, "shards": [shard]}},
    }
    (folder / "metadata.json").write_text(json.dumps(metadata))
    return str(folder)


def _published_run(tmp_path, weights="w1"):
    """Run 1 trained, evaluated and published a model; -> (its model, this run's paths)."""
    from orchestration.publish import publish_model
    from orchestration.runs import RunPaths
    from tests.orchestration.test_run_report import EVALUATION, METRICS
    from training.model_files import EXTRA_DIR, METADATA_FILE, WEIGHTS_FINGERPRINT

    first = RunPaths.for_run(str(tmp_path), "scheduled__1")
    model = tmp_path / "runs" / "scheduled__1" / "train" / "model"
    (model / EXTRA_DIR).mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"graph")
    (model / EXTRA_DIR / METADATA_FILE).write_text(json.dumps({WEIGHTS_FINGERPRINT: weights}))
    (model.parent / "metrics.json").write_text(json.dumps(METRICS))
    (model.parent / "config.json").write_text("{}")
    _shards(tmp_path / "runs" / "scheduled__1" / "shards")
    Path(first.evaluation).write_text(json.dumps({**EVALUATION, "baseline_skipped": "none yet"}))
    evaluated = {"evaluation_path": first.evaluation, "shards_dir": first.shards}
    publish_model(str(model), str(tmp_path / "m"), "shapes", run_id="scheduled__1",
                  evaluation=evaluated)  # fmt: skip
    return str(model), RunPaths.for_run(str(tmp_path), "scheduled__2")


def test_the_serving_model_reused_on_the_same_records_is_not_scored_again(tmp_path, monkeypatch):
    """reuse_training took the run the serving model came from: its scores are known."""
    from orchestration import evaluation as evaluation_module
    from orchestration.evaluation import evaluate_and_bless
    from tests.orchestration.test_run_report import EVALUATION

    model, this = _published_run(tmp_path)
    _shards(Path(this.shards))  # re-made, or reused by the shard cache: the same content
    monkeypatch.setattr(evaluation_module, "evaluate_run", lambda *a, **k: pytest.fail("scored"))
    params = {**DEFAULTS, "model_root": str(tmp_path / "m"), "accuracy_gate": 0.5}
    lines = []
    result = evaluate_and_bless(params, model_dir=model, paths=this, log=lines.append)
    assert result["accuracy"] == EVALUATION["accuracy"]
    assert result["baseline"]["version"] == 1
    assert result["baseline"]["accuracy"] == EVALUATION["accuracy"]
    assert result["verdict"]["blessed"]  # no regression against itself
    assert "serving model (version 1)" in lines[0]
    written = json.loads(Path(this.evaluation).read_text())
    assert "not scored again" in written["scored_before"] and "baseline_skipped" not in written


@pytest.mark.parametrize("change", ["other_model", "other_records", "earlier_scores_gone"])
def test_anything_else_is_scored(tmp_path, change):
    from orchestration.evaluation import scored_before

    model, this = _published_run(tmp_path)
    _shards(Path(this.shards), sha="b2" if change == "other_records" else "a1")
    if change == "other_model":  # the candidate was trained again since
        from training.model_files import EXTRA_DIR, METADATA_FILE, WEIGHTS_FINGERPRINT

        metadata = Path(model) / EXTRA_DIR / METADATA_FILE
        metadata.write_text(json.dumps({WEIGHTS_FINGERPRINT: "w3"}))
    if change == "earlier_scores_gone":
        Path(tmp_path / "runs" / "scheduled__1" / "evaluation.json").unlink()
    assert scored_before(model, this.shards, str(tmp_path / "m" / "shapes")) is None


def test_nothing_published_is_scored(tmp_path):
    from orchestration.evaluation import scored_before

    assert scored_before(str(tmp_path / "model"), str(tmp_path), str(tmp_path / "m")) is None
