"""What every benchmark shares: the data it runs on, repeats, the machine, the result file."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
# Realistic photos for a small model: a few hundred pixels a side, tens of KB each.
MIN_SIDE, MAX_SIDE = 200, 400


def machine_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def machine() -> dict:
    """Where the numbers came from: they mean little without it."""
    cpu_model = platform.processor()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu_model = next(
                line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    try:
        import tensorflow as tf
    except ImportError:  # the sharding benchmarks run without it (bench/sharding_scaling.py)
        tf = None
    return {
        "cores": len(machine_cores()),
        "cpu_model": cpu_model,
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")] if tf else [],
        "python": platform.python_version(),
        "tensorflow": tf.__version__ if tf else None,
        "platform": platform.platform(),
    }


def summary(values: list[float]) -> dict:
    """Median and spread ((max - min) / median) of repeated measurements."""
    median = statistics.median(values)
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "spread": (max(values) - min(values)) / median if median else 0.0,
        "values": values,
    }


def repeat(measure: Callable[[], float], repeats: int) -> dict:
    return summary([measure() for _ in range(repeats)])


def alternated(measures: dict[str, Callable[[], float]], repeats: int) -> dict[str, dict]:
    """Every measure once per round, in turn, for `repeats` rounds: a machine that slows
    midway slows each alike, and each round's ratio compares neighbours in time."""
    values: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(repeats):
        for name, measure in measures.items():
            values[name].append(measure())
    return {name: summary(found) for name, found in values.items()}


def round_ratios(numerator: dict, denominator: dict) -> dict:
    """Ratios of two `alternated` measures round by round: the worst, the best, all."""
    each = [a / b for a, b in zip(numerator["values"], denominator["values"], strict=True)]
    return {"min": min(each), "max": max(each), "values": each}


def ratio(numerator: dict, denominator: dict) -> float:
    return numerator["median"] / denominator["median"]


def timed(command: list[str], **kwargs) -> float:
    """Wall seconds of a command, which must succeed."""
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, **kwargs)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        )
    return seconds


def sample_images(work: Path, images: int, seed: int = 0) -> Path:
    """A sample dataset of about `images` images (4 classes), generated once per size."""
    from beam_jobs import sample_data

    per_class = max(1, images // len(sample_data.CLASSES))
    folder = work / f"images-{per_class * len(sample_data.CLASSES)}-s{seed}"
    done = folder / ".complete"
    if not done.exists():
        sample_data.generate(
            str(folder), per_class, seed=seed, min_size=MIN_SIDE, max_size=MAX_SIDE
        )
        done.touch()
    return folder


def shard(
    images: Path,
    output: Path,
    *,
    workers: int = 0,
    min_shards: int = 4,
    max_side: int = 0,
    flags: tuple[str, ...] | list[str] = (),
) -> float:
    """Run the sharding job as a user would (its CLI, local runner); return its wall seconds."""
    command = [
        sys.executable,
        "-m",
        "beam_jobs.shard_images",
        "--input",
        str(images),
        "--output",
        str(output),
        "--min-shards",
        str(min_shards),
        "--max-side",
        str(max_side),
        *flags,
    ]
    if workers:
        command += ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
    return timed(command, cwd=REPO, env=bench_env())


def sharded(work: Path, images: Path, max_side: int = 0) -> Path:
    output = work / f"shards-{images.name}-m{max_side}"
    if not (output / "_SUCCESS").exists():
        shard(images, output, max_side=max_side)
    return output


def bench_env(**extra: str) -> dict:
    return {
        **os.environ,
        # The repo first; what the caller had after it (packages installed to a folder).
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        **extra,
    }


def write_result(name: str, result: dict, results_dir: Path = RESULTS) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps({"benchmark": name, **result}, indent=2) + "\n")
    temporary.replace(path)
    print(f"wrote {path}", flush=True)
    return path
