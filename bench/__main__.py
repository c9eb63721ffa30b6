"""`make bench`: all six benchmarks side by side in one run, then the report.

    python -m bench [--images N] [--repeats R] [--only NAME ...] [--results DIR]

The defaults take about 25 minutes on 2 cores (10 of them the 40,000-image data statistics
run). `--smoke` runs each at a tiny size into a scratch folder (what the test suite does so
they cannot rot).
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
    training,
    warm_start,
)

NAMES = ("input_pipeline", "sharding", "training", "orchestration", "warm_start", "data_statistics")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    # Absolute: the DAG run it benchmarks refuses relative roots (the worker's cwd is not ours).
    parser.add_argument(
        "--work", type=lambda p: Path(p).resolve(), default=common.REPO / "bench" / ".work"
    )
    parser.add_argument("--results", type=Path, default=common.RESULTS)
    parser.add_argument("--images", type=int, default=3000, help="Dataset size (default 3000).")
    parser.add_argument("--repeats", type=int, default=2, help="Repeats per measurement.")
    parser.add_argument("--only", nargs="+", choices=NAMES, default=list(NAMES))
    parser.add_argument("--smoke", action="store_true", help="Tiny sizes: checks, not numbers.")
    args = parser.parse_args(argv)
    n, repeats = args.images, args.repeats
    sizes = [n // 10, n // 3, n]
    batches, steps, dag_images, epochs = 40, 25, n // 6, 2
    if args.smoke:
        n, repeats, sizes, batches, steps, dag_images, epochs = 128, 1, [8, 16, 24], 2, 3, 64, 1
    started = time.perf_counter()
    for name in args.only:
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
