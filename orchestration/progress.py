"""Show a DAG run's tasks as they start and end, from Airflow's metadata database.

    python -m orchestration.progress --db AIRFLOW_HOME/airflow.db --pid PID [--dag-id ID]
        [--output-root OUTPUT_ROOT]

`airflow dags test` (what `make demo` runs) writes everything to its log and
nothing a person can follow; this prints one line per task start and end, with
elapsed time, and with the run's `--output-root` one line per training epoch (from the
run folder's metrics.json), until the process `--pid` exits. Reads SQLite only (the
embedded default); it never writes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sqlite3
import sys
import time

from orchestration.runs import RunPaths
from runspec.record import RunFolderError, RunRecord

DAG_ID = "image_model_pipeline"


def task_states(db_path: str, dag_id: str) -> dict[str, tuple]:
    """task_id -> (state, start, end) in the DAG's latest run."""
    return latest_run(db_path, dag_id)[1]


def latest_run(db_path: str, dag_id: str) -> tuple[str | None, dict[str, tuple]]:
    """The DAG's latest run: its id, and task_id -> (state, start, end)."""
    if not os.path.exists(db_path):
        return None, {}
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1) as db:
            rows = db.execute(
                "SELECT ti.task_id, ti.state, ti.start_date, ti.end_date, dr.run_id "
                "FROM task_instance ti "
                "JOIN dag_run dr ON dr.dag_id = ti.dag_id AND dr.run_id = ti.run_id "
                "WHERE ti.dag_id = ? AND dr.id = (SELECT max(id) FROM dag_run WHERE dag_id = ?)",
                (dag_id, dag_id),
            ).fetchall()
    except sqlite3.Error:  # being migrated or locked: try again on the next poll
        return None, {}
    run_id = rows[0][4] if rows else None
    return run_id, {task: (state, start, end) for task, state, start, end, _ in rows}


def epoch_lines(output_root: str, run_id: str, shown: int) -> list[str]:
    """Lines for the run's epochs after the first `shown` (its train/ run folder)."""
    try:
        run = RunRecord.read(RunPaths.for_run(output_root, run_id).train)
    except RunFolderError:
        return []  # being replaced: the next poll reads it
    if run is None:
        return []  # not started
    epochs, total = run.epochs, run.config.get("epochs", "?")
    lines = []
    for epoch in epochs[shown:]:
        validation = epoch.get("val_accuracy")
        lines.append(
            f"  train: epoch {epoch['epoch']}/{total} train_acc {epoch['train_accuracy']:.3f}"
            + (f" val_acc {validation:.3f}" if validation is not None else "")
            + f" ({epoch['seconds']:.1f}s)"
        )
    return lines


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    parse = dt.datetime.fromisoformat
    return (parse(end) - parse(start)).total_seconds()


def describe_changes(before: dict, after: dict) -> list[str]:
    """Lines for tasks that started or finished between two polls."""
    lines = []
    for task, (state, start, end) in sorted(after.items(), key=lambda kv: kv[1][1] or ""):
        old_state = before.get(task, (None, None, None))[0]
        if state == old_state:
            continue
        if state == "running":
            lines.append(f"  {task}: started")
        elif state in ("success", "failed", "upstream_failed", "skipped"):
            took = _seconds(start, end)
            lines.append(f"  {task}: {state}" + (f" in {took:.0f}s" if took is not None else ""))
    return lines


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(
    db_path: str,
    pid: int,
    *,
    dag_id: str = DAG_ID,
    poll: float = 2.0,
    output_root: str | None = None,
) -> None:
    started, seen, epochs_shown = time.monotonic(), {}, 0
    while True:
        running = alive(pid)
        run_id, now = latest_run(db_path, dag_id)
        lines = describe_changes(seen, now)
        if output_root and run_id and now.get("train", (None,))[0] is not None:
            epochs = epoch_lines(output_root, run_id, epochs_shown)
            epochs_shown += len(epochs)
            lines += epochs
        for line in lines:
            print(f"[{time.monotonic() - started:5.0f}s]{line}", flush=True)
        seen = now
        if not running:
            return
        time.sleep(poll)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestration.progress", description=__doc__)
    parser.add_argument("--db", required=True, help="Airflow's SQLite database file.")
    parser.add_argument("--pid", type=int, required=True, help="Watch until this process exits.")
    parser.add_argument("--dag-id", default=DAG_ID)
    parser.add_argument(
        "--output-root", help="The run's output_root: also show each training epoch."
    )
    args = parser.parse_args(argv)
    watch(args.db, args.pid, dag_id=args.dag_id, output_root=args.output_root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
