"""The local runner a sharding job gets when the user names none, chosen by input size.

Beam's `DirectRunner` (2.77) first tries Prism, which downloads a binary at run
time (offline it fails after about a second; online "DirectRunner" silently
becomes Prism), then falls back to the FnApiRunner for batch pipelines. So the
local runner is named explicitly: `FnApiRunner`, Beam's own portable local
runner, also when a user asks for `DirectRunner`.

Three ways to run it here: in this process on one thread; on worker threads in
this process; or in worker processes. Threads start nothing (the same fixed
cost as one thread) and overlap what releases the GIL, which is most of a
sharding job's work: Pillow's decoding, hashing, file reads and writes. Worker
processes also parallelise the Python around it, but each starts its own
Python with Beam (seconds) and the runner process relays their control
traffic. The constants below are the fixed and per-image costs measured by
`make bench` (`bench/sharding.py`, 2 cores, least squares over three sizes);
the job takes whichever mode they predict is fastest for its number of images
and cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LOCAL_RUNNER = "FnApiRunner"
# Names that mean "run it here" and get the choice below.
LOCAL_RUNNER_NAMES = (None, "DirectRunner", "SwitchingDirectRunner", LOCAL_RUNNER)

# Measured by `make bench` (bench/results/sharding.json, 2 cores, 300-3,000 images): in one
# thread; on 2 worker threads (wall time per image on that many threads: it is not divided
# by the cores below, as the model has not been measured on more); with 2 worker processes
# (CPU per image, spread over the workers).
# On 2 cores one thread beats threads below about 170 images, and threads beat worker
# processes up to about 50,000.
IN_PROCESS_FIXED_S = 1.83
IN_PROCESS_MS_PER_IMAGE = 1.16
THREADS_FIXED_S = 1.90
THREADS_MS_PER_IMAGE = 0.74
WORKERS_FIXED_S = 3.72
WORKERS_CPU_MS_PER_IMAGE = 1.41


@dataclass(frozen=True)
class LocalMode:
    running_mode: str  # "in_memory", "multi_threading" or "multi_processing"
    workers: int


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def predicted_seconds(mode: LocalMode, num_images: int) -> float:
    if mode.running_mode == "in_memory":
        return IN_PROCESS_FIXED_S + IN_PROCESS_MS_PER_IMAGE * num_images / 1000
    if mode.running_mode == "multi_threading":
        return THREADS_FIXED_S + THREADS_MS_PER_IMAGE * num_images / 1000
    return WORKERS_FIXED_S + WORKERS_CPU_MS_PER_IMAGE * num_images / 1000 / mode.workers


def choose_local_mode(num_images: int, cores: int | None = None) -> LocalMode:
    """The mode predicted fastest: one thread per core in this process for most jobs on
    few cores, one worker process per core for large jobs or many cores."""
    cores = cores or available_cores()
    if cores < 2:
        return LocalMode("in_memory", 1)
    candidates = (
        LocalMode("in_memory", 1),
        LocalMode("multi_threading", cores),
        LocalMode("multi_processing", cores),
    )
    return min(candidates, key=lambda mode: predicted_seconds(mode, num_images))
