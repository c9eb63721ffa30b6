"""The sharding job on real Apache Flink and Apache Spark clusters started here
(`make test-clusters`, scripts/clusters.sh): a Flink JobManager and two TaskManagers, a
Spark standalone master and two workers, each a separate JVM; Beam's job servers; Python
SDK workers from a worker pool (EXTERNAL); two slots or cores."""

from __future__ import annotations

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
from tests.jobs import run_conf, shard_job, tree_digests

REPO = Path(__file__).resolve().parents[2]
CLUSTERS = str(REPO / "scripts" / "clusters.sh")

# Starts JVMs and fetches the engine once (.clusters/): make test-clusters only.
pytestmark = [pytest.mark.extended, pytest.mark.clusters, pytest.mark.timeout(1200)]


def _cluster(engine: str, folder: Path):
    started = subprocess.run(
        [CLUSTERS, engine, "start", str(folder)], capture_output=True, text=True, timeout=900
    )
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        options = started.stdout.split()
        assert options[0] == f"--runner={engine.capitalize()}Runner"
        yield folder, options
    finally:
        subprocess.run([CLUSTERS, engine, "stop", str(folder)], timeout=120)


@pytest.fixture(scope="module")
def flink(tmp_path_factory):
    yield from _cluster("flink", tmp_path_factory.mktemp("flink"))


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    yield from _cluster("spark", tmp_path_factory.mktemp("spark"))


@pytest.fixture(params=["flink", "spark"])
def cluster(request):
    return request.param, *request.getfixturevalue(request.param)


def _job(images, output, options, *flags) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "beam_jobs.shard_images", "--input", str(images),
         "--output", str(output), *flags, *options],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip


def _digests(root: Path) -> dict[str, str]:
    """Every file the job wrote but its metadata (which names the runner and the time)."""
    return tree_digests(root, skip=("metadata.json", "_config.json"))


def _jobs(options) -> list[dict]:
    master = next(o.split("=", 1)[1] for o in options if o.startswith("--flink_master="))
    with urllib.request.urlopen(f"http://{master}/jobs/overview", timeout=10) as response:
        return json.load(response)["jobs"]


def test_shards_on_a_cluster_are_byte_identical_to_the_local_runners(
    cluster, sample_with_corrupt, tmp_path
):
    engine, folder, options = cluster
    images, corrupt = sample_with_corrupt
    flags = ["--max-error-fraction", "0.2"]
    on_cluster = _job(images, tmp_path / engine, options, *flags)
    assert on_cluster.returncode == 0, on_cluster.stderr[-5000:]
    assert shard_job(images, tmp_path / "local", *flags, in_process=False) == 0
    cluster_files = _digests(tmp_path / engine)
    assert any(name.endswith(".tfrecord") for name in cluster_files)
    assert cluster_files == _digests(tmp_path / "local")  # shards, dead letters, copy lists
    refused = [
        line for f in (tmp_path / engine).glob("errors/*") for line in f.read_text().splitlines()
    ]
    assert len(refused) == len(corrupt)
    metadata = json.loads((tmp_path / engine / "metadata.json").read_text())
    assert metadata["runner"] == options[0].split("=")[1]
    # The cluster ran it: a finished Flink job, or a finished Spark application on 2 cores.
    if engine == "flink":
        finished = [job for job in _jobs(options) if job["state"] == "FINISHED"]
        assert finished and all(job["tasks"]["total"] > 0 for job in finished)
    else:
        apps = _spark_state(folder)["completedapps"]
        assert apps and apps[-1]["state"] == "FINISHED" and apps[-1]["cores"] == 2


def _spark_state(folder: Path) -> dict:
    """The standalone master's state (its web UI's JSON)."""
    ui = (folder / "webui-port").read_text().strip()
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=10) as response:
        return json.load(response)


def _kill_mid_job(images, output, options, running, victim, settle: float = 0.0):
    """Start the sharding job, SIGKILL the process `victim()` names `settle` seconds after
    `running()` first holds; the job's exit code and output."""
    job = subprocess.Popen(
        [sys.executable, "-m", "beam_jobs.shard_images", "--input", str(images),
         "--output", str(output), *options],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not running():
            assert job.poll() is None and time.monotonic() < deadline, job.stdout.read()[-3000:]
            time.sleep(0.3)
        time.sleep(settle)
        os.kill(victim(), signal.SIGKILL)
        log = job.communicate(timeout=600)[0]
        return job.returncode, log
    finally:
        if job.poll() is None:
            job.kill()


def test_a_taskmanager_killed_mid_job_fails_the_job_cleanly(flink, sample_images, tmp_path):
    folder, options = flink
    before = {job["jid"] for job in _jobs(options)}
    output = tmp_path / "shards"
    try:
        code, log = _kill_mid_job(
            sample_images, output, options,
            running=lambda: any(
                j["state"] == "RUNNING" for j in _jobs(options) if j["jid"] not in before
            ),
            victim=lambda: int((folder / "flink--taskexecutor.pid").read_text().split()[0]),
        )  # fmt: skip
    finally:
        # The next test needs both TaskManagers again.
        subprocess.run([CLUSTERS, "flink", "taskmanager", str(folder)], timeout=120)
    # Flink's restart strategy (fixed delay, 2 attempts) cannot place parallelism 2 on the
    # one TaskManager left: the job fails, and the sharding job commits nothing.
    assert code == 3, log[-3000:]
    assert "the sharding job failed while running the pipeline" in log
    assert not (output / "_SUCCESS").exists()
    assert not list(output.glob("*.tfrecord")) and not list(output.glob("_staging*"))


def test_the_dag_shards_on_a_cluster_and_trains_on_those_shards(cluster, tmp_path):
    from beam_jobs import sample_data

    _, _, options = cluster
    images = tmp_path / "images"
    sample_data.generate(str(images), images_per_class=30, seed=5)
    beam_options = dict(o.removeprefix("--").split("=", 1) for o in options[1:])
    runner = options[0].split("=")[1]
    conf = run_conf(tmp_path, images, beam_runner=runner, beam_options=beam_options, epochs=2)
    env = airflow_env(tmp_path / "airflow_home")
    assert airflow(env, "db", "migrate").returncode == 0
    run = airflow(env, "dags", "test", DAG_ID, "-c", json.dumps(conf))
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    assert latest_version(conf["model_root"], "shapes") == 1
    (metadata,) = Path(conf["output_root"]).rglob("shards/metadata.json")
    assert json.loads(metadata.read_text())["runner"] == runner


def test_a_spark_worker_killed_mid_job_loses_nothing(spark, sample_images, tmp_path):
    """Spark reschedules a lost executor's tasks on the worker left (spark.task.maxFailures):
    the job either completes with the local runner's bytes or fails committing nothing."""
    folder, options = spark
    output = tmp_path / "shards"
    code, log = _kill_mid_job(
        sample_images, output, options,
        running=lambda: bool(_spark_state(folder)["activeapps"]),
        # spark-daemon.sh names it spark-$USER-CLASS-INSTANCE.pid ($USER may be empty).
        victim=lambda: int(
            next(folder.glob("spark-*-org.apache.spark.deploy.worker.Worker-1.pid")).read_text()
        ),
        settle=3,  # the application's executors are running its first stages
    )  # fmt: skip
    if code == 0:
        assert shard_job(sample_images, tmp_path / "local", in_process=False) == 0
        assert _digests(output) == _digests(tmp_path / "local"), log[-3000:]
    else:
        assert code == 3, log[-3000:]
        assert not (output / "_SUCCESS").exists()
        assert not list(output.glob("*.tfrecord"))
    print(f"a Spark worker killed mid-job: exit {code}")
