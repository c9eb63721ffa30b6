"""Launch a training with `training.launch`, SIGTERM one worker when a log line appears,
and return the whole log once the launcher has exited 0 (restarts included)."""

import os
import re
import signal
import subprocess
import sys
import time


def launch_and_preempt(args: list[str], when: str, *, worker: int = 1, delay: float = 1.0) -> str:
    """`args` follow `python -m training.launch`; the SIGTERM goes to `worker` `delay`
    seconds after the first line matching `when`."""
    launcher = subprocess.Popen(
        [sys.executable, "-m", "training.launch", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    pids, lines, signalled = {}, [], False
    deadline = time.monotonic() + 600
    for line in launcher.stdout:
        lines.append(line)
        if match := re.match(r"\[launch\] worker (\d) pid (\d+)", line):
            pids[int(match.group(1))] = int(match.group(2))
        if not signalled and re.search(when, line):
            time.sleep(delay)
            os.kill(pids[worker], signal.SIGTERM)
            signalled = True
        assert time.monotonic() < deadline, "".join(lines[-50:])
    log = "".join(lines)
    assert launcher.wait(timeout=120) == 0, log[-5000:]
    assert signalled, log[-5000:]
    return log
