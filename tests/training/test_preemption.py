"""SIGTERM to one worker (a spot VM or a pod being evicted): every worker saves at the
same step and exits with the restart code, the launcher restarts them, nothing is lost."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from training.worker_env import PREEMPTED_EXIT_CODE

# A fault-injection run (SIGTERM mid-training, restart): the slow tier, make test-slow.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def test_sigterm_to_one_worker_saves_everywhere_and_the_launcher_restarts_them(
    trainable_shards, tmp_path
):
    output = tmp_path / "train"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "training.launch", "--num-workers", "2",
         "--data", trainable_shards, "--output", str(output), "--epochs", "4",
         "--checkpoint-every", "1000", "--steps-per-call", "2",
         "--per-replica-batch-size", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    pids, lines, signalled = {}, [], False
    deadline = time.monotonic() + 600
    for line in launcher.stdout:
        lines.append(line)
        if match := re.match(r"\[launch\] worker (\d) pid (\d+)", line):
            pids[int(match.group(1))] = int(match.group(2))
        # Mid-epoch 2: far from any checkpoint the run would write on its own.
        if not signalled and re.search(r"worker-1: epoch 1/4 ", line):
            time.sleep(1.0)
            os.kill(pids[1], signal.SIGTERM)
            signalled = True
        assert time.monotonic() < deadline, "".join(lines[-50:])
    log = "".join(lines)
    assert launcher.wait(timeout=120) == 0, log[-5000:]
    assert signalled

    saved = re.findall(r"worker-(\d): preempted: checkpoint saved at step (\d+)", log)
    assert {worker for worker, _ in saved} == {"0", "1"}, log[-5000:]
    (step,) = {int(s) for _, s in saved}  # both at the same step
    assert f"exit {PREEMPTED_EXIT_CODE}" in log
    assert "[launch] restarting all 2 workers (restart 1 of" in log
    metrics = json.loads((output / "metrics.json").read_text())
    per_epoch = metrics["epochs"][0]["step"]
    # Mid-epoch 2 (or, signalled during its last call, right after its own checkpoint).
    assert per_epoch < step <= 2 * per_epoch
    assert metrics["resumed_from_step"] == step  # nothing after the signal was lost
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3, 4]
    assert metrics["epochs"][-1]["step"] == 4 * per_epoch
    assert (output / "model" / "saved_model.pb").exists()
