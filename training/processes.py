"""Child processes that cannot outlive their parent.

When an orchestrator kills a task process (Airflow's task timeout, a worker
lost, `kill -9`), its children are not killed with it: an orphaned training
launcher would go on writing checkpoints into the run folder while the task's
retry starts another one there. Linux's parent-death signal closes that gap:
the child gets SIGTERM the moment its parent dies, and the launcher's SIGTERM
handler stops its workers in turn.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent(then: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen: SIGTERM this child when its parent dies."""
    if not sys.platform.startswith("linux"):
        return then
    parent = os.getpid()

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
        if then is not None:
            then()

    return preexec
