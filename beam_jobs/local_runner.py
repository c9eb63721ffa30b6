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
`make bench --scale` (`bench/sharding_scale.py --all-modes`, 2 cores, each mode at 4,000
and 40,000 images of two sizes), and the per-image cost grows with the image's stored
bytes: small images are mostly the Python around each image, which holds the GIL (threads
then run slower than one thread), large ones mostly decoding, which releases it. The job
takes whichever mode they predict is fastest for its number of images, their mean size on
disk and the cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LOCAL_RUNNER = "FnApiRunner"
# Names that mean "run it here" and get the choice below.
LOCAL_RUNNER_NAMES = (None, "DirectRunner", "SwitchingDirectRunner", LOCAL_RUNNER)

# Measured by `python -m bench.sharding_scale --all-modes` (bench/results/sharding_scale.json,
# 2 cores): each mode's fixed seconds, and its milliseconds per image at the mean size of
# the thumbnails (4.3 KB) with what each further KB adds (fitted through the photos, 125
# KB). Threads: wall time per image on 2 threads (not divided by the cores below, as the
# model has not been measured on more); worker processes: CPU per image, spread over the
# workers. On 2 cores: thumbnails run on one thread up to about 11,000 images, then on
# processes; photos on threads up to about 8,000, then on processes.
SMALL_KB = 4.34
FIXED_S = {"in_memory": 2.4, "multi_threading": 2.5, "multi_processing": 4.4}
MS_PER_IMAGE = {  # (at SMALL_KB, per further KB)
    "in_memory": (0.536, 0.0244),
    "multi_threading": (0.664, 0.01145),
    "multi_processing": (0.738, 0.0238),  # CPU: 2 x the wall time on 2 workers
}
DEFAULT_KB = 57.0  # the mean of the bench's images, when the sizes are not known


def given(beam_args: list[str], *flags: str) -> bool:
    """Whether any of `flags` is among the pass-through Beam flags (`--flag` or `--flag=v`)."""
    return any(arg.startswith(flags) for arg in beam_args)


@dataclass(frozen=True)
class LocalMode:
    running_mode: str  # "in_memory", "multi_threading" or "multi_processing"
    workers: int


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def predicted_seconds(mode: LocalMode, num_images: int, mean_kb: float = DEFAULT_KB) -> float:
    at_small, per_kb = MS_PER_IMAGE[mode.running_mode]
    ms = at_small + per_kb * max(0.0, mean_kb - SMALL_KB)
    if mode.running_mode == "multi_processing":
        ms /= mode.workers
    return FIXED_S[mode.running_mode] + ms * num_images / 1000


def choose_local_mode(
    num_images: int, cores: int | None = None, mean_bytes: float | None = None
) -> LocalMode:
    """The mode predicted fastest: one thread for small jobs, and for small images
    (the GIL-bound Python around each dominates), a thread per core for mid-sized jobs of
    larger images, one worker process per core for large jobs or many cores."""
    cores = cores or available_cores()
    if cores < 2:
        return LocalMode("in_memory", 1)
    mean_kb = DEFAULT_KB if mean_bytes is None else mean_bytes / 1024
    candidates = (
        LocalMode("in_memory", 1),
        LocalMode("multi_threading", cores),
        LocalMode("multi_processing", cores),
    )
    return min(candidates, key=lambda mode: predicted_seconds(mode, num_images, mean_kb))


# glibc gives each thread that allocates while another holds the main heap an arena of its
# own, up to 8 per core, and memory freed in one arena is not reused by the others. The
# local runner's gRPC and data-plane threads spread its buffers over many arenas: at
# 200,000 thumbnails the driver peaked at 853 MB and the larger worker at 920 MB with
# glibc's default, 593 and 771 MB with 2 arenas, in the same time (39.9 s and 39.5 s; 40,000
# images: 393 and 322 MB, 11.9 and 11.6 s).
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas in this process (arenas made from now on) and in the
    worker processes it starts (MALLOC_ARENA_MAX, which they read at start-up), unless
    the environment already sets it. False where the C library is not glibc."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    if not _mallopt(_M_ARENA_MAX, arenas):
        return False
    os.environ["MALLOC_ARENA_MAX"] = str(arenas)
    return True


# The runner's process hands every stage's elements on as large bytes objects. glibc
# serves blocks above its mmap threshold by mmap and gives them back when freed, but the
# threshold rises (up to 32 MB) each time such a block is freed, after which the next
# stage's buffers come from the heap, and the heap keeps the largest stage's size. A fixed
# threshold keeps giving them back: at 200,000 thumbnails the driver's read stage held
# 270 MB instead of 297, the bands' 330 instead of 380. Not set in the worker processes,
# where an image's decode buffers would then each be a fresh mapping.
MMAP_THRESHOLD = 128 * 1024  # glibc's starting value, kept
_M_MMAP_THRESHOLD = -3


def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold in this process (see MMAP_THRESHOLD), unless the
    environment sets it. False where the C library is not glibc."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return _mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def _mallopt(parameter: int, value: int) -> bool:
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.mallopt(parameter, value) == 1
    except (OSError, AttributeError):
        return False
