"""Ctrl-C as a terminal sends it: SIGINT to the command's whole process group."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from tests.dags.airflow_env import REPO


def interrupt_when(
    command: list[str], said: str, after: float = 0.0, timeout: float = 600
) -> tuple[int, str]:
    """Start `command` in a process group of its own, send the group SIGINT `after` seconds
    after a line of its output contains `said`; -> (exit code, everything it printed)."""
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        sent = False
        for line in process.stdout:
            lines.append(line)
            if not sent and said in line:
                threading.Timer(after, os.killpg, (process.pid, signal.SIGINT)).start()
                sent = True
        process.wait()
    finally:
        timer.cancel()
    assert sent, f"never saw {said!r}:\n{''.join(lines)[-3000:]}"
    return process.returncode, "".join(lines)
