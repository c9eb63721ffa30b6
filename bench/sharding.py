"""Sharding throughput: the Beam job on the local runner vs a single-process Python loop.

At three dataset sizes, so that each method's wall time splits into a fixed
start-up cost and a per-image cost (a least-squares line through
(images, seconds)). At the largest size the job also runs with 1 worker
process, against 2 (DirectRunner multi_processing), to show how it grows
with cores. Every run
is a fresh process, as a user would start it.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

from bench import common

METHODS = ("python_loop", "beam_1_worker", "beam_2_workers")
FITTED = ("python_loop", "beam_2_workers")


def run_once(method: str, images: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    if method == "python_loop":
        out.mkdir(parents=True)
        command = [sys.executable, "-m", "bench.python_loop_shard", str(images), str(out / "all")]
        return common.timed(command, cwd=common.REPO, env=common.bench_env())
    return common.shard(images, out, workers=1 if method == "beam_1_worker" else 2)


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
        count = sum(1 for p in images.rglob("*") if p.is_file() and not p.name.startswith("."))
        # 1 worker only at the largest size: it answers how the job grows with workers;
        # the fixed/per-image split needs only the two methods compared.
        methods = METHODS if size == max(sizes) else FITTED
        for method in methods:
            seconds = [run_once(method, images, work / f"out-{method}") for _ in range(repeats)]
            per_size[method][count] = {
                "seconds": common.summary(seconds),
                "images_per_second": count / statistics.median(seconds),
            }
    largest = max(per_size["python_loop"])
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
        "marginal_ratio_vs_naive": lines["python_loop"]["seconds_per_image"]
        / lines["beam_2_workers"]["seconds_per_image"],
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
