"""Training speed: 1 vs 2 workers with a core each, and the share of time lost to input.

Every run is the real `python -m training.launch` on the shards, the default
model, a per-worker batch held fixed (so 2 workers do twice the images per
step), each worker pinned to its own core (`--pin-cores`, as `taskset -c i`):
what 2 workers cost beyond 1 is then the collectives, not two processes
fighting over the same cores. Speed is the last epoch's images/s from
the run's metrics (the first epoch pays for tracing). Input-boundness compares
the real pipeline with `--synthetic-input` (one in-memory batch repeated).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import common
from runspec.record import RunRecord
from training.shards import ShardSet


@dataclass(frozen=True)
class Run:
    workers: int
    synthetic: bool = False  # --synthetic-input: one in-memory batch repeated
    batch_multiple: int = 1  # per-replica batch x this, over as many times fewer steps
    input_service: bool = False  # the input on tf.data service workers on the next cores
    service_workers: int = 1
    batch_norm: str = ""  # --batch-norm; "" for the trainer's default
    # The trainer's default --cache auto (these shards fit), with epochs of one pass over
    # the split, so the timed second epoch reads decoded images from memory.
    cached: bool = False


RUNS = {
    "1_worker": Run(1),
    "2_workers": Run(2),
    "1_worker_synthetic": Run(1, synthetic=True),
    "2_workers_synthetic": Run(2, synthetic=True),
    # The same pair at a 4x larger per-replica batch (over a quarter of the steps, so the
    # same images): more compute per all-reduce, as a bigger model or batch on a cluster.
    "1_worker_large_batch": Run(1, batch_multiple=4),
    "2_workers_large_batch": Run(2, batch_multiple=4),
    # One trainer on core 0, its input on one tf.data service worker on core 1.
    "1_worker_input_service": Run(1, input_service=True),
    # 2 workers with BatchNorm over the global batch (the default before local statistics):
    # two all-reduces per layer per step on top of the gradients'.
    "2_workers_sync_batch_norm": Run(2, batch_norm="sync"),
    "1_worker_cached": Run(1, cached=True),
}


def train_once(shards: Path, out: Path, run: Run, *, steps: int, batch_per_worker: int) -> float:
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable, "-m", "training.launch", "--num-workers", str(run.workers), "--pin-cores",
        "--data", str(shards), "--output", str(out), "--epochs", "2",
        "--steps-per-epoch", str(steps), "--checkpoint-every", str(10 * steps),
        "--per-replica-batch-size", str(batch_per_worker),
    ]  # fmt: skip
    if not run.cached:
        # No cache: every step pays for decoding, as in the runs this table started from
        # (the trainer's default, --cache auto, would cache these small shards in memory).
        command.append("--cache=")
    if run.synthetic:
        command.append("--synthetic-input")
    if run.batch_norm:
        command.append(f"--batch-norm={run.batch_norm}")
    if run.input_service:  # the launcher pins the service to the core after the trainers'
        command.append(f"--input-service=local:{run.service_workers}")
    common.timed(command, cwd=common.REPO, env=common.bench_env())
    return RunRecord.read(str(out)).final_metrics["images_per_second"]


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
    # One epoch of a cached run is one pass over the training split (per worker).
    pass_steps = -(-ShardSet.open(str(shards)).num_records("train") // batch_per_worker)

    def measure(run: Run) -> float:
        return train_once(
            shards,
            work / "train-run",
            run,
            steps=pass_steps if run.cached else max(1, steps // run.batch_multiple),
            batch_per_worker=batch_per_worker * run.batch_multiple,
        )

    runs = dict(RUNS)
    if len(common.machine_cores()) >= 3:  # a core for the trainer and one per service worker
        runs["1_worker_input_service_2"] = Run(1, input_service=True, service_workers=2)
    rates = {name: common.repeat(lambda r=run: measure(r), repeats) for name, run in runs.items()}
    steps_per_second = {
        name: rates[name]["median"] / (batch_per_worker * run.batch_multiple * run.workers)
        for name, run in runs.items()
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
            "cached_run_steps_per_epoch": pass_steps,
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
        # What any input placement can reach: the trainer on free input (synthetic) against
        # decoding on its own core; and how much of that the service delivers.
        "ratio_synthetic_vs_in_process": common.ratio(
            rates["1_worker_synthetic"], rates["1_worker"]
        ),
        "ratio_input_service_vs_synthetic": common.ratio(
            rates["1_worker_input_service"], rates["1_worker_synthetic"]
        ),
        **(
            {
                "ratio_input_service_2_workers_vs_in_process": common.ratio(
                    rates["1_worker_input_service_2"], rates["1_worker"]
                )
            }
            if "1_worker_input_service_2" in rates
            else {}
        ),
        "ratio_2_vs_1_workers_large_batch": common.ratio(
            rates["2_workers_large_batch"], rates["1_worker_large_batch"]
        ),
        "ratio_real_vs_synthetic_input": real_vs_synthetic,
        # The same with the trainer's default cache: decoding happens in the first epoch only.
        "ratio_cached_vs_synthetic_input": common.ratio(
            rates["1_worker_cached"], rates["1_worker_synthetic"]
        ),
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
