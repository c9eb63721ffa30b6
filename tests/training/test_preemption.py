"""SIGTERM to one worker (a spot VM or a pod being evicted): every worker saves at the
same step and exits with the restart code, the launcher restarts them, nothing is lost."""

import json
import re

import pytest

from tests.training.preempt import launch_and_preempt
from training.worker_env import PREEMPTED_EXIT_CODE

# A fault-injection run (SIGTERM mid-training, restart): the slow tier, make test-slow.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def test_sigterm_to_one_worker_saves_everywhere_and_the_launcher_restarts_them(
    trainable_shards, tmp_path
):
    output = tmp_path / "train"
    # Mid-epoch 2: far from any checkpoint the run would write on its own.
    log = launch_and_preempt(
        ["--num-workers", "2", "--data", trainable_shards, "--output", str(output),
         "--epochs", "4", "--checkpoint-every", "1000", "--steps-per-call", "2",
         "--per-replica-batch-size", "8"],
        when=r"worker-1: epoch 1/4 ",
    )  # fmt: skip

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
