"""Airflow under faults, for real (`airflow standalone`, LocalExecutor, SQLite).

- Two runs with different parameters at once: each writes only under its own run
  folder; both publish to one model name with unique versions and a LATEST that
  names a complete model.
- The `train` task's process is SIGKILLed mid-training: the training it started
  dies with it, the retry resumes from the checkpoints and the run ends green with
  one published model and no leftovers.
- A fake secret in the environment, a connection and a Variable never shows up in
  task logs, XComs, the run's outputs, the published model or the metadata DB.
"""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from beam_jobs import sample_data
from orchestration.publish import latest_version
from tests.dags.airflow_env import DAG_ID, Standalone
from tests.jobs import run_conf

SECRET = "s3cr3t-imagepipe-7Qx9ZvL2"
SECRET_ENV = {
    "IMAGEPIPE_MAX_ACTIVE_RUNS": "2",
    "IMAGEPIPE_TEST_API_TOKEN": SECRET,
    "AIRFLOW_CONN_KUBERNETES_DEFAULT": f"kubernetes://admin:{SECRET}@cluster.invalid",
    "AIRFLOW_VAR_REGISTRY_PASSWORD": SECRET,
}

pytestmark = pytest.mark.extended


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("fault_images")
    sample_data.generate(str(root), images_per_class=60, seed=33)
    return root


@pytest.fixture
def airflow(tmp_path, free_port):
    home = tmp_path / "airflow_home"
    home.mkdir()
    server = Standalone(home, free_port, **SECRET_ENV)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _conf(tmp_path, images, **overrides):
    return run_conf(tmp_path, images, **{"model_name": "shared", **overrides})


def _xcoms(airflow, run_id) -> str:
    status, body = airflow.request(
        "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/~/xcomEntries?limit=100"
    )
    assert status == 200, body
    values = []
    for entry in body["xcom_entries"]:
        status, full = airflow.request(
            "GET",
            f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{entry['task_id']}"
            f"/xcomEntries/{entry['key']}",
        )
        assert status == 200, full
        values.append(json.dumps(full))
    return "\n".join(values)


def _files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_concurrent_runs_and_no_secret_anywhere(airflow, images, tmp_path):
    first = airflow.trigger(_conf(tmp_path, images, epochs=2, image_size=48))
    second = airflow.trigger(_conf(tmp_path, images, epochs=3, image_size=64))
    # Both really overlap: the second is running before the first has finished.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        states = [
            airflow.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{r}")[1]["state"]
            for r in (first, second)
        ]
        if states == ["running", "running"] or "success" in states:
            break
        time.sleep(1)
    assert states == ["running", "running"], states
    assert airflow.wait_run(first) == "success", airflow.tail()
    assert airflow.wait_run(second) == "success", airflow.tail()

    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["runs", "shard_cache"]
    run_dirs = sorted(p.name for p in (out / "runs").iterdir())
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        model = out / "runs" / run_dir / "train" / "model"
        trained = json.loads((model / "assets.extra" / "training_metadata.json").read_text())
        assert trained["config"]["data"] == str(out / "runs" / run_dir / "shards")
    home = tmp_path / "models" / "shared"
    assert sorted(p.name for p in home.iterdir()) == ["1", "2", "LATEST"]
    published = {
        json.loads((home / v / "assets.extra" / "publish.json").read_text())["run_id"]
        for v in ("1", "2")
    }
    assert published == {first, second}
    assert latest_version(str(tmp_path / "models"), "shared") == 2

    needle = SECRET.encode()
    assert _files_containing(airflow.home / "logs", needle) == []
    assert SECRET not in _xcoms(airflow, first) + _xcoms(airflow, second)
    assert _files_containing(out, needle) == []
    assert _files_containing(tmp_path / "models", needle) == []
    assert needle not in (airflow.home / "airflow.db").read_bytes()


def _processes_matching(text: str) -> dict[int, int]:
    """pid -> parent pid of processes whose command line contains `text`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if text.encode() in cmdline and stat.split(")")[-1].split()[0] != "Z":
            found[int(entry)] = int(stat.split(")")[-1].split()[1])
    return found


def test_killed_train_task_is_retried_and_resumes(airflow, images, tmp_path):
    conf = _conf(tmp_path, images, epochs=20, num_workers=2, model_name="killed")
    run_id = airflow.trigger(conf)
    out = tmp_path / "out"
    deadline = time.monotonic() + 600
    checkpoints = []
    while not checkpoints and time.monotonic() < deadline:
        checkpoints = list(out.glob("runs/*/train/checkpoints/ckpt-*.index"))
        time.sleep(0.5)
    assert checkpoints, airflow.tail()
    launchers = _processes_matching(f"training.launch --num-workers 2 --data {out}")
    assert len(launchers) == 1, launchers
    [(launcher, task_process)] = launchers.items()
    os.kill(task_process, signal.SIGKILL)  # the Airflow task process running `train`

    # The launcher gets SIGTERM as its task dies and stops its workers (10 s grace each).
    deadline = time.monotonic() + 60
    while launcher in _processes_matching("training.launch") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert launcher not in _processes_matching("training.launch")  # died with its task
    assert airflow.wait_run(run_id, timeout=1200) == "success", airflow.tail()
    status, task = airflow.request(
        "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train"
    )
    assert status == 200 and task["try_number"] == 2, task
    [run_dir] = (out / "runs").iterdir()
    metrics = json.loads((run_dir / "train" / "metrics.json").read_text())
    assert 0 < metrics["resumed_from_step"] < metrics["epochs"][-1]["step"]  # really resumed
    assert [e["epoch"] for e in metrics["epochs"]] == list(range(1, 21))
    assert not (run_dir / "train" / "_worker_tmp").exists()
    assert sorted(p.name for p in (tmp_path / "models" / "killed").iterdir()) == ["1", "LATEST"]
    assert _processes_matching(f"--data {out}") == {}
