"""What measuring the data costs the sharding job (issue #27 point 4): the job with its
dataset statistics and perceptual hashing against without them, side by side on the same
images, alternating, each run a fresh process on 2 worker threads (bench/
data_statistics_job.py holds the switch). Goal: at most 15 % more time at 40,000 images.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

from bench import common

THREADS = ["--direct_running_mode=multi_threading", "--direct_num_workers=2"]


def run_once(variant: str, images: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "bench.data_statistics_job",
        variant,
        "--input",
        str(images),
        "--output",
        str(out),
        "--min-shards",
        "4",
        *THREADS,
    ]
    return common.timed(command, cwd=common.REPO, env=common.bench_env())


def run(work: Path, *, images: int, repeats: int, results_dir: Path = common.RESULTS) -> dict:
    folder = common.sample_images(work, images)
    count = sum(1 for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    seconds: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(repeats):
        for variant in ("without", "with"):  # alternating: drift on a shared machine is shared
            seconds[variant].append(run_once(variant, folder, work / f"out-stats-{variant}"))
    summaries = {variant: common.summary(values) for variant, values in seconds.items()}
    result = {
        "machine": common.machine(),
        "params": {"images": count, "repeats": repeats, "runner": " ".join(THREADS)},
        "seconds": summaries,
        "images_per_second": {v: count / statistics.median(s) for v, s in seconds.items()},
        "ratio_with_vs_without_seconds": common.ratio(summaries["with"], summaries["without"]),
    }
    common.write_result("data_statistics", result, results_dir)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.data_statistics", description=__doc__)
    parser.add_argument("--work", type=Path, default=common.REPO / "bench" / ".work")
    parser.add_argument("--images", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    result = run(args.work, images=args.images, repeats=args.repeats)
    print({k: v for k, v in result.items() if "ratio" in k})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
