"""How the sharding job's cost grows with the data (issue #28 point 1), beside the loop.

    python -m bench.sharding_scale [--sizes 4000,40000] [--classes thumbnails,photos]

For each image-size class (thumbnails of 48-96 px, photos of 300-600 px) and each count,
the job at its default (the runner mode it picks) and the one-process loop
(bench/python_loop_shard.py) on the same generated images, one after the other: wall
seconds, images/s, CPU seconds per image (user and sys, the job's worker processes
included), bytes handed to write() and bytes that reached the storage layer per byte of
output, the peak resident memory of the driver and of each worker process, and the
job's planning time (from its log). Images are generated once per class and count, in
parallel. 200,000 images are `--sizes 4000,40000,200000` (about an hour on 2 cores,
generation included, and 10 GB of photos): the README says which sizes its row used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import common

CLASSES = {"thumbnails": (48, 96), "photos": (300, 600)}

# Runs a command and reports, after it and every process it started have exited, this
# process's /proc/self/io: Linux adds a reaped child's I/O counters to its parent's, so
# these are the whole tree's.
_IO_WRAPPER = (
    "import subprocess, sys, json\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "io = dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())\n"
    "print('IO ' + json.dumps({k: int(v) for k, v in io.items()}), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _generate_part(args: tuple[str, int, int, int, int]) -> None:
    from beam_jobs import sample_data

    folder, per_class, part, low, high = args
    sample_data.generate(folder, per_class, seed=part, min_size=low, max_size=high)


def images(work: Path, size_class: str, count: int) -> Path:
    """`count` images of one size class (4 labels), made once, by every core at once."""
    from beam_jobs import sample_data

    folder = work / f"scale-{size_class}-{count}"
    if (folder / ".complete").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    low, high = CLASSES[size_class]
    parts = max(1, min(os.cpu_count() or 1, count // 400))
    per_class = count // len(sample_data.CLASSES) // parts
    staging = work / f".parts-{size_class}-{count}"
    jobs = [(str(staging / str(p)), per_class, p, low, high) for p in range(parts)]
    with ProcessPoolExecutor(parts) as pool:
        list(pool.map(_generate_part, jobs))
    for label in sample_data.CLASSES:
        (folder / label).mkdir(parents=True, exist_ok=True)
        for p in range(parts):
            for path in (staging / str(p) / label).iterdir():
                path.rename(folder / label / f"p{p}_{path.name}")
    shutil.rmtree(staging)
    (folder / ".complete").touch()
    return folder


def measured(command: list[str], env: dict) -> dict:
    """Wall, CPU (the process tree's), I/O and per-process peak memory of one command."""
    import psutil

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", _IO_WRAPPER, *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=common.REPO,
    )  # fmt: skip
    peaks: dict[int, tuple[str, int]] = {}  # pid -> (role, peak rss bytes)
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                tree = root.children(recursive=True)
            except psutil.Error:
                break
            for process in tree:
                try:
                    rss = process.memory_info().rss
                    role = "driver" if process.ppid() == proc.pid else "worker"
                except psutil.Error:
                    continue
                peaks[process.pid] = (role, max(rss, peaks.get(process.pid, ("", 0))[1]))
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{out[-2000:]}{err[-3000:]}")
    io = json.loads(re.search(r"^IO (.*)$", err, re.M).group(1))
    workers = sorted(rss for role, rss in peaks.values() if role == "worker")
    planning = re.search(r"planning took ([\d.]+) s", out + err)
    return {
        "wall_seconds": wall,
        "user_seconds": after.ru_utime - before.ru_utime,
        "sys_seconds": after.ru_stime - before.ru_stime,
        "write_call_bytes": io["wchar"],
        "storage_write_bytes": io["write_bytes"] - io["cancelled_write_bytes"],
        "driver_peak_bytes": max(
            (rss for role, rss in peaks.values() if role == "driver"), default=0
        ),
        "worker_peak_bytes": workers,
        "planning_seconds": float(planning.group(1)) if planning else None,
        "log_tail": out + err,
    }


def output_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.tfrecord*"))


def warm(folder: Path) -> None:
    """Read every image once: each variant then reads from the page cache, not the first
    one from disk (generating another set evicts this one)."""
    for path in folder.rglob("*"):
        if path.is_file():
            path.read_bytes()


def run_pair(folder: Path, count: int, out: Path, env: dict, all_modes: bool = False) -> dict:
    warm(folder)
    job_out, loop_out = out / "job", out / "loop.tfrecord"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    job = measured(
        [sys.executable, "-m", "beam_jobs.shard_images", "--input", str(folder),
         "--output", str(job_out), "--min-shards", "4"],
        env,
    )  # fmt: skip
    job["output_bytes"] = output_bytes(job_out)
    mode = re.search(r"sharding pipeline on \S+ \((\w+), (\d+)", job.pop("log_tail"))
    job["runner_mode"] = f"{mode.group(1)} x {mode.group(2)}" if mode else "?"
    loop = measured(
        [sys.executable, "-m", "bench.python_loop_shard", str(folder), str(loop_out)], env
    )
    loop.pop("log_tail")
    loop["output_bytes"] = loop_out.stat().st_size
    for result in (job, loop):
        result["images_per_second"] = count / result["wall_seconds"]
        result["cpu_ms_per_image"] = {
            "user": 1000 * result["user_seconds"] / count,
            "sys": 1000 * result["sys_seconds"] / count,
        }
        result["written_per_output_byte"] = {
            "write_calls": result["write_call_bytes"] / result["output_bytes"],
            "storage": result["storage_write_bytes"] / result["output_bytes"],
        }
    modes = {}
    for mode in MODES if all_modes else ():
        shutil.rmtree(job_out, ignore_errors=True)
        timed = measured(
            [sys.executable, "-m", "beam_jobs.shard_images", "--input", str(folder),
             "--output", str(job_out), "--min-shards", "4", *mode_flags(mode)],
            env,
        )  # fmt: skip
        modes[mode] = timed["wall_seconds"]
    shutil.rmtree(out, ignore_errors=True)
    cpu = lambda r: r["user_seconds"] + r["sys_seconds"]  # noqa: E731
    row = {
        "images": count,
        "job": job,
        "loop": loop,
        "ratio_job_vs_loop_speed": loop["wall_seconds"] / job["wall_seconds"],
        "ratio_job_vs_loop_cpu": cpu(job) / cpu(loop),
    }
    if modes:
        # The mode the default chose, timed beside the others (its own first run above is
        # the job-vs-loop figure).
        chosen = job["runner_mode"].split(" x ")[0]
        row["mode_seconds"] = modes
        row["ratio_default_vs_best_mode"] = modes.get(chosen, job["wall_seconds"]) / min(
            modes.values()
        )
    return row


MODES = ("in_memory", "multi_threading", "multi_processing")


def mode_flags(mode: str) -> list[str]:
    workers = 1 if mode == "in_memory" else os.cpu_count() or 1
    return [f"--direct_running_mode={mode}", f"--direct_num_workers={workers}"]


def run(
    work: Path,
    *,
    sizes: list[int],
    classes: list[str],
    all_modes: bool = False,
    results_dir: Path = common.RESULTS,
) -> dict:
    env = common.bench_env()
    rows = []
    for size_class in classes:
        for count in sizes:
            folder = images(work, size_class, count)
            row = run_pair(folder, count, work / "scale-out", env, all_modes)
            row["size_class"] = size_class
            rows.append(row)
            print(
                json.dumps(
                    {k: v for k, v in row.items() if k.startswith(("ratio", "images", "size"))}
                )
            )
    result = {
        "machine": common.machine(),
        "params": {"sizes": sizes, "classes": classes},
        "rows": rows,
    }
    for size_class in classes:
        mine = [r for r in rows if r["size_class"] == size_class]
        if len(mine) > 1:
            small, large = mine[0]["job"], mine[-1]["job"]
            result[f"ratio_driver_memory_{size_class}_largest_vs_smallest"] = (
                large["driver_peak_bytes"] / small["driver_peak_bytes"]
            )
    common.write_result("sharding_scale", result, results_dir)
    plot(result, results_dir / "sharding_scale.png")
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (times, memory) = plt.subplots(1, 2, figsize=(10, 4))
    for size_class in result["params"]["classes"]:
        rows = [r for r in result["rows"] if r["size_class"] == size_class]
        counts = [r["images"] for r in rows]
        for who, style in (("job", "-o"), ("loop", "--s")):
            times.plot(
                counts, [r[who]["wall_seconds"] for r in rows], style, label=f"{who}, {size_class}"
            )
        memory.plot(
            counts,
            [r["job"]["driver_peak_bytes"] / 2**20 for r in rows],
            "-o",
            label=f"driver, {size_class}",
        )
        memory.plot(
            counts, [max(r["job"]["worker_peak_bytes"] or [0]) / 2**20 for r in rows], ":^",
            label=f"largest worker, {size_class}",
        )  # fmt: skip
    for axes, label in ((times, "wall seconds"), (memory, "peak resident MB")):
        axes.set_xscale("log")
        axes.set_xlabel("images")
        axes.set_ylabel(label)
        axes.legend(fontsize=7)
    times.set_title("sharding: the job at its default vs the loop")
    memory.set_title("the job's peak memory")
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sharding_scale", description=__doc__)
    parser.add_argument("--work", type=Path, default=common.REPO / "bench" / ".work")
    parser.add_argument("--sizes", default="4000,40000")
    parser.add_argument("--classes", default="thumbnails,photos")
    parser.add_argument(
        "--all-modes",
        action="store_true",
        help="also time the job in each local runner mode (is the default's pick the best?)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=common.RESULTS,
        help="where sharding_scale.json and its plot go (a run at other sizes beside the table's)",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    classes = args.classes.split(",")
    unknown = set(classes) - set(CLASSES)
    if unknown:
        parser.error(f"--classes: unknown {sorted(unknown)}; known: {sorted(CLASSES)}")
    run(args.work, sizes=sizes, classes=classes, all_modes=args.all_modes, results_dir=args.results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
