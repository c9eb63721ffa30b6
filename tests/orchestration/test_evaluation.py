"""Remote launchers evaluate where they trained; the Airflow task only reads the result."""

import json
import subprocess
import sys

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
