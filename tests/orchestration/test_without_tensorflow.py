"""The Airflow image installs no TensorFlow: with a remote launcher every task body the DAG
runs on the Airflow worker must work without it (the trainers evaluate where they train).

Run in a fresh interpreter where importing tensorflow or keras raises, as it would in
that image."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.dags.airflow_env import REPO
from tests.orchestration.test_run_report import EVALUATION, METRICS

pytestmark = pytest.mark.slow  # a subprocess without TensorFlow

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class NoTensorFlow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"tensorflow", "keras", "tf_keras"}:
                raise ImportError(f"{name} is not installed in the Airflow image")

    sys.meta_path.insert(0, NoTensorFlow())
    root = sys.argv[1]

    import dags.image_model_pipeline  # the DAG file parses
    from beam_jobs.validate import validate_shards  # noqa: F401
    from orchestration.evaluation import evaluate_run, write_json
    from orchestration.launchers import TrainingJob, kubernetes, vertex
    from orchestration.params import check_run, train_flags
    from orchestration.plots import write_run_plots
    from orchestration.publish import publish_model
    from orchestration.train_operator import TrainModelOperator  # noqa: F401
    from training.gate import check_gate

    params = json.loads(sys.argv[2])
    check_run(params)
    job = TrainingJob(data=root + "/shards", output=root + "/train", num_workers=2,
                      train_flags=train_flags(params))
    kubernetes.render(job, name="imagepipe-run", image="trainer:1")
    vertex.render(
        TrainingJob(data="gs://b/shards", output="gs://b/train", num_workers=2,
                    train_flags=train_flags(params)),
        vertex.Options(project="p", region="r"), display_name="imagepipe-run", image="trainer:1")
    evaluation = evaluate_run("kubernetes", model_dir=root + "/train/model",
                              shards_dir=root + "/shards", train_dir=root + "/train")
    write_json(evaluation, root + "/evaluation.json")
    plots = write_run_plots(root + "/train", evaluation, root)
    check_gate(evaluation, 0.5)
    published = publish_model(root + "/train/model", root + "/models", "shapes", run_id="r1")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"tensorflow", "keras"})
    print(json.dumps({"version": published["version"], "plots": plots, "tf": loaded}))
    """
)


def test_remote_launcher_tasks_run_without_tensorflow(tmp_path):
    from dags.image_model_pipeline import PARAMS

    train = tmp_path / "train"
    (train / "model" / "variables").mkdir(parents=True)
    (train / "model" / "saved_model.pb").write_bytes(b"graph")
    (train / "metrics.json").write_text(json.dumps(METRICS))
    (train / "config.json").write_text("{}")  # a run writes it first
    (train / "evaluation.json").write_text(json.dumps(EVALUATION))
    params = {name: param.value for name, param in PARAMS.items()}
    params["training_launcher"] = "kubernetes"
    params["input_uri"] = "gs://acme-raw/images"  # as such a deployment reads its images
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), json.dumps(params)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["tf"] == []
    assert result["version"] == 1
    assert (tmp_path / "models" / "shapes" / "1" / "saved_model.pb").read_bytes() == b"graph"
    assert all(Path(p).read_bytes().startswith(b"\x89PNG") for p in result["plots"])


def test_the_local_launcher_is_the_one_that_needs_tensorflow(tmp_path):
    # The guard above is real: the local path evaluates here and must fail without TF.
    script = SCRIPT.split("root = sys.argv[1]")[0] + textwrap.dedent(
        """
        from orchestration.evaluation import evaluate_run
        try:
            evaluate_run("local", model_dir="m", shards_dir="s", train_dir="t")
        except ImportError as err:
            print("refused:", err)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert "refused: tensorflow is not installed in the Airflow image" in proc.stdout, proc.stderr
