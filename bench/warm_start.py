"""Warm start: the next scheduled run over a folder that grew by 10 %.

A first run trains from scratch for the full recipe (`epochs`); the folder then grows by
10 % new images (the sample generator's class streams continue: the first images are
the same files) and three second runs train on it: from the first run's model for a
third of the epochs (`--init-from`), and from scratch for a third and for all of them.
All are scored on the grown data's held-out split, which holds no image the first run
trained on (splits are a hash of the image's key). Measured: the warm run's accuracy
against the cold full run's, and what the same third of the epochs gives from scratch.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from beam_jobs import sample_data
from bench import common


def _images(work: Path, per_class: int) -> Path:
    folder = work / f"warm-images-{per_class}"
    if not (folder / ".complete").exists():
        sample_data.generate(str(folder), per_class, seed=7)
        (folder / ".complete").touch()
    return folder


def _train(shards: Path, out: Path, epochs: int, *init: str) -> float:
    command = [
        sys.executable, "-m", "training.launch", "--num-workers", "1", "--data", str(shards),
        "--output", str(out), "--epochs", str(epochs), *init,
    ]  # fmt: skip
    return common.timed(command, cwd=common.REPO, env=common.bench_env())


def run(work: Path, *, images: int, epochs: int, results_dir: Path) -> dict:
    from training.evaluate import evaluate_saved_model

    work = work / "warm_start"
    shutil.rmtree(work / "runs", ignore_errors=True)  # the trainings, not the data
    per_class = max(8, images // len(sample_data.CLASSES))
    first = _images(work, per_class)
    grown = _images(work, per_class + per_class // 10)
    shards = {}
    for name, folder in (("first", first), ("grown", grown)):
        shards[name] = work / f"shards-{folder.name}"
        if not (shards[name] / "_SUCCESS").exists():
            common.shard(folder, shards[name], min_shards=2)
    short = max(1, epochs // 3)
    runs = work / "runs"
    seconds = {"cold_first": _train(shards["first"], runs / "cold_first", epochs)}
    served = str(runs / "cold_first" / "model")
    plan = {
        "warm": (short, "--init-from", served),
        "cold_short": (short,),
        "cold_full": (epochs,),
    }
    for name, (count, *init) in plan.items():
        seconds[name] = _train(shards["grown"], runs / name, count, *init)
    accuracy = {
        name: evaluate_saved_model(str(runs / name / "model"), str(shards["grown"]))["accuracy"]
        for name in ("cold_first", *plan)
    }
    result = {
        "machine": common.machine(),
        "params": {
            "images_first": per_class * len(sample_data.CLASSES),
            "images_grown": (per_class + per_class // 10) * len(sample_data.CLASSES),
            "epochs": epochs,
            "warm_epochs": short,
        },
        "accuracy": accuracy,
        "train_seconds": seconds,
        "ratio_warm_vs_cold_accuracy": accuracy["warm"] / accuracy["cold_full"],
        "ratio_warm_vs_cold_seconds": seconds["warm"] / seconds["cold_full"],
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    common.write_result("warm_start", result, results_dir)
    print(
        f"warm start: {short} epochs from the served model {accuracy['warm']:.3f} vs "
        f"{epochs} cold {accuracy['cold_full']:.3f} ({short} cold: {accuracy['cold_short']:.3f})",
        flush=True,
    )
    return result
