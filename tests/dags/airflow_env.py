"""Helpers to run Airflow in an isolated AIRFLOW_HOME (subprocesses only: Airflow reads its
configuration once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from orchestration.local_airflow import settings, stop_all

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DAG_ID = "image_model_pipeline"


def airflow_env(home: Path, **extra: str) -> dict:
    """A local Airflow's settings, as `make airflow` has them (no schedule: no scheduled
    run competes with a test's runs), in its own home."""
    port = extra.pop("AIRFLOW__API__PORT", None)
    return {
        **os.environ,
        **settings(home=str(home), port=int(port) if port else None),
        **extra,
    }


def airflow(env: dict, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "airflow"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


class Standalone:
    """`airflow standalone` (API server, scheduler, DAG processor, triggerer) on a free port."""

    def __init__(self, home: Path, port: int, **extra_env: str):
        self.home, self.port = home, port
        self.base = f"http://localhost:{port}"
        self.env = airflow_env(home, AIRFLOW__API__PORT=str(port), **extra_env)
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
        self.password = None

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

    def trigger(self, conf: dict) -> str:
        """A run of the DAG with these Params, as the UI's Trigger button sends it; its id."""
        status, body = self.request(
            "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": conf}
        )
        assert status == 200, body
        return body["dag_run_id"]

    def wait_ready(self, timeout=300):
        deadline = time.monotonic() + timeout
        password_file = self.home / "simple_auth_manager_passwords.json.generated"
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.tail()
            try:
                if password_file.exists():
                    # Airflow creates the file before it writes the password into it.
                    self.password = json.loads(password_file.read_text())["admin"]
                    status, body = self.request(
                        "POST",
                        "/auth/token",
                        {"username": "admin", "password": self.password},
                        token=False,
                    )
                    if status in (200, 201):
                        self.token = body["access_token"]
                        status, _ = self.request("GET", f"/api/v2/dags/{DAG_ID}")
                        if status == 200:
                            return
            except (urllib.error.URLError, ConnectionError, OSError, ValueError, KeyError):
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
        """Every process of its session, and their children (a scheduler that outlives
        `airflow standalone` would go on running the next test's DAG runs)."""
        stop_all(self.process.pid)
        self.process.wait()
        self.log.close()
