"""The whole DAG for real: `airflow dags test`, and the UI's path (REST trigger, clear a task)."""

import io
import json
import random
import re
import shutil
import time
import urllib.parse
from pathlib import Path

import pytest
import tensorflow as tf

from beam_jobs import sample_data
from orchestration.publish import latest_version
from tests.dags.airflow_env import DAG_ID, airflow, airflow_env
from tests.jobs import run_conf, tree_digests

pytestmark = pytest.mark.slow  # whole DAG runs through Airflow


def _conf(tmp_path, images, **overrides):
    """Long enough to learn the shapes, on 2 workers, behind a gate a guess fails."""
    return run_conf(
        tmp_path, images, **{"epochs": 12, "num_workers": 2, "accuracy_gate": 0.4, **overrides}
    )


def _classify(model_path: str) -> float:
    serve = tf.saved_model.load(model_path).signatures["serving_default"]
    correct = total = 0
    for label in sample_data.CLASSES:
        rng = random.Random(f"dag-check:{label}")
        batch = []
        for _ in range(8):
            buffer = io.BytesIO()
            sample_data.draw_sample(label, rng, 48, 128).save(buffer, format="JPEG")
            batch.append(buffer.getvalue())
        names = serve(images=tf.constant(batch))["class_name"].numpy()
        correct += sum(name.decode() == label for name in names)
        total += len(batch)
    return correct / total


def test_dags_test_runs_the_whole_pipeline_green(images, tmp_path):
    env = airflow_env(tmp_path / "airflow_home")
    migrate = airflow(env, "db", "migrate")
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    # The roots typed as in the trigger form, where no shell expands `~` (HOME is tmp_path;
    # matplotlib keeps its usual font cache instead of building one there).
    import matplotlib

    conf = _conf(tmp_path, images)
    typed = {**conf, "output_root": "~/out", "model_root": "~/models"}
    env = {**env, "HOME": str(tmp_path), "MPLCONFIGDIR": matplotlib.get_cachedir()}
    run = airflow(env, "dags", "test", DAG_ID, "-c", json.dumps(typed))
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    # A healthy run's task logs hold no warning or error (Beam's progress logged as warnings,
    # TensorFlow's retracing notices, provider quirks); Airflow's CLI's graphviz notice aside.
    noise = [
        line
        for line in (run.stdout + run.stderr).splitlines()
        if re.search(r"\[(warning|error)\s*\]| WARNING | ERROR ", line)
        and "graphviz" not in line
        # The synthetic shapes look alike at 32x32 grey (docs/stages.md, Near-copies): the
        # job's near-copy warning is a true report of what the hash sees in this data.
        and "have a near-copy in train" not in line
    ]
    assert not noise, noise[:5]
    assert latest_version(conf["model_root"], "shapes") == 1
    model = str(Path(conf["model_root"]) / "shapes" / "1")
    assert (Path(model) / "saved_model.pb").exists()
    assert _classify(model) >= 0.4  # chance is 0.25
    [run_dir] = (tmp_path / "out" / "runs").iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "confusion_matrix.png",
        "data_check",
        "evaluation.json",
        "shards",
        "train",
        "training_curves.png",
    ]
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    assert evaluation["split"] == "test" and evaluation["accuracy"] >= 0.4
    assert sum(map(sum, evaluation["confusion"])) == evaluation["num_examples"]
    from orchestration.summary import summary

    text = summary(conf["model_root"], "shapes")  # what `make demo` prints at the end
    assert "per class: circle" in text and f"run folder: {run_dir}" in text
    # The first run of a model name: its data had nothing to compare with, said once.
    assert "data: nothing to compare with (no model published in" in text
    assert (run_dir / "data_check" / "data_check.png").exists()


def test_rest_trigger_with_params_then_clear_one_task(standalone, images, tmp_path):
    assert (
        standalone.request(
            "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None}, token=False
        )[0]
        == 401
    )
    status, body = standalone.request(
        "POST",
        f"/api/v2/dags/{DAG_ID}/dagRuns",
        {"logical_date": None, "conf": _conf(tmp_path, images, epochs=0)},
    )
    assert status == 400, body  # an out-of-bounds Param creates no run

    # This test is about the trigger and clear paths, not accuracy: a short run, no gate
    # and no comparison with the serving model (the retrained model replaces its own).
    # Its own copy of the images: they change before the last clear.
    images = shutil.copytree(images, tmp_path / "images")
    conf = _conf(
        tmp_path, images, epochs=3, num_workers=1, accuracy_gate=0.0, model_name="rest-model",
        max_regression=1.0, max_class_regression=1.0,
    )  # fmt: skip
    run_id = standalone.trigger(conf)
    assert standalone.wait_run(run_id) == "success", standalone.tail()

    [run_dir] = (tmp_path / "out" / "runs").iterdir()
    shards_before = tree_digests(run_dir / "shards")
    model_before = tree_digests(run_dir / "train" / "model")
    evaluation = run_dir / "evaluation.json"
    evaluated_at = evaluation.stat().st_mtime_ns
    published = sorted(p.name for p in (tmp_path / "models" / "rest-model").iterdir())
    assert published == ["1", "LATEST"]

    status, body = standalone.request(
        "POST",
        f"/api/v2/dags/{DAG_ID}/clearTaskInstances",
        {
            "dag_run_id": run_id,
            "task_ids": ["evaluate"],
            "dry_run": False,
            "only_failed": False,
            "reset_dag_runs": True,
        },
    )
    assert status == 200, body
    assert [t["task_id"] for t in body["task_instances"]] == ["evaluate"]
    time.sleep(2)
    assert standalone.wait_run(run_id) == "success", standalone.tail()
    assert evaluation.stat().st_mtime_ns > evaluated_at  # evaluate ran again
    assert tree_digests(run_dir / "shards") == shards_before  # upstream untouched
    assert tree_digests(run_dir / "train" / "model") == model_before
    assert sorted(p.name for p in (tmp_path / "models" / "rest-model").iterdir()) == published

    # New images, and shard_images cleared with everything after it: new shards, and the
    # train task starts anew on them instead of resuming checkpoints of the old shards
    # (which the trainer refuses: it failed every try).
    for label in sample_data.CLASSES:
        rng = random.Random(f"added:{label}")
        for index in range(10):
            sample_data.draw_sample(label, rng, 48, 128).save(images / label / f"added-{index}.jpg")
    trained_on = json.loads((run_dir / "train" / "config.json").read_text())["shards_content"]
    records = json.loads((run_dir / "shards" / "metadata.json").read_text())["num_records"]
    status, body = standalone.request(
        "POST",
        f"/api/v2/dags/{DAG_ID}/clearTaskInstances",
        {
            "dag_run_id": run_id,
            "task_ids": ["shard_images"],
            "include_downstream": True,
            "dry_run": False,
            "only_failed": False,
            "reset_dag_runs": True,
        },
    )
    assert status == 200, body
    assert "train" in [t["task_id"] for t in body["task_instances"]]
    time.sleep(2)
    assert standalone.wait_run(run_id) == "success", standalone.tail()
    metadata = json.loads((run_dir / "shards" / "metadata.json").read_text())
    assert metadata["num_records"] == records + 40
    config = json.loads((run_dir / "train" / "config.json").read_text())
    assert config["shards_content"] != trained_on
    assert json.loads((run_dir / "train" / "metrics.json").read_text())["resumed_from_step"] == 0
    assert sorted(p.name for p in (tmp_path / "models" / "rest-model").iterdir()) == [
        "1", "2", "LATEST"
    ]  # fmt: skip


def _answer_approval(standalone, run_id: str, choice: str, timeout: float = 600) -> None:
    """Wait for the run to ask, then answer as a person would from the UI (its REST call)."""
    task = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/approve_publish"
    path = f"{task}/-1/hitlDetails"
    deadline = time.monotonic() + timeout
    while standalone.request("GET", task)[1].get("state") != "awaiting_input":
        assert time.monotonic() < deadline, standalone.tail()
        time.sleep(2)
    # Airflow 3.3.2 fails the task when the answer comes before the scheduler has
    # processed the executor's report of the paused process's exit (a second after it
    # asked, or many on a loaded machine); a person is slower than that, so the test waits
    # for the scheduler's line saying it did.
    finished = f"task_id=approve_publish, run_id={run_id}, "
    while not any(
        "TaskInstance Finished" in line and finished in line
        for line in (standalone.home / "standalone.log").read_text().splitlines()
    ):
        assert time.monotonic() < deadline, standalone.tail()
        time.sleep(1)
    status, body = standalone.request("GET", path)
    assert status == 200 and body["response_received"] is False, body
    assert body["options"] == ["Approve", "Reject"] and "Held-out accuracy" in body["body"]
    status, body = standalone.request("PATCH", path, {"chosen_options": [choice]})
    assert status == 200, body


@pytest.mark.extended
def test_require_approval_waits_for_a_person_then_publishes_or_skips(standalone, images, tmp_path):
    conf = _conf(
        tmp_path, images, epochs=1, num_workers=1, accuracy_gate=0.0,
        model_name="approved", require_approval=True,
    )  # fmt: skip
    models = tmp_path / "models" / "approved"
    for choice, versions in (("Reject", None), ("Approve", ["1", "LATEST"])):
        run_id = standalone.trigger(conf)
        _answer_approval(standalone, run_id, choice)
        assert standalone.wait_run(run_id) == "success", standalone.tail()
        _, body = standalone.request(
            "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/publish"
        )
        assert body["state"] == ("skipped" if choice == "Reject" else "success"), body
        assert (sorted(p.name for p in models.iterdir()) if models.exists() else None) == versions
        _, run = standalone.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
        said = "not published** (rejected by admin" if choice == "Reject" else "published version 1"
        assert said in (run["note"] or ""), run["note"]
        # The model_published Asset event, as a downstream DAG and the Assets page see it.
        _, events = standalone.request(
            "GET",
            f"/api/v2/assets/events?source_dag_id={DAG_ID}&source_task_id=publish"
            f"&source_run_id={urllib.parse.quote(run_id, safe='')}",
        )
        extras = [event["extra"] for event in events["asset_events"]]
        if choice == "Reject":
            assert extras == [], events
        else:
            (extra,) = extras
            assert extra["version"] == 1 and extra["model_name"] == "approved"
            assert extra["run_id"] == run_id
            assert 0 <= extra["accuracy"] <= 1 and extra["baseline_version"] is None
