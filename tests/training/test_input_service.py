"""tf.data service mode: the same records as the in-process pipeline, from 2 service workers."""

import collections
import json
import os
import subprocess
import sys
import threading

import pytest
import tensorflow as tf

from training import features
from training.config import ConfigError, parse_input_service
from training.input_service import start_local, through_service
from training.shards import ShardSet

pytestmark = pytest.mark.slow  # tf.data service processes


def _ids(files: list[str]) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices(files)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=2)
    return ds.map(lambda r: features.parse_example(r, (features.IMAGE_ID,))[features.IMAGE_ID])


def test_two_service_workers_deliver_every_record_exactly_once(trainable_shards):
    files = ShardSet.open(trainable_shards).files("train")
    service = start_local(2)
    local = collections.Counter(x.numpy() for x in _ids(files))
    served = collections.Counter(x.numpy() for x in through_service(_ids(files), service.address))
    assert served == local and max(served.values()) == 1 and len(served) > 100


@pytest.mark.parametrize(
    ("value", "parsed"),
    [("", ("", 0)), ("local:2", ("", 2)), ("svc:5050", ("svc:5050", 0)),
     ("grpc://10.0.0.2:5050", ("10.0.0.2:5050", 0)), ("cluster", ("cluster", 0))],
)  # fmt: skip
def test_the_flag_reads_off_local_or_an_address(value, parsed):
    assert parse_input_service(value) == parsed


@pytest.mark.parametrize("value", ["local:0", "local:x", "svc", "svc:port"])
def test_a_bad_flag_is_refused_in_one_line(value):
    with pytest.raises(ConfigError, match="--input-service"):
        parse_input_service(value)


def test_training_reads_through_local_service_workers(trainable_shards, tmp_path):
    output = tmp_path / "train"
    proc = subprocess.run(
        [sys.executable, "-m", "training.train", "--data", trainable_shards, "--output",
         str(output), "--epochs", "2", "--input-service", "local:2", "--cache="],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "input: through the tf.data service at localhost:" in proc.stderr
    metrics = json.loads((output / "metrics.json").read_text())
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]
    assert all(e["train_loss"] > 0 for e in metrics["epochs"])


def test_the_launcher_runs_the_service_as_its_own_process(trainable_shards, tmp_path):
    output = tmp_path / "train"
    proc = subprocess.run(
        [sys.executable, "-m", "training.launch", "--num-workers", "1",
         "--data", trainable_shards, "--output", str(output), "--epochs", "1",
         "--input-service=local:1", "--cache="],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("[launch] tf.data service")]
    address = line.split(" at ")[1].split(",")[0]
    # The trainer used that process's dispatcher, and started no service of its own.
    assert f"input: through the tf.data service at {address} (" in proc.stdout
    assert "worker(s) in this process" not in proc.stdout
    assert json.loads((output / "metrics.json").read_text())["epochs"][0]["epoch"] == 1


def test_trainers_find_the_service_in_tf_config_as_on_vertex(trainable_shards, tmp_path):
    """Vertex AI's layout, on localhost: a chief and a worker train, and the job's third pool
    (TF_CONFIG's `ps` task) serves their input. The `ps` task must stay out of the
    trainers' collectives: MultiWorkerMirroredStrategy would otherwise make it the leader
    of its coordination service and wait for it forever."""
    from training.launch import free_ports

    chief, worker, ps = (f"localhost:{p}" for p in free_ports(3))
    cluster = {"chief": [chief], "worker": [worker], "ps": [ps]}
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}

    def start(task: str, command: list[str]) -> subprocess.Popen:
        tf_config = json.dumps({"cluster": cluster, "task": {"type": task, "index": 0}})
        return subprocess.Popen(
            [sys.executable, "-m", *command], env={**env, "TF_CONFIG": tf_config},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    service = start("ps", ["training.input_service", "--workers", "1", "--from-tf-config"])
    train = ["training.train", "--data", trainable_shards, "--output", str(tmp_path / "train"),
             "--epochs", "1", "--input-service", "cluster", "--cache="]  # fmt: skip
    trainers = [start("chief", train), start("worker", train)]
    try:
        outputs = [t.communicate(timeout=600)[0] for t in trainers]
    finally:
        for proc in (*trainers, service):
            proc.kill()
    assert [t.returncode for t in trainers] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    for out in outputs:
        assert f"input: through the tf.data service at {ps} (" in out
        assert "with 2 replica(s) in sync" in out, out[-5000:]
    assert (tmp_path / "train" / "model").is_dir()


def test_a_service_killed_mid_epoch_and_restarted_loses_some_records_and_repeats_none(
    tmp_path, free_port
):
    """The mode's promise under failure (DYNAMIC: at most once). The service process
    (dispatcher and both workers) is SIGKILLed a fifth into a pass and restarted as a
    supervisor would (a pod's container restart: same address, same journal); the pass
    completes, no record comes twice, and what is lost is the unread part of the files
    the workers had in hand."""
    files = []
    for f in range(20):
        files.append(str(tmp_path / f"ids-{f:02d}.tfrecord"))
        with tf.io.TFRecordWriter(files[-1]) as writer:
            for i in range(50):
                writer.write(tf.io.serialize_tensor(tf.constant(f * 1000 + i, tf.int64)).numpy())
    command = [sys.executable, "-m", "training.input_service", "--workers", "2",
               "--port", str(free_port), "--work-dir", str(tmp_path / "journal")]  # fmt: skip

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().startswith("input service: dispatcher")
        return proc

    dataset = tf.data.Dataset.from_tensor_slices(files).interleave(tf.data.TFRecordDataset)
    dataset = dataset.map(lambda record: tf.io.parse_tensor(record, tf.int64))
    seen: list[int] = []
    services = [start()]

    def read_a_pass():
        for element in through_service(dataset, f"localhost:{free_port}"):
            seen.append(int(element))
            if len(seen) == 200:
                services[-1].kill()
                services[-1].wait()
                services.append(start())

    # A worker back at another address would leave the reader waiting for the old one.
    reader = threading.Thread(target=read_a_pass, daemon=True)
    reader.start()
    reader.join(timeout=180)
    for proc in services:
        proc.kill()
    assert not reader.is_alive(), f"the pass stalled after {len(seen)} records"
    assert len(services) == 2
    counts = collections.Counter(seen)
    assert max(counts.values()) == 1  # nothing repeated
    lost = {f * 1000 + i for f in range(20) for i in range(50)} - set(counts)
    assert set(counts) <= {f * 1000 + i for f in range(20) for i in range(50)}
    assert len(seen) > 500 and len({x // 1000 for x in lost}) <= 6, sorted(lost)


def test_the_launcher_restarts_a_dead_service_at_the_same_address(tmp_path):
    import io
    import time

    from training.launch import SupervisedService

    sink = io.StringIO()
    service = SupervisedService(sys.executable, 1, None, sink, str(tmp_path / "journal"))
    try:
        first = service.process
        first.kill()
        deadline = time.monotonic() + 120
        while service.process is first and time.monotonic() < deadline:
            time.sleep(0.2)
        assert service.restarts == 1 and service.process.poll() is None
        assert f"restarting it at {service.address}" in sink.getvalue()
        served = through_service(tf.data.Dataset.range(10), service.address)
        assert sorted(int(x) for x in served) == list(range(10))
    finally:
        service.stop()
    assert service.process.poll() is not None and service.restarts == 1  # stop is not a death
