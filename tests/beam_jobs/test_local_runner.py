import os
import re
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from beam_jobs.local_runner import LOCAL_RUNNER, LocalMode, choose_local_mode, predicted_seconds
from beam_jobs.pipeline import pipeline_options


def test_tiny_jobs_run_on_one_thread():
    assert choose_local_mode(10, cores=2) == LocalMode("in_memory", 1)


def test_mid_sized_jobs_of_photos_on_few_cores_run_on_threads_in_this_process():
    # Threads start nothing and overlap decoding, hashing and I/O (they release the GIL).
    assert choose_local_mode(3000, cores=2, mean_bytes=125_000) == LocalMode("multi_threading", 2)
    assert choose_local_mode(3000, cores=2) == LocalMode("multi_threading", 2)


def test_thumbnails_stay_on_one_thread_until_processes_pay_off():
    """Measured (bench/sharding_scale.py): 4,000 thumbnails took 4.7 s on one thread, 5.2
    on two threads, 5.9 on two processes; 40,000 took 24.0, 29.1 and 19.2."""
    assert choose_local_mode(4000, cores=2, mean_bytes=4400) == LocalMode("in_memory", 1)
    assert choose_local_mode(40_000, cores=2, mean_bytes=4400) == LocalMode("multi_processing", 2)


def test_the_measured_runs_are_predicted_and_the_fastest_is_chosen():
    """bench/results/sharding_scale.json's runs, each mode, both sizes and counts: the
    model within 20 % of each (one run each; the worst, 4,000 photos on one thread, 17 %
    below the line through its 40,000), and the choice the fastest measured mode."""
    measured = {
        (4000, 4.34): {"in_memory": 4.7, "multi_threading": 5.2, "multi_processing": 5.9},
        (40_000, 4.34): {"in_memory": 24.0, "multi_threading": 29.1, "multi_processing": 19.2},
        (4000, 125.4): {"in_memory": 14.0, "multi_threading": 10.6, "multi_processing": 11.7},
        (40_000, 125.4): {"in_memory": 139.7, "multi_threading": 84.3, "multi_processing": 77.0},
    }
    for (n, kb), seconds in measured.items():
        for mode, value in seconds.items():
            predicted = predicted_seconds(LocalMode(mode, 1 if mode == "in_memory" else 2), n, kb)
            assert abs(predicted - value) <= 0.2 * value, (n, kb, mode, predicted, value)
        best = min(seconds, key=seconds.get)
        assert choose_local_mode(n, cores=2, mean_bytes=kb * 1024).running_mode == best


def test_large_jobs_get_one_worker_process_per_core():
    assert choose_local_mode(100_000, cores=2) == LocalMode("multi_processing", 2)
    assert choose_local_mode(100_000, cores=8) == LocalMode("multi_processing", 8)
    assert choose_local_mode(100, cores=8).running_mode != "multi_processing"


def test_more_cores_move_the_crossover_to_processes_down():
    def crossover(cores):
        return next(
            n
            for n in range(0, 10**6, 100)
            if choose_local_mode(n, cores).running_mode == "multi_processing"
        )

    assert crossover(16) < crossover(8) < crossover(4)


def test_the_choice_is_the_fastest_predicted_mode():
    for cores in (2, 4, 8):
        for n in (10, 1000, 10_000, 100_000):
            chosen = predicted_seconds(choose_local_mode(n, cores), n)
            for mode in ("in_memory", "multi_threading", "multi_processing"):
                workers = 1 if mode == "in_memory" else cores
                assert chosen <= predicted_seconds(LocalMode(mode, workers), n)


def test_one_core_never_spawns_workers():
    assert choose_local_mode(10**6, cores=1) == LocalMode("in_memory", 1)


@pytest.mark.parametrize("runner", [[], ["--runner=DirectRunner"], ["--runner", "FnApiRunner"]])
def test_local_runner_is_named_explicitly(runner):
    # DirectRunner would first try Prism, which downloads a binary at run time.
    assert pipeline_options(runner).view_as(StandardOptions).runner == LOCAL_RUNNER


def test_asking_for_workers_means_worker_processes():
    direct = pipeline_options(["--direct_num_workers=2"]).view_as(DirectOptions)
    assert (direct.direct_running_mode, direct.direct_num_workers) == ("multi_processing", 2)


def test_other_runners_pass_through():
    options = pipeline_options(["--runner=DataflowRunner", "--project=p"])
    assert options.view_as(StandardOptions).runner == "DataflowRunner"


_ARENAS = """
import ctypes, os, sys, threading
from beam_jobs.local_runner import limit_malloc_arenas
limited = limit_malloc_arenas() if sys.argv[1] == "limit" else False
start = threading.Barrier(8)
def allocate():
    start.wait()  # all at once: each thread that finds the heap busy gets an arena
    blocks = [bytearray(4096 + i) for i in range(20000)]  # malloc, not Python's pools
    del blocks
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
sys.stderr.flush()
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
print(limited, os.environ.get("MALLOC_ARENA_MAX"))
"""


def _arenas(mode: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    proc = subprocess.run(
        [sys.executable, "-c", _ARENAS, mode], capture_output=True, text=True, env=env, check=True
    )
    return len(re.findall(r"^Arena \d+:", proc.stderr, re.M)), proc.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas")
def test_the_runner_process_and_its_workers_use_two_malloc_arenas():
    """Threads that allocate at once each get a glibc arena of their own (up to 8 per core)
    and what one frees the others do not reuse: the local runner's driver at 200,000 images
    peaked at 853 MB with the default, 593 MB with 2. Capped here and, through the
    environment, in the worker processes the runner starts."""
    default, said = _arenas("default")
    assert default > 2 and said == "False None"
    limited, said = _arenas("limit")
    assert limited <= 2 and said == "True 2"


_LARGE_BLOCKS = """
import sys, psutil
from beam_jobs.local_runner import return_large_blocks
fixed = return_large_blocks() if sys.argv[1] == "fixed" else False
rss = lambda: psutil.Process().memory_info().rss >> 20
freed = bytearray(4 << 20)
del freed  # a freed mapped block: glibc's dynamic threshold rises above the next ones
before = rss()
stage, kept = [], []
for _ in range(200):
    stage.append(bytearray(512 << 10))  # a stage's buffers, 100 MB
    kept.append(bytearray(600))  # what outlives the stage, between them on the heap
del stage
print(fixed, rss() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mmap threshold")
def test_the_runner_process_gives_a_stages_large_buffers_back():
    """Once glibc has freed one mapped block its threshold rises, the next large buffers
    come from the heap, and small blocks left between them keep the heap's size: the
    driver held its largest stage's buffers to the end. A fixed threshold maps them."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}

    def kept_mb(mode):
        done = subprocess.run(
            [sys.executable, "-c", _LARGE_BLOCKS, mode],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        fixed, kept = done.stdout.split()
        return fixed, int(kept)

    fixed, kept = kept_mb("default")
    assert fixed == "False" and kept > 80
    fixed, kept = kept_mb("fixed")
    assert fixed == "True" and kept < 10
