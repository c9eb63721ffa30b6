"""Sharding throughput: the Beam job on the local runner vs a single-process Python loop.

At three dataset sizes, so that each method's wall time splits into a fixed
start-up cost and a per-image cost (a least-squares line through
(images, seconds)): the job with 2 worker processes, in one process, and with
its default (which picks between those two by input size, from the costs
measured here: beam_jobs/local_runner.py), against the loop. The job also runs
with 1 worker process at every size, against 2, to show how it grows with cores,
and on 2 worker threads in one process. Every run is a fresh process, as a user
would start it. Beside them, the machine's own ceiling for this work: the
validation alone (`prepare_image` on every file) in 1 and in 2 processes of a
process pool, started before the clock runs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import common

METHODS = (
    "python_loop",
    "beam_in_process",
    "beam_1_worker",
    "beam_2_workers",
    "beam_2_threads",
    "beam_default",
)
FITTED = METHODS
THREADS = ["--direct_running_mode=multi_threading", "--direct_num_workers=2"]


def run_once(method: str, images: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    if method == "python_loop":
        out.mkdir(parents=True)
        command = [sys.executable, "-m", "bench.python_loop_shard", str(images), str(out / "all")]
        return common.timed(command, cwd=common.REPO, env=common.bench_env())
    if method == "beam_in_process":
        return common.shard(images, out, flags=["--direct_running_mode=in_memory"])
    if method == "beam_2_threads":
        return common.shard(images, out, flags=THREADS)
    workers = {"beam_1_worker": 1, "beam_2_workers": 2}.get(method, 0)  # 0: the job's default
    return common.shard(images, out, workers=workers)


def _validate(path: str) -> bool:
    from beam_jobs.images import ImageRejected, prepare_image

    with open(path, "rb") as handle:
        data = handle.read()
    try:
        prepare_image(data)
    except ImageRejected:
        return False
    return True


def image_files(images: Path) -> list[str]:
    """The sample's image files (not its hidden `.complete` marker), sorted."""
    return sorted(str(p) for p in images.rglob("*") if p.is_file() and not p.name.startswith("."))


def validation_seconds(images: Path, processes: int) -> float:
    """The validation work alone on `processes` pool processes (started beforehand)."""
    paths = image_files(images)
    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(_validate, paths[:processes]))  # start and import before timing
        started = time.perf_counter()
        list(pool.map(_validate, paths, chunksize=32))
        return time.perf_counter() - started


def fit_line(points: list[tuple[int, float]]) -> dict:
    """seconds = fixed + per_image * n, by least squares."""
    sizes = [n for n, _ in points]
    seconds = [s for _, s in points]
    mean_n, mean_s = statistics.fmean(sizes), statistics.fmean(seconds)
    slope = sum((n - mean_n) * (s - mean_s) for n, s in points) / sum(
        (n - mean_n) ** 2 for n in sizes
    )
    return {
        "fixed_seconds": mean_s - slope * mean_n,
        "seconds_per_image": slope,
        "marginal_images_per_second": 1.0 / slope if slope > 0 else None,
    }


def run(work: Path, *, sizes: list[int], repeats: int, results_dir: Path = common.RESULTS) -> dict:
    per_size: dict = {m: {} for m in METHODS}
    for size in sizes:
        images = common.sample_images(work, size)
        count = len(image_files(images))
        for method in METHODS:
            seconds = [run_once(method, images, work / f"out-{method}") for _ in range(repeats)]
            per_size[method][count] = {
                "seconds": common.summary(seconds),
                "images_per_second": count / statistics.median(seconds),
            }
    largest = max(per_size["python_loop"])
    validation = {
        str(k): common.summary(
            [validation_seconds(common.sample_images(work, sizes[-1]), k) for _ in range(repeats)]
        )
        for k in (1, 2)
    }
    lines = {
        m: fit_line([(n, r["seconds"]["median"]) for n, r in per_size[m].items()]) for m in FITTED
    }

    def at_largest(method):
        return per_size[method][largest]["images_per_second"]

    result = {
        "machine": common.machine(),
        "params": {"sizes": sorted(per_size["python_loop"]), "repeats": repeats},
        "runs": {m: {str(n): r for n, r in per_size[m].items()} for m in METHODS},
        "fixed_and_per_image_cost": lines,
        "largest_size": largest,
        "ratio_vs_naive": at_largest("beam_2_workers") / at_largest("python_loop"),
        "ratio_2_vs_1_workers": at_largest("beam_2_workers") / at_largest("beam_1_worker"),
        "ratio_default_vs_naive": at_largest("beam_default") / at_largest("python_loop"),
        "ratio_2_workers_vs_in_process": at_largest("beam_2_workers")
        / at_largest("beam_in_process"),
        "marginal_ratio_vs_naive": lines["python_loop"]["seconds_per_image"]
        / lines["beam_2_workers"]["seconds_per_image"],
        "marginal_ratio_2_vs_1_workers": lines["beam_1_worker"]["seconds_per_image"]
        / lines["beam_2_workers"]["seconds_per_image"],
        "ratio_2_threads_vs_naive": at_largest("beam_2_threads") / at_largest("python_loop"),
        "ratio_2_threads_vs_1_thread": at_largest("beam_2_threads") / at_largest("beam_in_process"),
        "validation_seconds_by_processes": validation,
        "validation_ratio_2_vs_1_processes": validation["1"]["median"] / validation["2"]["median"],
    }
    common.write_result("sharding", result, results_dir)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sharding", description=__doc__)
    parser.add_argument("--work", type=Path, default=common.REPO / "bench" / ".work")
    parser.add_argument("--sizes", type=int, nargs=3, default=[200, 600, 1800])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    result = run(args.work, sizes=args.sizes, repeats=args.repeats)
    print({k: v for k, v in result.items() if "ratio" in k})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
