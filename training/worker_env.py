"""Environment every training worker starts with, wherever it runs.

TensorFlow reads these when it starts, so they cannot be set from inside the
worker: the local launcher, the Kubernetes Job, the Vertex AI CustomJob and the
trainer image all set them from here (a value already in the environment wins).

`TF_CPU_ALLOCATOR_USE_BFC=true`: TensorFlow's default CPU allocator hands
memory back to the OS after every step under MultiWorkerMirroredStrategy.
Measured on 2 cores: 0.45 of a core in the kernel, 144 K page faults/s and 40 %
fewer images/s, even for one worker alone; with the BFC allocator, 0.07 (see
bench/: `python -m bench.training`).
"""

from __future__ import annotations

from stageconfig import exit_codes

WORKER_ENV = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}

# A worker told to stop (SIGTERM: a spot VM reclaimed, a pod evicted) saves a checkpoint
# at the same step as every other worker and exits with this code, which the launchers
# treat as "restart every worker", not as a failure (stageconfig/exit_codes.py).
PREEMPTED_EXIT_CODE = exit_codes.PREEMPTED


def worker_env_list() -> list[dict[str, str]]:
    """As Kubernetes and Vertex AI spell an environment: [{"name": ..., "value": ...}]."""
    return [{"name": name, "value": value} for name, value in sorted(WORKER_ENV.items())]
