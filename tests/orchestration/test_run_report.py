"""What a person sees of a run: progress lines, the end-of-run summary, the plots."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from orchestration import plots, progress, summary
from training.gate import bless

METRICS = {
    "epochs": [
        {
            "epoch": e,
            "train_loss": 1.5 / e,
            "train_accuracy": 0.3 + 0.1 * e,
            "val_loss": 1.6 / e,
            "val_accuracy": 0.25 + 0.1 * e,
        }
        for e in range(1, 5)
    ],
    "input_diagnosis": {"advice": "compute-bound: input waits 3% of a step"},
}
EVALUATION = {
    "split": "test",
    "num_examples": 40,
    "accuracy": 0.75,
    "per_class_accuracy": {"circle": 1.0, "square": 0.5},
    "class_names": ["circle", "square"],
    "confusion": [[20, 0], [10, 10]],
}


def test_plots_are_png_files(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "metrics.json").write_text(json.dumps(METRICS))
    (tmp_path / "train" / "config.json").write_text("{}")  # a run writes it first
    written = plots.write_run_plots(str(tmp_path / "train"), EVALUATION, str(tmp_path))
    assert [p.rsplit("/", 1)[-1] for p in written] == [plots.CURVES, plots.CONFUSION]
    for path in written:
        with open(path, "rb") as handle:
            data = handle.read()
        assert data.startswith(b"\x89PNG") and len(data) > 5000


def test_summary_names_the_model_its_classes_and_where_things_are(tmp_path):
    run = tmp_path / "runs" / "r1"
    (run / "train").mkdir(parents=True)
    (run / "train" / "metrics.json").write_text(json.dumps(METRICS))
    (run / "train" / "config.json").write_text("{}")  # a run writes it first
    published = tmp_path / "models" / "shapes" / "3"
    (published / "assets.extra").mkdir(parents=True)
    (tmp_path / "models" / "shapes" / "LATEST").write_text("3\n")
    record = {"run_id": "r1", "source": str(run / "train" / "model"), "evaluation": EVALUATION}
    (published / "assets.extra" / "publish.json").write_text(json.dumps(record))
    for name in (plots.CURVES, plots.CONFUSION):
        (run / name).write_bytes(b"png")
    (run / "train" / "tensorboard").mkdir()
    text = summary.summary(str(tmp_path / "models"), "shapes")
    assert f"published shapes version 3: {published}" in text
    assert "held-out test accuracy 0.750 on 40 images (chance 0.50)" in text
    assert "per class: circle 1.00, square 0.50" in text
    assert f"run folder: {run}\n  {plots.CURVES}, {plots.CONFUSION}, train/metrics.json" in text
    command = summary.tensorboard_command()
    assert f"TensorBoard: {command} --logdir {run / 'train' / 'tensorboard'}" in text
    assert os.path.exists(command.split()[0])  # not a bare `tensorboard` off the PATH
    assert "input: compute-bound" in text
    assert "data:" not in text  # no data check report in this run folder

    (run / "data_check").mkdir()
    report = {
        "status": "anomalies",
        "mode": "warn",
        "line": "unused when there are anomalies",
        "baseline": "/old/shards",
        "anomalies": [{"kind": "fewer_images", "message": "500 images stored, 50% fewer"}],
    }
    (run / "data_check" / "data_check.json").write_text(json.dumps(report))
    text = summary.summary(str(tmp_path / "models"), "shapes")
    assert (
        f"data: 1 anomalies against /old/shards (data_checks=warn; plot "
        f"{run / 'data_check' / 'data_check.png'}):\n  fewer_images: 500 images stored" in text
    )


def test_summary_of_a_model_trained_and_published_by_hand(tmp_path):
    """`training.launch --output RUN` then `orchestration.publish --model RUN/model`: the run
    folder is RUN itself, the accuracy comes from RUN/evaluation.json when the publish
    record has none, and only the files that exist are listed."""
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(METRICS))
    (run / "config.json").write_text("{}")
    (run / "evaluation.json").write_text(json.dumps(EVALUATION))
    published = tmp_path / "models" / "shapes" / "1"
    (published / "assets.extra").mkdir(parents=True)
    (tmp_path / "models" / "shapes" / "LATEST").write_text("1\n")
    record = {"run_id": "by-hand", "source": str(run / "model")}
    (published / "assets.extra" / "publish.json").write_text(json.dumps(record))
    text = summary.summary(str(tmp_path / "models"), "shapes")
    assert "held-out test accuracy 0.750" in text
    assert f"run folder: {run}\n  evaluation.json, metrics.json" in text
    assert plots.CONFUSION not in text and "TensorBoard" not in text  # none there
    (run / "evaluation.json").unlink()
    text = summary.summary(str(tmp_path / "models"), "shapes")
    assert "publish with --evaluation" in text


def test_summary_says_in_one_line_when_nothing_readable_is_published(tmp_path, capsys):
    home = tmp_path / "models" / "shapes"
    cases = [
        (None, f"nothing published under {home} (no LATEST)"),
        ("garbage\n", f"{home}/LATEST does not hold a version number"),
        ("7\n", f"{home}/LATEST names version 7, which is not there"),  # removed by hand
    ]
    for latest, message in cases:
        if latest is not None:
            home.mkdir(parents=True, exist_ok=True)
            (home / "LATEST").write_text(latest)
        assert summary.main(["--model-root", str(tmp_path / "models")]) == 2
        assert capsys.readouterr().err == f"error: {message}\n"


@pytest.mark.slow
def test_progress_prints_each_task_start_and_end_until_the_run_exits(tmp_path):
    db = tmp_path / "airflow.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE dag_run (id INTEGER, dag_id TEXT, run_id TEXT)")
        conn.execute(
            "CREATE TABLE task_instance (dag_id TEXT, run_id TEXT, task_id TEXT, state TEXT, "
            "start_date TEXT, end_date TEXT)"
        )
        conn.execute("INSERT INTO dag_run VALUES (1, 'image_model_pipeline', 'old')")
        conn.execute("INSERT INTO dag_run VALUES (2, 'image_model_pipeline', 'new')")
        conn.execute(
            "INSERT INTO task_instance VALUES ('image_model_pipeline', 'old', 'train', "
            "'failed', '2026-12-03 10:00:00', '2026-12-03 10:01:00')"
        )
        conn.executemany(
            "INSERT INTO task_instance VALUES ('image_model_pipeline', 'new', ?, ?, ?, ?)",
            [
                ("shard_images", "success", "2026-12-03 11:00:00", "2026-12-03 11:00:42"),
                ("train", "running", "2026-12-03 11:00:43", None),
            ],
        )
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.progress", "--db", str(db),
         "--pid", str(finished.pid)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "shard_images: success in 42s" in done.stdout
    assert "train: started" in done.stdout
    assert "failed" not in done.stdout  # the older run is not this one


def test_progress_lines_only_for_changes():
    before = {"a": ("running", "2026-12-03 11:00:00", None)}
    after = {
        "a": ("success", "2026-12-03 11:00:00", "2026-12-03 11:00:05"),
        "b": ("running", "2026-12-03 11:00:06", None),
    }
    assert progress.describe_changes(before, after) == ["  a: success in 5s", "  b: started"]
    assert progress.describe_changes(after, after) == []


def test_the_summary_first_says_what_the_newest_run_decided(tmp_path, capsys):
    models = tmp_path / "models" / "shapes" / "1"
    (models / "assets.extra").mkdir(parents=True)
    (tmp_path / "models" / "shapes" / "LATEST").write_text("1\n")
    runs = tmp_path / "out" / "runs"
    serving = {"version": 1, "accuracy": 0.85, "per_class_accuracy": {"circle": 1.0}}
    for name, evaluation in (
        ("old", {**EVALUATION, "baseline": {**serving, "accuracy": 0.7}}),
        ("new", {**EVALUATION, "baseline": serving}),
    ):
        evaluation["verdict"] = bless(evaluation)
        (runs / name).mkdir(parents=True)
        (runs / name / "evaluation.json").write_text(json.dumps(evaluation))
    import os

    os.utime(runs / "old", (1, 1))  # the older run
    argv = ["--model-root", str(tmp_path / "models"), "--output-root", str(tmp_path / "out")]
    assert summary.main(argv) == 0
    first, second = capsys.readouterr().out.splitlines()[:2]
    assert first == (
        "run new: not published, not blessed: accuracy 0.750 is 0.100 below the serving "
        "model's 0.850 (version 1; allowed 0.01)"
    )
    assert second.startswith("published shapes version 1: ")


def test_progress_shows_each_training_epoch_once(tmp_path):
    from orchestration.runs import RunPaths

    assert progress.epoch_lines(str(tmp_path), "r1", 0) == []  # not started yet
    train = tmp_path / "runs" / "r1" / "train"
    train.mkdir(parents=True)
    (train / "config.json").write_text(json.dumps({"epochs": 30}))
    epochs = [{**e, "seconds": 1.25} for e in METRICS["epochs"]]
    (train / "metrics.json").write_text(json.dumps({"epochs": epochs[:2]}))
    assert RunPaths.for_run(str(tmp_path), "r1").train == str(train)
    first = progress.epoch_lines(str(tmp_path), "r1", 0)
    assert first == [
        "  train: epoch 1/30 train_acc 0.400 val_acc 0.350 (1.2s)",
        "  train: epoch 2/30 train_acc 0.500 val_acc 0.450 (1.2s)",
    ]
    (train / "metrics.json").write_text(json.dumps({"epochs": epochs}))
    assert [line.split()[2] for line in progress.epoch_lines(str(tmp_path), "r1", 2)] == [
        "3/30",
        "4/30",
    ]
