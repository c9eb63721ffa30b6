"""The `local` launcher: `python -m training.launch` as N processes on this machine,
its output streamed into the caller's log (the Airflow task's)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from orchestration.launchers import TrainingJob, failure
from training.processes import die_with_parent

TAIL_LINES = 30


@dataclass(frozen=True)
class Options:
    """None: the local launcher takes the job's worker count and nothing else."""


def run(
    job: TrainingJob,
    options: Options | None = None,
    *,
    emit: Callable[[str], None] = print,
    python: str = sys.executable,
) -> None:
    """Run the job; raise TrainingRefused (exit 2), TrainingPreempted (75, after the
    launcher's own restarts) or TrainingFailed with the launcher's last lines."""
    command = [python, "-m", "training.launch", "--num-workers", str(job.num_workers),
               *job.train_args()]  # fmt: skip
    emit("running: " + " ".join(command))
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=die_with_parent(),  # a killed task must not leave training running
    )
    tail: list[str] = []
    for line in process.stdout:
        emit(line.rstrip("\n"))
        tail = [*tail[-TAIL_LINES:], line.rstrip("\n")]
    code = process.wait()
    if code != 0:
        # A worker's one-line reason ("[worker 0] error: ..." or argparse's "...: error: ").
        errors = [line.split("error: ", 1)[1] for line in tail if "error: " in line]
        reason = errors[-1] if errors else "\n".join(tail)
        raise failure(code, f"training exited with code {code}: {reason}")
