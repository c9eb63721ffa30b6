"""The container images as they are deployed, built with podman (`make test-images`, which
runs `scripts/images.sh build` first): the trainer image trains across two containers with
the Kubernetes renderer's command, args and env, and saves and resumes on SIGTERM; the Beam
image runs the sharding job without TensorFlow; the Airflow image parses and runs the DAG."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from beam_jobs import sample_data
from orchestration.launchers import TrainingJob, kubernetes
from orchestration.publish import latest_version
from tests.jobs import run_conf, shard_job, tree_digests
from training.worker_env import PREEMPTED_EXIT_CODE

REPO = Path(__file__).resolve().parents[2]
IMAGES = str(REPO / "scripts" / "images.sh")
TRAINER = "imagepipe-trainer:local"
BEAM = "imagepipe-beam:local"
AIRFLOW = "imagepipe-airflow:local"
AIRFLOW_TRAINING = "imagepipe-airflow-training:local"

# Builds and runs containers (podman, root or sudo): make test-images only.
pytestmark = [pytest.mark.extended, pytest.mark.images, pytest.mark.timeout(1800)]


def podman(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [IMAGES, "podman", *args], capture_output=True, text=True, timeout=timeout
    )


def run(*args: str, timeout: int = 900, verb: str = "run") -> subprocess.CompletedProcess:
    """`podman run` (or `create`) with the flags this machine needs (scripts/images.sh)."""
    return subprocess.run([IMAGES, verb, *args], capture_output=True, text=True, timeout=timeout)


def built(image: str) -> str:
    assert podman("image", "exists", image).returncode == 0, (
        f"{image} is not built: run scripts/images.sh build (make test-images does)"
    )
    return image


@pytest.fixture
def shared(tmp_path):
    """A folder every container can write (the images run as uid 1000 and 50000)."""
    tmp_path.chmod(0o777)
    return tmp_path


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _trainer_containers(shards: str, output: Path, name: str, **flags) -> list[str]:
    """Two trainer containers created (not started) from the Kubernetes launcher's manifests:
    each pod's command, args and env, with one change: the Service's DNS names in TF_CONFIG
    become loopback ports, since both containers share the host network here."""
    job = TrainingJob(data=shards, output=str(output), num_workers=2, train_flags=flags)
    manifests = kubernetes.render(job, name=name, image=built(TRAINER))
    pods = [m["spec"]["template"]["spec"]["containers"][0] for m in manifests if m["kind"] == "Job"]
    assert len(pods) == 2
    hosts = [f"localhost:{port}" for port in _free_ports(2)]
    names = []
    for index, pod in enumerate(pods):
        env = {item["name"]: item["value"] for item in pod["env"]}
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": index}
        tf_config["cluster"]["worker"] = hosts
        env["TF_CONFIG"] = json.dumps(tf_config)
        container = f"{name}-{index}"
        podman("rm", "-f", container)
        created = run(
            "--name", container, "--stop-timeout", "120",
            "-v", f"{shards}:{shards}:ro", "-v", f"{output.parent}:{output.parent}",
            "--entrypoint", json.dumps(pod["command"]),
            *[arg for key, value in env.items() for arg in ("-e", f"{key}={value}")],
            pod["image"], *pod["args"], verb="create",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        names.append(container)
    return names


def _wait(containers: list[str]) -> list[int]:
    waited = podman("wait", *containers, timeout=900)
    assert waited.returncode == 0, waited.stderr
    return [int(code) for code in waited.stdout.split()]


def _logs(container: str) -> str:
    logs = podman("logs", container)
    return logs.stdout + logs.stderr


def _fingerprints(containers: list[str]) -> set[str]:
    found = set()
    for container in containers:
        found |= set(re.findall(r"final weights fingerprint (\w+)", _logs(container)))
    return found


def test_trainer_image_trains_across_two_containers_and_exports(trainable_shards, shared):
    output = shared / "run" / "train"
    output.parent.mkdir()
    output.parent.chmod(0o777)  # the trainer image runs as uid 1000
    containers = _trainer_containers(
        trainable_shards, output, "imagepipe-train", epochs=2, per_replica_batch_size=8
    )
    try:
        assert podman("start", *containers).returncode == 0
        codes = _wait(containers)
        logs = "".join(_logs(c)[-3000:] for c in containers)
        assert codes == [0, 0], logs
        assert len(_fingerprints(containers)) == 1, logs  # both workers, one model
        assert (output / "model" / "saved_model.pb").exists()
        metrics = json.loads((output / "metrics.json").read_text())
        assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]
    finally:
        podman("rm", "-f", *containers)


def test_sigterm_to_one_container_saves_both_and_a_restart_resumes(trainable_shards, shared):
    output = shared / "run" / "train"
    output.parent.mkdir()
    output.parent.chmod(0o777)  # the trainer image runs as uid 1000
    containers = _trainer_containers(
        trainable_shards, output, "imagepipe-preempt",
        epochs=4, per_replica_batch_size=8, steps_per_call=2, checkpoint_every=1000,
    )  # fmt: skip
    try:
        assert podman("start", *containers).returncode == 0
        deadline = time.monotonic() + 600
        while "epoch 1/4" not in _logs(containers[1]):  # mid-epoch 2: far from a checkpoint
            assert time.monotonic() < deadline, _logs(containers[1])[-3000:]
            time.sleep(1)
        stop = podman("stop", "-t", "120", containers[1])  # SIGTERM, as a pod's eviction
        assert stop.returncode == 0, stop.stderr
        codes = _wait(containers)
        logs = "".join(_logs(c) for c in containers)
        assert codes == [PREEMPTED_EXIT_CODE] * 2, logs[-5000:]
        saved = re.findall(r"(worker-\d): preempted: checkpoint saved at step (\d+)", logs)
        assert {worker for worker, _ in saved} == {"worker-0", "worker-1"}, logs[-5000:]
        (step,) = {int(s) for _, s in saved}

        # A Job replaces its pod with the same spec: here the same containers start again.
        assert podman("start", *containers).returncode == 0
        codes = _wait(containers)
        logs = "".join(_logs(c) for c in containers)
        assert codes == [0, 0], logs[-5000:]
        metrics = json.loads((output / "metrics.json").read_text())
        assert metrics["resumed_from_step"] == step
        assert metrics["epochs"][0]["step"] < step  # saved mid-training, not at a checkpoint
        assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3, 4]
        assert len(_fingerprints(containers)) == 1
        assert (output / "model" / "saved_model.pb").exists()
    finally:
        podman("rm", "-f", *containers)


def test_beam_image_has_no_tensorflow_and_shards_as_the_host_does(sample_with_corrupt, shared):
    images, corrupt = sample_with_corrupt
    no_tf = run(
        "--rm",
        built(BEAM),
        "-c",
        "import importlib.util as u; assert not u.find_spec('tensorflow')",
    )
    assert no_tf.returncode == 0, no_tf.stderr[-2000:]

    flags = ["--max-error-fraction", "0.2"]  # the corrupt files go to errors/
    in_container = shared / "container"
    job = run(
        "--rm", "-v", f"{images}:{images}:ro", "-v", f"{shared}:{shared}",
        BEAM, "-m", "beam_jobs.shard_images",
        "--input", images, "--output", str(in_container), *flags,
    )  # fmt: skip
    assert job.returncode == 0, (job.stdout + job.stderr)[-4000:]
    assert (in_container / "_SUCCESS").exists()

    on_host = shared / "host"
    assert shard_job(images, on_host, *flags, in_process=False) == 0
    shards = tree_digests(in_container, "*.tfrecord*")
    assert shards and shards == tree_digests(on_host, "*.tfrecord*")
    # Dead letters too: the same files refused for the same reasons.
    refused = [line for f in in_container.glob("errors/*") for line in f.read_text().splitlines()]
    assert len(refused) == len(corrupt)
    assert tree_digests(in_container, "errors/*") == tree_digests(on_host, "errors/*")
    assert tree_digests(in_container, "copies/*") == tree_digests(on_host, "copies/*")


def test_airflow_image_parses_the_dag_without_tensorflow(shared):
    listed = run(
        "--rm", "-v", f"{shared}:{shared}", "-e", "AIRFLOW__CORE__LOAD_EXAMPLES=False",
        "--entrypoint", "bash", built(AIRFLOW), "-c",
        f"airflow db migrate >/dev/null && airflow dags reserialize >/dev/null"
        f" && airflow dags list-import-errors -o json > {shared}/errors"
        f" && airflow dags list -o json > {shared}/dags"
        " && python -c \"import importlib.util as u; assert not u.find_spec('tensorflow')\"",
    )  # fmt: skip
    assert listed.returncode == 0, (listed.stdout + listed.stderr)[-4000:]
    # Airflow's CLI logs its graphviz notice to stdout before the JSON: the last line.
    assert json.loads((shared / "errors").read_text().splitlines()[-1]) == []
    dags = json.loads((shared / "dags").read_text().splitlines()[-1])
    assert "image_model_pipeline" in {d["dag_id"] for d in dags}


def test_airflow_training_image_runs_the_dag_with_the_local_launcher(shared):
    images = shared / "images"
    sample_data.generate(str(images), images_per_class=40, seed=11)
    conf = run_conf(shared, images, epochs=2, num_workers=2)
    dag = run(
        "--rm", "-v", f"{shared}:{shared}", "-e", "AIRFLOW__CORE__LOAD_EXAMPLES=False",
        "-e", "IMAGEPIPE_SCHEDULE=", "--entrypoint", "bash", built(AIRFLOW_TRAINING),
        "-c", 'airflow db migrate >/dev/null && airflow dags test image_model_pipeline -c "$0"',
        json.dumps(conf), timeout=1500,
    )  # fmt: skip
    assert dag.returncode == 0, (dag.stdout + dag.stderr)[-6000:]
    assert latest_version(conf["model_root"], "shapes") == 1
    assert os.path.exists(Path(conf["model_root"]) / "shapes" / "1" / "saved_model.pb")


def _layers(image: str) -> list[str]:
    inspected = podman("image", "inspect", "--format", "{{json .RootFS.Layers}}", built(image))
    assert inspected.returncode == 0, inspected.stderr
    return json.loads(inspected.stdout)


def test_airflow_training_image_is_the_airflow_image_plus_one_layer():
    # Two separate installs of the whole stack took 4.2 GB more disk than one (a CI run ran
    # out of it); the training stage shares every layer of the airflow image.
    base, training = _layers(AIRFLOW), _layers(AIRFLOW_TRAINING)
    assert training[: len(base)] == base
    assert len(training) == len(base) + 1


def test_a_build_the_disk_cannot_hold_stops_in_one_line_before_building():
    refused = subprocess.run(
        [IMAGES, "build", "beam"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "IMAGES_DISK_GB": "100000"},
    )  # fmt: skip
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs ~100000 GB free in" in lines[0], refused.stderr
    assert "STEP" not in refused.stdout  # nothing was built
