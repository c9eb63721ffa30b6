"""Ctrl-C during `training.launch`: every worker saves a checkpoint and stops, the
terminal gets one line and exit 130, and the same command resumes. A mistake in the
flags is refused once, before any worker starts."""

import sys

import pytest

from stageconfig import exit_codes
from tests.interrupt import interrupt_when

pytestmark = pytest.mark.slow  # trains in subprocesses


def test_ctrl_c_saves_says_one_line_and_the_same_command_resumes(trainable_shards, tmp_path):
    run = str(tmp_path / "run")
    command = [sys.executable, "-m", "training.launch", "--num-workers", "2",
               "--data", trainable_shards, "--output", run, "--epochs", "200"]  # fmt: skip
    code, printed = interrupt_when(command, said="epoch 2/200")
    assert code == exit_codes.INTERRUPTED, printed[-3000:]
    assert "Traceback" not in printed, printed[-3000:]
    assert printed.strip().splitlines()[-1] == (
        "interrupted: every worker saved a checkpoint and stopped; the same command "
        "resumes from the run's last checkpoint"
    )
    steps = [int(p.name[5:-6]) for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*.index")]
    assert steps
    code, printed = interrupt_when(command, said="resumed from step")
    assert code == exit_codes.INTERRUPTED, printed[-3000:]
    assert f"resumed from step {max(steps)} " in printed


def test_a_bad_flag_is_refused_once_before_any_worker_starts(tmp_path):
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "training.launch", "--num-workers", "2", "--data",
         str(tmp_path), "--output", str(tmp_path / "run"), "--epochs", "-3"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "[launch] worker" not in proc.stdout + proc.stderr
    assert proc.stderr.count("--epochs must be in [1, 10000], got -3") == 1
    assert len(proc.stderr.strip().splitlines()) == 2  # the usage line and the error
