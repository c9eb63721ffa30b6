"""Training speed: 1 vs 2 workers with a core each, and the share of time lost to input.

Every run is the real `python -m training.launch` on the shards, the default
model, a per-worker batch held fixed (so 2 workers do twice the images per
step), each worker pinned to its own core (`--pin-cores`, as `taskset -c i`):
what 2 workers cost beyond 1 is then the collectives, not two processes
fighting over the same cores. Speed is the last epoch's images/s from
`metrics.json` (the first epoch pays for tracing). Input-boundness compares
the real pipeline with `--synthetic-input` (one in-memory batch repeated).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from bench import common

RUNS = {  # name: (workers, synthetic input, per-replica batch multiple, tf.data service,
    #          --batch-norm, "" for the trainer's default)
    "1_worker": (1, False, 1, False, ""),
    "2_workers": (2, False, 1, False, ""),
    "1_worker_synthetic": (1, True, 1, False, ""),
    "2_workers_synthetic": (2, True, 1, False, ""),
    # The same pair at a 4x larger per-replica batch (over a quarter of the steps, so the
    # same images): more compute per all-reduce, as a bigger model or batch on a cluster.
    "1_worker_large_batch": (1, False, 4, False, ""),
    "2_workers_large_batch": (2, False, 4, False, ""),
    # One trainer on core 0, its input on one tf.data service worker on core 1.
    "1_worker_input_service": (1, False, 1, True, ""),
    # 2 workers with BatchNorm over the global batch (the default before local statistics):
    # two all-reduces per layer per step on top of the gradients'.
    "2_workers_sync_batch_norm": (2, False, 1, False, "sync"),
}


def train_once(
    shards: Path,
    out: Path,
    *,
    workers: int,
    synthetic: bool,
    steps: int,
    batch_per_worker: int,
    input_service: bool = False,
    batch_norm: str = "",
) -> float:
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable, "-m", "training.launch", "--num-workers", str(workers), "--pin-cores",
        "--data", str(shards), "--output", str(out), "--epochs", "2",
        "--steps-per-epoch", str(steps), "--checkpoint-every", str(10 * steps),
        "--per-replica-batch-size", str(batch_per_worker),
        # No cache: every step pays for decoding, as in the runs this table started from
        # (the trainer's default, --cache auto, would cache these small shards in memory).
        "--cache=",
    ]  # fmt: skip
    if synthetic:
        command.append("--synthetic-input")
    if batch_norm:
        command.append(f"--batch-norm={batch_norm}")
    if input_service:  # the launcher pins the service to the core after the trainers'
        command.append("--input-service=local:1")
    common.timed(command, cwd=common.REPO, env=common.bench_env())
    metrics = json.loads((out / "metrics.json").read_text())
    return metrics["epochs"][-1]["images_per_second"]


def run(
    work: Path,
    *,
    images: int,
    repeats: int,
    steps: int,
    batch_per_worker: int = 32,
    results_dir: Path = common.RESULTS,
) -> dict:
    if len(common.machine_cores()) < 2:
        raise SystemExit("the training benchmark needs 2 cores (one per pinned worker)")
    shards = common.sharded(work, common.sample_images(work, images))
    rates = {
        name: common.repeat(
            lambda w=workers, s=synthetic, m=multiple, i=service, b=batch_norm: train_once(
                shards,
                work / "train-run",
                workers=w,
                synthetic=s,
                steps=max(1, steps // m),
                batch_per_worker=batch_per_worker * m,
                input_service=i,
                batch_norm=b,
            ),
            repeats,
        )
        for name, (workers, synthetic, multiple, service, batch_norm) in RUNS.items()
    }
    steps_per_second = {
        name: rates[name]["median"] / (batch_per_worker * multiple * workers)
        for name, (workers, _, multiple, _, _) in RUNS.items()
    }
    real_vs_synthetic = common.ratio(rates["1_worker"], rates["1_worker_synthetic"])
    result = {
        "machine": common.machine(),
        "params": {
            "architecture": "small_cnn",
            "batch_norm": "local (the default) unless the run's name says otherwise",
            "image_size": 64,
            "batch_per_worker": batch_per_worker,
            "steps_per_epoch": steps,
            "repeats": repeats,
            "pinned": "worker i on core i",
        },
        "images_per_second": rates,
        "steps_per_second": steps_per_second,
        # 2 pinned workers vs 1: 2.0 would be perfect scaling; below it is the collectives.
        "ratio_2_vs_1_workers": common.ratio(rates["2_workers"], rates["1_worker"]),
        "ratio_2_vs_1_workers_sync_batch_norm": common.ratio(
            rates["2_workers_sync_batch_norm"], rates["1_worker"]
        ),
        "large_batch_per_worker": 4 * batch_per_worker,
        # 1 trainer: input on a tf.data service worker on the other core vs on its own core.
        "ratio_input_service_vs_in_process": common.ratio(
            rates["1_worker_input_service"], rates["1_worker"]
        ),
        "ratio_2_vs_1_workers_large_batch": common.ratio(
            rates["2_workers_large_batch"], rates["1_worker_large_batch"]
        ),
        "ratio_real_vs_synthetic_input": real_vs_synthetic,
        "input_bound_share": 1.0 - real_vs_synthetic,
        "step_time_breakdown_ms": step_breakdown(steps_per_second),
    }
    common.write_result("training", result, results_dir)
    return result


def step_breakdown(steps_per_second: dict) -> dict:
    """Milliseconds of one step, split by what the runs differ in: compute (1 worker,
    synthetic input), collectives (what a second worker adds on synthetic input) and
    input wait (real minus synthetic input at the same worker count)."""
    ms = {name: 1000.0 / rate for name, rate in steps_per_second.items()}
    compute = ms["1_worker_synthetic"]
    return {
        "1_worker": {
            "step": ms["1_worker"],
            "compute": compute,
            "all_reduce": 0.0,
            "input_wait": ms["1_worker"] - compute,
        },
        "2_workers": {
            "step": ms["2_workers"],
            "compute": compute,
            "all_reduce": ms["2_workers_synthetic"] - compute,
            "input_wait": ms["2_workers"] - ms["2_workers_synthetic"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.training", description=__doc__)
    parser.add_argument("--work", type=Path, default=common.REPO / "bench" / ".work")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40, help="Steps per epoch (2 epochs).")
    args = parser.parse_args(argv)
    result = run(args.work, images=args.images, repeats=args.repeats, steps=args.steps)
    print({k: round(v, 3) for k, v in result.items() if "ratio" in k or "share" in k})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
