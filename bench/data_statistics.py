"""What measuring the data costs the sharding job (issue #27 point 4): the job with its
dataset statistics and perceptual hashing against without them, side by side on the same
images, alternating, each run a fresh process (bench/data_statistics_job.py and bench/
without_statistics hold the switch). Goal: at most 15 % more time at 40,000 images, in
the runner mode the job picks by default (worker processes there). Also timed on 2 worker
threads, where the hash's short calls into Pillow, which each release and retake the GIL,
cost more than their CPU.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

from bench import common

MODES = {
    "default": [],  # what the job picks (local_runner.choose_local_mode)
    "threads": ["--direct_running_mode=multi_threading", "--direct_num_workers=2"],
}
WITHOUT = common.REPO / "bench" / "without_statistics"


def run_once(variant: str, images: Path, out: Path, mode: str) -> float:
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
        *MODES[mode],
    ]
    env = common.bench_env()
    if variant == "without":
        env["PYTHONPATH"] = f"{WITHOUT}:{env['PYTHONPATH']}"
    return common.timed(command, cwd=common.REPO, env=env)


def run(work: Path, *, images: int, repeats: int, results_dir: Path = common.RESULTS) -> dict:
    folder = common.sample_images(work, images)
    count = sum(1 for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    seconds = {mode: {"with": [], "without": []} for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:
            for variant in ("without", "with"):  # alternating: drift on a shared machine is shared
                out = work / f"out-stats-{variant}"
                seconds[mode][variant].append(run_once(variant, folder, out, mode))
    summaries = {
        mode: {variant: common.summary(values) for variant, values in by_variant.items()}
        for mode, by_variant in seconds.items()
    }
    ratios = {mode: common.ratio(s["with"], s["without"]) for mode, s in summaries.items()}
    result = {
        "machine": common.machine(),
        "params": {"images": count, "repeats": repeats, "modes": MODES},
        "seconds": summaries,
        "images_per_second": {
            mode: {v: count / statistics.median(s) for v, s in by_variant.items()}
            for mode, by_variant in seconds.items()
        },
        "ratio_with_vs_without_seconds": ratios["default"],
        "ratio_with_vs_without_seconds_threads": ratios["threads"],
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
