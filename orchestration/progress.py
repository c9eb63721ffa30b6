"""Show a DAG run's tasks as they start and end, from Airflow's metadata database.

    python -m orchestration.progress --db AIRFLOW_HOME/airflow.db --pid PID [--dag-id ID]

`airflow dags test` (what `make demo` runs) writes everything to its log and
nothing a person can follow; this prints one line per task start and end, with
elapsed time, until the process `--pid` exits. Reads SQLite only (the embedded
default); it never writes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sqlite3
import sys
import time

DAG_ID = "image_model_pipeline"


def task_states(db_path: str, dag_id: str) -> dict[str, tuple]:
    """task_id -> (state, start, end) in the DAG's latest run."""
    if not os.path.exists(db_path):
        return {}
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1) as db:
            rows = db.execute(
                "SELECT ti.task_id, ti.state, ti.start_date, ti.end_date FROM task_instance ti "
                "JOIN dag_run dr ON dr.dag_id = ti.dag_id AND dr.run_id = ti.run_id "
                "WHERE ti.dag_id = ? AND dr.id = (SELECT max(id) FROM dag_run WHERE dag_id = ?)",
                (dag_id, dag_id),
            ).fetchall()
    except sqlite3.Error:  # being migrated or locked: try again on the next poll
        return {}
    return {task: (state, start, end) for task, state, start, end in rows}


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


def watch(db_path: str, pid: int, *, dag_id: str = DAG_ID, poll: float = 2.0) -> None:
    started, seen = time.monotonic(), {}
    while True:
        running = alive(pid)
        now = task_states(db_path, dag_id)
        for line in describe_changes(seen, now):
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
    args = parser.parse_args(argv)
    watch(args.db, args.pid, dag_id=args.dag_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
