"""How the sharding job grows with worker processes on a machine with cores to spare.

    python -m bench.sharding_scaling [--images 12000] [--workers 1,2,4,8]

`make bench` measures the job on 2 cores, where Beam's local runner process
(which relays its workers' control and data traffic) and the workers share
those 2 cores, so a second worker process gains little. This runs the same
job, through its CLI as `make bench` does, with 1, 2, 4, ... worker processes
and with the runner's own choice (`beam_jobs/local_runner.py`), on one input
generated once, next to the machine's ceiling for the same work: the
validation alone (`prepare_image` on every file, no Beam, no writing) on a pool
of as many processes, started before the clock runs. Its one-process figure is
the loop to beat: the work of the one-process Python loop of `make bench`
without its TensorFlow import or its writing (TensorFlow may be missing where
this runs), so a stricter baseline than that loop. Needs no TensorFlow.
Prints one JSON object and writes it to bench/results/sharding_scaling.json.

Where Beam is missing too (a borrowed accelerator machine with 16 cores and no
network), carry its wheels: `pip download --no-deps --only-binary=:all:` of
apache-beam and the requirements that machine lacks (beartype, fastavro,
fasteners, httplib2, jsonpickle, objsize, proto-plus, pymongo, pytz, zstandard,
google-crc32c, protobuf: 36 MB for Python 3.12), `pip install --no-deps
--target DIR` there and put DIR on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from beam_jobs.local_runner import available_cores, choose_local_mode
from bench import common
from bench.sharding import image_files, validation_seconds


def _generate_part(args: tuple[str, int, int]) -> str:
    from beam_jobs import sample_data

    folder, per_class, seed = args
    sample_data.generate(
        folder, per_class, seed=seed, min_size=common.MIN_SIDE, max_size=common.MAX_SIDE
    )
    return folder


def sample_images_parallel(work: Path, images: int, processes: int) -> Path:
    """`images` sample images (4 classes) drawn by `processes` processes, one seed each:
    the same kind of images as `make bench`'s, generated in seconds on many cores."""
    from beam_jobs import sample_data

    per_part = max(1, images // (processes * len(sample_data.CLASSES)))
    folder = work / f"images-{per_part * processes * len(sample_data.CLASSES)}-p{processes}"
    done = folder / ".complete"
    if done.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    parts = [(str(work / f"part-{seed}"), per_part, seed) for seed in range(processes)]
    with ProcessPoolExecutor(processes) as pool:
        written = list(pool.map(_generate_part, parts))
    for seed, part in enumerate(written):  # one folder per class, as the job expects
        for label in sample_data.CLASSES:
            (folder / label).mkdir(parents=True, exist_ok=True)
            for name in os.listdir(os.path.join(part, label)):
                os.rename(os.path.join(part, label, name), folder / label / f"{seed}-{name}")
        shutil.rmtree(part)
    done.touch()
    return folder


def run(work: Path, *, images: int, workers: list[int], repeats: int) -> dict:
    cores = available_cores()
    source = sample_images_parallel(work, images, max(1, min(cores, 16)))
    count = len(image_files(source))
    out = work / "scaling-out"
    seconds = {}
    for _ in range(repeats):  # alternated, so drift hits every variant alike
        for n in workers:
            seconds.setdefault(f"beam_{n}_workers", []).append(common.shard(source, out, workers=n))
        seconds.setdefault("beam_default", []).append(common.shard(source, out))
        seconds.setdefault("beam_in_process", []).append(
            common.shard(source, out, flags=["--direct_running_mode=in_memory"])
        )
    shutil.rmtree(out, ignore_errors=True)
    validation = {n: validation_seconds(source, n) for n in workers}
    medians = {name: common.summary(values)["median"] for name, values in seconds.items()}
    loop = validation[1] if 1 in validation else validation_seconds(source, 1)
    default = choose_local_mode(count, cores)
    return {
        "machine": common.machine(),
        "params": {"images": count, "workers": workers, "repeats": repeats},
        "default_mode": {"running_mode": default.running_mode, "workers": default.workers},
        "seconds": {name: common.summary(values) for name, values in seconds.items()},
        "images_per_second": {name: count / s for name, s in medians.items()},
        "validation_seconds": {str(n): s for n, s in validation.items()},
        "ratio_vs_1_worker": {
            str(n): medians["beam_1_workers"] / medians[f"beam_{n}_workers"] for n in workers
        }
        if 1 in workers
        else {},
        "validation_ratio_vs_1_process": {str(n): loop / s for n, s in validation.items()},
        # The job (all of it: listing, splits, dead letters, shards, metadata) vs the
        # validation alone in one process, i.e. less work than the bench's Python loop.
        "ratio_vs_validation_loop": {name: loop / s for name, s in medians.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sharding_scaling", description=__doc__)
    parser.add_argument("--work", type=Path, default=common.REPO / "bench" / ".work")
    parser.add_argument("--images", type=int, default=12000)
    parser.add_argument("--workers", default="", help="Comma-separated; default 1, 2, 4, ...")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--results", type=Path, default=common.RESULTS)
    args = parser.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",") if w] or [
        n for n in (1, 2, 4, 8, 16) if n <= max(2, available_cores() // 2)
    ]
    result = run(args.work, images=args.images, workers=workers, repeats=args.repeats)
    common.write_result("sharding_scaling", result, args.results)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
