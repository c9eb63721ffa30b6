"""docker/compose.yaml as written, brought up with podman-compose against the built images
(`make test-images`): PostgreSQL, Redis, the API server, scheduler, DAG processor, triggerer
and both Celery workers; a run triggered through the REST API trains on the training worker
and publishes; everything is torn down, volumes included."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGES = str(REPO / "scripts" / "images.sh")
API = "http://127.0.0.1:8080"
DAG_ID = "image_model_pipeline"

pytestmark = [pytest.mark.extended, pytest.mark.images, pytest.mark.timeout(1800)]


def _script(*args: str, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [IMAGES, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


class Api:
    def __init__(self):
        self.token = None

    def request(self, method: str, path: str, body=None):
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(API + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()


@pytest.fixture
def stack(tmp_path):
    env = {
        **os.environ,
        "COMPOSE_ENV_FILE": str(tmp_path / "compose.env"),
        "IMAGEPIPE_SCHEDULE": "",
    }
    up = _script("compose-up", env=env)
    try:
        assert up.returncode == 0, (up.stdout + up.stderr)[-5000:]
        yield env
    finally:
        logs = _script("compose", "logs", "--tail", "40", env=env)
        print(logs.stdout[-20000:])
        down = _script("compose", "down", "-v", env=env)
        assert down.returncode == 0, down.stderr[-3000:]
        left = _script("podman", "ps", "-a", "--filter", "name=imagepipe_", "-q", env=env)
        assert not left.stdout.strip()  # torn down


def _login(env: dict) -> Api:
    api, deadline = Api(), time.monotonic() + 300
    while time.monotonic() < deadline:
        password = _script(
            "podman", "exec", "imagepipe_airflow-apiserver_1",
            "cat", "/opt/airflow/simple_auth_manager_passwords.json.generated", env=env,
        )  # fmt: skip
        try:
            if password.returncode == 0 and password.stdout.strip():
                secret = json.loads(password.stdout)["admin"]
                status, body = api.request(
                    "POST", "/auth/token", {"username": "admin", "password": secret}
                )
                if status in (200, 201):
                    api.token = body["access_token"]
                    if api.request("GET", f"/api/v2/dags/{DAG_ID}")[0] == 200:
                        return api
        except (urllib.error.URLError, ConnectionError, OSError, ValueError, KeyError):
            pass
        time.sleep(3)
    raise AssertionError("the API server did not answer with the DAG")


def test_compose_runs_a_dag_triggered_through_the_rest_api(stack):
    made = _script(
        "podman", "exec", "imagepipe_airflow-worker_1", "python", "-m", "beam_jobs.sample_data",
        "/data/images", "--images-per-class", "40", env=stack,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    api = _login(stack)
    status, body = api.request("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    assert status == 200, body
    conf = {
        "input_uri": "/data/images", "output_root": "/data/pipeline", "model_root": "/data/models",
        "model_name": "shapes", "epochs": 2, "num_workers": 1, "accuracy_gate": 0.0,
    }  # fmt: skip
    status, body = api.request(
        "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": conf}
    )
    assert status == 200, body
    run_id = urllib.request.quote(body["dag_run_id"], safe="")
    deadline, state = time.monotonic() + 1200, None
    while time.monotonic() < deadline and state not in ("success", "failed"):
        time.sleep(5)
        status, body = api.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
        state = body["state"] if status == 200 else None
    status, tasks = api.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")
    summary = {t["task_id"]: (t["state"], t["queue"]) for t in tasks["task_instances"]}
    assert state == "success", summary
    # train and evaluate ran on the training worker's queue (the image with TensorFlow).
    assert summary["train"] == ("success", "training"), summary
    assert summary["evaluate"] == ("success", "training"), summary
    latest = _script(
        "podman", "exec", "imagepipe_airflow-worker_1", "cat", "/data/models/shapes/LATEST",
        env=stack,
    )  # fmt: skip
    assert latest.stdout.strip() == "1", latest.stdout + latest.stderr
