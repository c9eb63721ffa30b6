"""`make bench`: all six benchmarks side by side in one run, then the report.

    python -m bench [--images N] [--repeats R] [--only NAME ...] [--results DIR]
                    [--scale 4000,40000]

The defaults take about 25 minutes on 2 cores (10 of them the 40,000-image data statistics
run). `--scale SIZES` adds how the sharding job's cost grows with the data
(bench/sharding_scale.py), on request: 25 minutes at 4,000 and 40,000 images. `--smoke`
runs each at a tiny size into a scratch folder (what the test suite does so they cannot
rot).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench import (
    common,
    data_statistics,
    input_pipeline,
    orchestration,
    report,
    sharding,
    sharding_scale,
    training,
    warm_start,
)

NAMES = ("input_pipeline", "sharding", "training", "orchestration", "warm_start", "data_statistics")
# On request only (`--only sharding_scale`, or `--scale`): tens of minutes.
SCALE = "sharding_scale"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    # Absolute: the DAG run it benchmarks refuses relative roots (the worker's cwd is not ours).
    parser.add_argument(
        "--work", type=lambda p: Path(p).resolve(), default=common.REPO / "bench" / ".work"
    )
    parser.add_argument("--results", type=Path, default=common.RESULTS)
    parser.add_argument("--images", type=int, default=3000, help="Dataset size (default 3000).")
    parser.add_argument("--repeats", type=int, default=2, help="Repeats per measurement.")
    parser.add_argument("--only", nargs="+", choices=(*NAMES, SCALE), default=list(NAMES))
    parser.add_argument(
        "--scale",
        default="",
        metavar="SIZES",
        help="Also the cost-growth part (bench/sharding_scale.py) at these image counts, "
        "e.g. 4000,40000 (about 25 minutes on 2 cores, generation included) or "
        "4000,40000,200000 (hours)",
    )
    parser.add_argument("--smoke", action="store_true", help="Tiny sizes: checks, not numbers.")
    args = parser.parse_args(argv)
    n, repeats = args.images, args.repeats
    sizes = [n // 10, n // 3, n]
    batches, steps, dag_images, epochs = input_pipeline.BATCHES, 25, n // 6, 2
    if args.smoke:
        n, repeats, sizes, batches, steps, dag_images, epochs = 128, 1, [8, 16, 24], 2, 3, 64, 1
    scale_sizes = [int(x) for x in args.scale.split(",") if x] or [4000, 40000]
    if args.smoke:
        scale_sizes = [32, 64]
    names = list(args.only) + ([SCALE] if args.scale and SCALE not in args.only else [])
    started = time.perf_counter()
    for name in names:
        print(f"== {name}", flush=True)
        if name == "input_pipeline":
            input_pipeline.run(
                args.work,
                images=n,
                repeats=repeats + 1,
                batches=batches,
                results_dir=args.results,
            )
        elif name == "sharding":
            sharding.run(args.work, sizes=sizes, repeats=repeats, results_dir=args.results)
        elif name == "training":
            training.run(
                args.work,
                images=n,
                repeats=repeats,
                steps=steps,
                # The smoke set's train split must hold one batch of the large-batch runs.
                batch_per_worker=8 if args.smoke else 32,
                results_dir=args.results,
            )
        elif name == "data_statistics":
            # Issue #27's size: 40,000 images, where the per-image cost dominates.
            data_statistics.run(
                args.work,
                images=64 if args.smoke else 40_000,
                repeats=repeats,
                results_dir=args.results,
            )
        elif name == SCALE:
            sharding_scale.run(
                args.work,
                sizes=scale_sizes,
                classes=["thumbnails"] if args.smoke else list(sharding_scale.CLASSES),
                all_modes=not args.smoke,
                results_dir=args.results,
            )
        elif name == "warm_start":
            # The demo's recipe: 1,000 images, 30 epochs (smoke: a tiny set, 3 epochs).
            warm_start.run(
                args.work,
                images=64 if args.smoke else n // 3,
                epochs=3 if args.smoke else 30,
                results_dir=args.results,
            )
        else:
            orchestration.run(
                args.work,
                images=dag_images,
                repeats=1 if args.smoke else repeats,
                epochs=epochs,
                results_dir=args.results,
            )
    print(f"benchmarks took {time.perf_counter() - started:.0f}s", flush=True)
    readme = (
        None
        if args.smoke or args.results != common.RESULTS
        else common.REPO / "docs" / "benchmarks.md"
    )
    report.report(args.results, readme=readme)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
