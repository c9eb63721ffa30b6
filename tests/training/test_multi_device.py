"""The multi-device path of GPU workers, run on CPU split into logical devices (issue #28
point 4): one replica a device under MirroredStrategy in one worker and under
MultiWorkerMirroredStrategy across workers, the global batch = per-replica x replicas,
each replica fed its own examples, replicas in sync, a preempted run resumed on the same
layout; and the precision and compiler options each train on CPU.

A process can split its CPU only before TensorFlow starts, so each layout runs in a
process of its own (the trainer's CLI, or a short script)."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.training.preempt import launch_and_preempt
from training.worker_env import PREEMPTED_EXIT_CODE

pytestmark = pytest.mark.slow  # training runs

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def _train(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "training.train", *args],
        capture_output=True, text=True, timeout=timeout, env=ENV,
    )  # fmt: skip


def _fingerprints(log: str) -> dict[str, tuple[str, list[str]]]:
    """worker name -> (its fingerprint, its local replicas' fingerprints)."""
    found = re.findall(
        r"(worker-\d): final weights fingerprint (\w+) \(local replicas: ([\w ]+)\)", log
    )
    return {name: (whole, replicas.split()) for name, whole, replicas in found}


def test_two_devices_in_one_worker_train_in_sync_and_export(trainable_shards, tmp_path):
    output = tmp_path / "run"
    proc = _train(
        "--data", trainable_shards, "--output", str(output), "--epochs", "2",
        "--per-replica-batch-size", "8", "--cpu-devices", "2",
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "worker-0: MirroredStrategy with 2 replica(s) in sync" in log
    assert "global batch 16" in log  # 8 a replica x 2 replicas
    whole, replicas = _fingerprints(log)["worker-0"]
    assert replicas == [whole, whole]  # both devices' copies of every weight agree
    config = json.loads((output / "config.json").read_text())
    assert (config["replicas"], config["global_batch_size"]) == (2, 16)
    assert (output / "model" / "saved_model.pb").exists()


def test_each_replica_gets_its_own_examples(trainable_shards, tmp_path):
    """distribute_datasets_from_function: one input pipeline a worker, its batches dealt
    to the replicas in turn, so one step's replicas see disjoint examples."""
    script = textwrap.dedent(f"""
        import hashlib, json
        from training.distribute import ClusterInfo, make_strategy
        cluster = ClusterInfo("worker", 0, 1)
        strategy = make_strategy(cluster, cpu_devices=2)
        from training.config import DataConfig, TrainConfig
        from training.distributed_input import DistributedInput
        from training.shards import ShardSet
        config = TrainConfig(data={trainable_shards!r}, output={str(tmp_path / "x")!r},
                             per_replica_batch_size=8, input=DataConfig(augment=False))
        data = DistributedInput(config, cluster, strategy, ShardSet.open(config.data))
        images, labels = next(iter(data.distributed("train", training=True)))
        per_replica = [
            sorted(hashlib.sha1(i.tobytes()).hexdigest() for i in part.numpy())
            for part in strategy.experimental_local_results(images)
        ]
        print(json.dumps({{"devices": [p.device for p in
                                       strategy.experimental_local_results(images)],
                          "ids": per_replica}}))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=ENV
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [d.rsplit(":", 1)[-1] for d in seen["devices"]] == ["0", "1"]  # CPU:0, CPU:1
    first, second = seen["ids"]
    assert len(first) == len(second) == 8
    assert not set(first) & set(second)


@pytest.mark.extended  # a fault-injection run: the slow tier (make test-slow)
def test_two_workers_of_two_devices_stay_in_sync_through_a_preemption(trainable_shards, tmp_path):
    """2 workers x 2 CPU devices: 4 replicas, a global batch of 4 x 8; SIGTERM to one
    worker mid-run: both save at one step, the launcher restarts them on the same layout,
    the run resumes there, and all four replicas end with the same weights."""
    output = tmp_path / "train"
    log = launch_and_preempt(
        ["--num-workers", "2", "--cpu-devices", "2", "--data", trainable_shards,
         "--output", str(output), "--epochs", "3", "--checkpoint-every", "1000",
         "--steps-per-call", "1", "--per-replica-batch-size", "8"],
        when=r"worker-1: epoch 1/3 ",
        delay=0.5,
    )  # fmt: skip
    assert log.count("with 4 replica(s) in sync") == 4  # 2 workers, started twice
    assert "global batch 32" in log
    saved = re.findall(r"worker-(\d): preempted: checkpoint saved at step (\d+)", log)
    assert {worker for worker, _ in saved} == {"0", "1"}, log[-5000:]
    (step,) = {int(s) for _, s in saved}
    assert f"exit {PREEMPTED_EXIT_CODE}" in log
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == step > 0
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3]
    fingerprints = _fingerprints(log)
    assert set(fingerprints) == {"worker-0", "worker-1"}
    every = {whole for whole, _ in fingerprints.values()}
    every |= {r for _, replicas in fingerprints.values() for r in replicas}
    assert len(every) == 1 and all(len(r) == 2 for _, r in fingerprints.values())


def test_xla_compiles_and_trains_a_step_on_cpu(trainable_shards, tmp_path):
    proc = _train(
        "--data", trainable_shards, "--output", str(tmp_path / "run"), "--epochs", "1",
        "--steps-per-epoch", "2", "--per-replica-batch-size", "8", "--jit-compile",
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs"][-1]["step"] == 2


def test_xla_with_several_cpu_devices_is_refused_in_one_line(trainable_shards, tmp_path):
    proc = _train(
        "--data", trainable_shards, "--output", str(tmp_path / "run"),
        "--jit-compile", "--cpu-devices", "2",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "--jit-compile with --cpu-devices > 1" in proc.stderr.strip().splitlines()[-1]


def test_mixed_precision_trains_a_step_on_cpu(trainable_shards, tmp_path):
    """The float16 path GPUs take (the CLI ignores the flag on CPU, where it is slower):
    loss scaling, float16 compute, float32 weights, and a float32 serving copy."""
    script = textwrap.dedent(f"""
        import json, keras, numpy as np, tensorflow as tf
        from training.config import TrainConfig
        from training.data import synthetic_dataset
        from training.task import ImageTask
        keras.mixed_precision.set_global_policy("mixed_float16")
        config = TrainConfig(data={trainable_shards!r}, output={str(tmp_path / "x")!r},
                             per_replica_batch_size=8, mixed_precision=True)
        strategy = tf.distribute.get_strategy()
        task = ImageTask(config, strategy, num_classes=4, global_batch_size=8,
                         learning_rate=1e-3, total_steps=10)
        before = [w.copy() for w in task.model.get_weights()]
        data = synthetic_dataset(8, config.input.image_size, 4)
        task.train_steps_fn()(iter(data), tf.constant(2))
        after = task.model.get_weights()
        serving = task.serving_copy()
        print(json.dumps({{
            "optimizer": type(task.optimizer).__name__,
            "compute": sorted({{l.compute_dtype for l in task.model.layers}}),
            "weights": sorted({{str(w.dtype) for w in after}}),
            "step": int(task.step.numpy()),
            "changed": any(not np.array_equal(a, b) for a, b in zip(before, after)),
            "finite": all(np.isfinite(w).all() for w in after),
            "serving": sorted({{l.compute_dtype for l in serving.layers}}),
        }}))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=ENV
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {
        "optimizer": "LossScaleOptimizer",
        "compute": ["float16", "float32"],  # the logits stay float32
        "weights": ["float32"],
        "step": 2,
        "changed": True,
        "finite": True,
        "serving": ["float32"],
    }
