"""The sharding job on a real Apache Flink cluster started here (`make test-clusters`):
a JobManager and two TaskManagers as separate JVMs, Beam's Flink job server, Python SDK
workers from a worker pool (EXTERNAL), parallelism 2 (scripts/clusters.sh)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from orchestration.publish import latest_version
from tests.dags.airflow_env import DAG_ID, airflow, airflow_env
from tests.jobs import run_conf, shard_job

REPO = Path(__file__).resolve().parents[2]
CLUSTERS = str(REPO / "scripts" / "clusters.sh")

# Starts JVMs and fetches the engine once (.clusters/): make test-clusters only.
pytestmark = [pytest.mark.extended, pytest.mark.clusters, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def flink(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flink")
    started = subprocess.run(
        [CLUSTERS, "flink", "start", str(folder)], capture_output=True, text=True, timeout=900
    )
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        options = started.stdout.split()
        assert options[0] == "--runner=FlinkRunner"
        yield folder, options
    finally:
        subprocess.run([CLUSTERS, "flink", "stop", str(folder)], timeout=120)


def _job(images, output, options, *flags) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "beam_jobs.shard_images", "--input", str(images),
         "--output", str(output), *flags, *options],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip


def _digests(root: Path) -> dict[str, str]:
    """Every file the job wrote but its metadata (which names the runner and the time)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("metadata.json", "_config.json")
    }


def _jobs(options) -> list[dict]:
    master = next(o.split("=", 1)[1] for o in options if o.startswith("--flink_master="))
    with urllib.request.urlopen(f"http://{master}/jobs/overview", timeout=10) as response:
        return json.load(response)["jobs"]


def test_shards_on_flink_are_byte_identical_to_the_local_runners(
    flink, sample_with_corrupt, tmp_path
):
    _, options = flink
    images, corrupt = sample_with_corrupt
    flags = ["--max-error-fraction", "0.2"]
    on_flink = _job(images, tmp_path / "flink", options, *flags)
    assert on_flink.returncode == 0, on_flink.stderr[-5000:]
    assert shard_job(images, tmp_path / "local", *flags, in_process=False) == 0
    flink_files = _digests(tmp_path / "flink")
    assert any(name.endswith(".tfrecord") for name in flink_files)
    assert flink_files == _digests(tmp_path / "local")  # shards, dead letters, copy lists
    refused = [
        line for f in (tmp_path / "flink").glob("errors/*") for line in f.read_text().splitlines()
    ]
    assert len(refused) == len(corrupt)
    metadata = json.loads((tmp_path / "flink" / "metadata.json").read_text())
    assert metadata["runner"] == "FlinkRunner"
    # The cluster ran it, on both TaskManagers' slots (parallelism 2).
    finished = [job for job in _jobs(options) if job["state"] == "FINISHED"]
    assert finished and all(job["tasks"]["total"] > 0 for job in finished)


def test_a_taskmanager_killed_mid_job_fails_the_job_cleanly(flink, sample_images, tmp_path):
    folder, options = flink
    before = {job["jid"] for job in _jobs(options)}
    output = tmp_path / "shards"
    job = subprocess.Popen(
        [sys.executable, "-m", "beam_jobs.shard_images", "--input", sample_images,
         "--output", str(output), *options],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not any(j["state"] == "RUNNING" for j in _jobs(options) if j["jid"] not in before):
            assert job.poll() is None and time.monotonic() < deadline, job.stdout.read()[-3000:]
            time.sleep(0.3)
        pids = (folder / "flink--taskexecutor.pid").read_text().split()
        os.kill(int(pids[0]), signal.SIGKILL)
        log = job.communicate(timeout=600)[0]
    finally:
        if job.poll() is None:
            job.kill()
        # The next test needs both TaskManagers again.
        subprocess.run([CLUSTERS, "flink", "taskmanager", str(folder)], timeout=120)
    # Flink's restart strategy (fixed delay, 2 attempts) cannot place parallelism 2 on the
    # one TaskManager left: the job fails, and the sharding job commits nothing.
    assert job.returncode == 3, log[-3000:]
    assert "the sharding job failed while running the pipeline" in log
    assert not (output / "_SUCCESS").exists()
    assert not list(output.glob("*.tfrecord")) and not list(output.glob("_staging*"))


def test_the_dag_shards_on_flink_and_trains_on_those_shards(flink, tmp_path):
    from beam_jobs import sample_data

    _, options = flink
    images = tmp_path / "images"
    sample_data.generate(str(images), images_per_class=30, seed=5)
    beam_options = dict(o.removeprefix("--").split("=", 1) for o in options[1:])
    conf = run_conf(
        tmp_path, images, beam_runner="FlinkRunner", beam_options=beam_options, epochs=2
    )
    env = airflow_env(tmp_path / "airflow_home")
    assert airflow(env, "db", "migrate").returncode == 0
    run = airflow(env, "dags", "test", DAG_ID, "-c", json.dumps(conf))
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    assert latest_version(conf["model_root"], "shapes") == 1
    (metadata,) = Path(conf["output_root"]).rglob("shards/metadata.json")
    assert json.loads(metadata.read_text())["runner"] == "FlinkRunner"
