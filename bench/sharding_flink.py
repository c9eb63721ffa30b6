"""The sharding job on a 2-TaskManager Flink cluster against the local runner (issue #30).

    python -m bench.sharding_flink [--sizes 4000,40000] [--repeats 1]

Starts the cluster with scripts/clusters.sh (JobManager, two TaskManagers, an SDK worker
pool; parallelism 2), generates thumbnails once per count (bench.sharding_scale's images),
and times the job at its local default and on Flink alternately on the same images, wall
seconds each. On a 2-core machine the cluster's cores are the local runner's cores, so the
ratio measures the engine's overhead (job server start, plan translation, JVM <-> Python
data exchange), not a speed-up: a real cluster adds machines.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import common
from bench.sharding_scale import images, warm

CLUSTERS = str(common.REPO / "scripts" / "clusters.sh")


def run(work: Path, sizes: list[int], repeats: int, results_dir: Path = common.RESULTS) -> dict:
    cluster = Path(tempfile.mkdtemp(prefix="flink-bench-"))
    started = subprocess.run(
        [CLUSTERS, "flink", "start", str(cluster)], capture_output=True, text=True, check=True
    )
    options = started.stdout.split()
    rows = []
    try:
        for count in sizes:
            folder = images(work, "thumbnails", count)
            warm(folder)
            out = work / "flink-bench-out"
            times: dict[str, list[float]] = {"local": [], "flink": []}
            for _ in range(repeats):
                for name, extra in (("local", []), ("flink", options)):
                    shutil.rmtree(out, ignore_errors=True)
                    times[name].append(
                        common.timed([sys.executable, "-m", "beam_jobs.shard_images", "--input",
                                      str(folder), "--output", str(out), *extra],
                                     cwd=common.REPO)
                    )  # fmt: skip
                    print(f"{count} images, {name}: {times[name][-1]:.1f} s", flush=True)
            shutil.rmtree(out, ignore_errors=True)
            local, flink = common.summary(times["local"]), common.summary(times["flink"])
            rows.append(
                {
                    "images": count,
                    "local_seconds": local,
                    "flink_seconds": flink,
                    "ratio_flink_vs_local_seconds": common.ratio(flink, local),
                }
            )
    finally:
        subprocess.run([CLUSTERS, "flink", "stop", str(cluster)], check=False)
        shutil.rmtree(cluster, ignore_errors=True)
    result = {
        "benchmark": "sharding_flink",
        "machine": common.machine(),
        "cluster": "Flink 1.19.3, 1 JobManager + 2 TaskManagers (1 slot each), parallelism 2, "
        "EXTERNAL SDK workers, Beam 2.62.0 job server (scripts/clusters.sh)",
        "repeats": repeats,
        "rows": rows,
        "ratio_flink_vs_local_seconds": rows[-1]["ratio_flink_vs_local_seconds"],
    }
    common.write_result("sharding_flink", result, results_dir)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sharding_flink", description=__doc__)
    parser.add_argument("--work", type=Path, default=common.REPO / "bench" / ".work")
    parser.add_argument("--sizes", default="4000,40000")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    result = run(args.work, [int(s) for s in args.sizes.split(",")], args.repeats)
    for row in result["rows"]:
        print(
            f"{row['images']} images: local {row['local_seconds']['median']:.1f} s, "
            f"Flink {row['flink_seconds']['median']:.1f} s, "
            f"ratio {row['ratio_flink_vs_local_seconds']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
