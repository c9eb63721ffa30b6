"""The whole DAG for real: `airflow dags test`, and the UI's path (REST trigger, clear a task)."""

import hashlib
import io
import json
import os
import random
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import tensorflow as tf

from beam_jobs import sample_data
from tests.dags.airflow_env import BIN, REPO, airflow, airflow_env
from training.publish import latest_model_path

DAG_ID = "image_model_pipeline"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("dag_images")
    sample_data.generate(str(root), images_per_class=100, seed=21)
    sample_data.write_corrupt_files(str(root), seed=21)  # 4 of 404: under the 5% budget
    return root


def _conf(tmp_path, images, **overrides):
    return {
        "input_uri": str(images),
        "output_root": str(tmp_path / "out"),
        "model_root": str(tmp_path / "models"),
        "model_name": "shapes",
        "epochs": 12,
        "num_workers": 2,
        "accuracy_gate": 0.4,
        **overrides,
    }


def _tree_digest(root: Path) -> dict:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


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
    conf = _conf(tmp_path, images)
    run = airflow(env, "dags", "test", DAG_ID, "-c", json.dumps(conf))
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    model = latest_model_path(conf["model_root"], "shapes")
    assert model and model.endswith("/shapes/1")
    assert (Path(model) / "saved_model.pb").exists()
    assert _classify(model) >= 0.4  # chance is 0.25
    [run_dir] = (tmp_path / "out" / "runs").iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["evaluation.json", "shards", "train"]
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    assert evaluation["split"] == "test" and evaluation["accuracy"] >= 0.4


class Standalone:
    """`airflow standalone` (API server, scheduler, DAG processor, triggerer) on a free port."""

    def __init__(self, home: Path, port: int):
        self.home, self.port = home, port
        self.base = f"http://localhost:{port}"
        self.env = airflow_env(
            home,
            AIRFLOW__API__PORT=str(port),
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.base}/execution/",
        )
        self.log = open(home / "standalone.log", "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [str(BIN / "airflow"), "standalone"],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        self.token = None

    def request(self, method, path, body=None, token=True):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if token and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def wait_ready(self, timeout=300):
        deadline = time.monotonic() + timeout
        password_file = self.home / "simple_auth_manager_passwords.json.generated"
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.tail()
            try:
                if password_file.exists():
                    password = json.loads(password_file.read_text())["admin"]
                    status, body = self.request(
                        "POST",
                        "/auth/token",
                        {"username": "admin", "password": password},
                        token=False,
                    )
                    if status in (200, 201):
                        self.token = body["access_token"]
                        status, _ = self.request("GET", f"/api/v2/dags/{DAG_ID}")
                        if status == 200:
                            return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(2)
        raise AssertionError("Airflow did not come up:\n" + self.tail())

    def wait_run(self, run_id, timeout=900):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body = self.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
            if status == 200 and body["state"] in ("success", "failed"):
                return body["state"]
            time.sleep(3)
        raise AssertionError(f"run {run_id} did not finish:\n" + self.tail())

    def tail(self):
        self.log.flush()
        return (self.home / "standalone.log").read_text()[-5000:]

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


@pytest.fixture
def standalone(tmp_path, free_port):
    home = tmp_path / "airflow_home"
    home.mkdir()
    server = Standalone(home, free_port)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


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

    # This test is about the trigger and clear paths, not accuracy: a short run, no gate.
    conf = _conf(
        tmp_path, images, epochs=3, num_workers=1, accuracy_gate=0.0, model_name="rest-model"
    )
    status, body = standalone.request(
        "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": conf}
    )
    assert status == 200, body
    run_id = body["dag_run_id"]
    assert standalone.wait_run(run_id) == "success", standalone.tail()

    [run_dir] = (tmp_path / "out" / "runs").iterdir()
    shards_before = _tree_digest(run_dir / "shards")
    model_before = _tree_digest(run_dir / "train" / "model")
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
    assert _tree_digest(run_dir / "shards") == shards_before  # upstream untouched
    assert _tree_digest(run_dir / "train" / "model") == model_before
    assert sorted(p.name for p in (tmp_path / "models" / "rest-model").iterdir()) == published
