"""Orchestration overhead: the whole DAG run's wall time vs the sum of its tasks' own times,
what a second run with unchanged inputs costs (the shard cache reuses the first's shards),
and a third with `reuse_training` on (the finished training of the same shards and recipe
is reused too: what is left is evaluation, publishing and Airflow).

`airflow dags test` (SQLite, as in `make demo`) runs `image_model_pipeline`
once on a sample dataset; each task's own time is its start-to-end in the
metadata database. The tasks run one after another, so what the run takes
beyond their sum is Airflow's: parsing, scheduling, starting task processes,
recording state. Two walls: the `airflow dags test` process (its imports and
parsing the DAG file included, which a running Airflow does not repeat per run)
and the run as Airflow records it (its start to its end: what the run's page
shows as its duration, for a scheduled run too).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

from bench import common
from orchestration.runs import RunPaths

DAG = "image_model_pipeline"


def _seconds(start: str, end: str) -> float:
    return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()


def run_once(work: Path, images: Path, epochs: int) -> dict:
    home = work / "airflow-home"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(work / "dag-out", ignore_errors=True)
    bin_dir = Path(sys.executable).parent
    env = common.bench_env(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(common.REPO / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        IMAGEPIPE_SCHEDULE="",
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    common.timed([str(bin_dir / "airflow"), "db", "migrate"], env=env, cwd=common.REPO)
    conf = {
        "input_uri": str(images),
        "output_root": str(work / "dag-out" / "pipeline"),
        "model_root": str(work / "dag-out" / "models"),
        "epochs": epochs,
        "num_workers": 2,
        # The global batch of 32 this row was first measured at (and small enough for the
        # smoke run's 64 images).
        "per_replica_batch_size": 16,
        "accuracy_gate": 0.0,  # measuring time, not quality: no gate, no blessing
        "max_regression": 1.0,
        "max_class_regression": 1.0,
    }
    command = [str(bin_dir / "airflow"), "dags", "test", DAG, "-c", json.dumps(conf)]
    first = _dag_run(command, env, home)
    # The same inputs and parameters again: the sharding stage finds its output in the
    # shard cache (by content fingerprint) and reuses it instead of sharding again.
    second = _dag_run(command, env, home, seen={first["run_id"]})
    shards = RunPaths.for_run(conf["output_root"], second["run_id"]).shards
    if "location" not in json.loads((Path(shards) / "metadata.json").read_text()):
        raise RuntimeError(f"the second run did not reuse the first run's shards: {shards}")
    # And with reuse_training: the second run's finished training is taken as it is.
    command[-1] = json.dumps({**conf, "reuse_training": True})
    third = _dag_run(command, env, home, seen={first["run_id"], second["run_id"]})
    paths = RunPaths.for_run(conf["output_root"], third["run_id"])
    if (Path(paths.train) / "model").exists():
        raise RuntimeError(f"the run with reuse_training trained again: {paths.train}")
    return {**first, "second_run": second, "reuse_run": third}


def _dag_run(command: list[str], env: dict, home: Path, seen: frozenset | set = frozenset()):
    started = time.perf_counter()
    common.timed(command, env=env, cwd=common.REPO)
    wall = time.perf_counter() - started
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute(
            "SELECT run_id, task_id, start_date, end_date, state FROM task_instance "
            "WHERE dag_id = ?",
            (DAG,),
        ).fetchall()
        runs = db.execute(
            "SELECT run_id, start_date, end_date FROM dag_run WHERE dag_id = ?", (DAG,)
        ).fetchall()
    rows = [row for row in rows if row[0] not in seen]
    recorded = [_seconds(start, end) for run_id, start, end in runs if run_id not in seen]
    tasks = {
        task: _seconds(start, end) for _, task, start, end, state in rows if state == "success"
    }
    if len(tasks) != len(rows) or not tasks or len(recorded) != 1:
        raise RuntimeError(f"the DAG run did not succeed: {rows}")
    # Where the time between tasks goes: each gap from one task's end to the next one's
    # start (the scheduler noticing, a task process starting, its SDK handshake).
    spans = sorted((start, end) for _, _, start, end, _ in rows)
    gaps = [
        max(0.0, _seconds(a_end, b_start)) for (_, a_end), (b_start, _) in itertools.pairwise(spans)
    ]
    return {
        "run_id": rows[0][0],
        "wall_seconds": wall,
        "run_seconds": recorded[0],
        "task_seconds": tasks,
        "sum_task_seconds": sum(tasks.values()),
        "between_tasks_seconds": sum(gaps),
        "before_first_and_after_last_seconds": wall - _seconds(spans[0][0], spans[-1][1]),
    }


def run(
    work: Path, *, images: int, repeats: int, epochs: int, results_dir: Path = common.RESULTS
) -> dict:
    raw = common.sample_images(work, images)
    runs = [run_once(work, raw, epochs) for _ in range(repeats)]
    wall = common.summary([r["wall_seconds"] for r in runs])
    recorded = common.summary([r["run_seconds"] for r in runs])
    stages = common.summary([r["sum_task_seconds"] for r in runs])
    second_wall = common.summary([r["second_run"]["wall_seconds"] for r in runs])
    reuse_wall = common.summary([r["reuse_run"]["wall_seconds"] for r in runs])
    reuse_recorded = common.summary([r["reuse_run"]["run_seconds"] for r in runs])
    result = {
        "machine": common.machine(),
        "params": {"images": images, "epochs": epochs, "num_workers": 2, "repeats": repeats},
        "wall_seconds": wall,
        "sum_task_seconds": stages,
        "task_seconds": {
            task: common.summary([r["task_seconds"][task] for r in runs])
            for task in runs[0]["task_seconds"]
        },
        "overhead_seconds": wall["median"] - stages["median"],
        # The overhead split: between tasks (scheduling, task start) and around the run
        # (the `airflow dags test` process: its imports, parsing the DAG, creating the run).
        "between_tasks_seconds": common.summary([r["between_tasks_seconds"] for r in runs]),
        "around_the_run_seconds": common.summary(
            [r["before_first_and_after_last_seconds"] for r in runs]
        ),
        "ratio_wall_vs_stages": common.ratio(wall, stages),
        # The run as Airflow records it: without the CLI process's start and parsing.
        "run_seconds": recorded,
        "ratio_run_vs_stages": common.ratio(recorded, stages),
        # A second run with unchanged inputs reuses the shards (content fingerprint).
        "second_run_wall_seconds": second_wall,
        "second_run_shard_seconds": common.summary(
            [r["second_run"]["task_seconds"]["shard_images"] for r in runs]
        ),
        "ratio_second_vs_first_run": common.ratio(second_wall, wall),
        "reuse_run_wall_seconds": reuse_wall,
        "reuse_run_task_seconds": {
            task: common.summary([r["reuse_run"]["task_seconds"][task] for r in runs])
            for task in runs[0]["reuse_run"]["task_seconds"]
        },
        "ratio_reuse_vs_first_run": common.ratio(reuse_wall, wall),
        "reuse_run_seconds": reuse_recorded,
        "ratio_reuse_vs_first_run_recorded": common.ratio(reuse_recorded, recorded),
    }
    common.write_result("orchestration", result, results_dir)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.orchestration", description=__doc__)
    parser.add_argument("--work", type=Path, default=common.REPO / "bench" / ".work")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    result = run(args.work, images=args.images, repeats=args.repeats, epochs=args.epochs)
    print({k: round(v, 3) for k, v in result.items() if "ratio" in k or "overhead" in k})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
