"""The local runner a sharding job gets when the user names none, chosen by input size.

Beam's `DirectRunner` (2.77) first tries Prism, which downloads a binary at run
time (offline it fails after about a second; online "DirectRunner" silently
becomes Prism), then falls back to the FnApiRunner for batch pipelines. So the
local runner is named explicitly: `FnApiRunner`, Beam's own portable local
runner, also when a user asks for `DirectRunner`.

Worker processes pay off only when there is enough work: each starts its own
Python with Beam (seconds), and the runner process proxies their data. The
constants below are the fixed and per-image costs measured by `make bench`
(`bench/sharding.py`, 2 cores, least squares over three sizes); the job takes
whichever mode they predict is faster for its number of images and cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LOCAL_RUNNER = "FnApiRunner"
# Names that mean "run it here" and get the choice below.
LOCAL_RUNNER_NAMES = (None, "DirectRunner", "SwitchingDirectRunner", LOCAL_RUNNER)

# Measured by `make bench` (bench/results/sharding.json, 2 cores, 300-3,000 images): in one
# process; with 2 worker processes (0.92 ms/image of wall time, i.e. 1.85 ms of CPU per image
# spread over the workers). The crossover on 2 cores is about 5,000 images.
IN_PROCESS_FIXED_S = 1.95
IN_PROCESS_MS_PER_IMAGE = 1.29
WORKERS_FIXED_S = 3.89
WORKERS_CPU_MS_PER_IMAGE = 1.85


@dataclass(frozen=True)
class LocalMode:
    running_mode: str  # "in_memory" or "multi_processing"
    workers: int


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def predicted_seconds(mode: LocalMode, num_images: int) -> float:
    if mode.running_mode == "in_memory":
        return IN_PROCESS_FIXED_S + IN_PROCESS_MS_PER_IMAGE * num_images / 1000
    return WORKERS_FIXED_S + WORKERS_CPU_MS_PER_IMAGE * num_images / 1000 / mode.workers


def choose_local_mode(num_images: int, cores: int | None = None) -> LocalMode:
    """One process for small jobs, one worker process per core for large ones."""
    cores = cores or available_cores()
    in_process = LocalMode("in_memory", 1)
    if cores < 2:
        return in_process
    workers = LocalMode("multi_processing", cores)
    if predicted_seconds(workers, num_images) < predicted_seconds(in_process, num_images):
        return workers
    return in_process
