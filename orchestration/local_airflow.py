"""`make airflow`: Airflow on this machine, started and stopped like a dev server.

`airflow standalone` is meant for trying Airflow out, and its defaults say so: it
listens on every interface, the LocalExecutor forks 32 workers at once whatever the
machine, the DAG is created paused (a triggered run waits in Queued with nothing on
the page saying why) and, once unpaused, the `@daily` schedule adds runs with default
settings beside the one the user triggered. Its Ctrl-C can hang for minutes and a
second one leaves the scheduler and the workers running.

Here, one definition of the local settings (`settings`, also what `scripts/airflow-env.sh`
exports for `make demo` and what the tests' Airflow runs with): 127.0.0.1, workers as
many as the machine's cores, no schedule (a run happens when someone triggers it; set
IMAGEPIPE_SCHEDULE, e.g. @daily, to have one), DAGs unpaused at creation. And a launcher
that owns what it starts: every process carries a marker in its environment, and Ctrl-C
(or SIGTERM) stops them all, politely first and then for good, within seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = "IMAGEPIPE_LOCAL_AIRFLOW"  # in the environment of every process the launcher starts
GRACE_SECONDS = 8.0  # then what is left is killed


def settings(
    *,
    home: str | None = None,
    host: str | None = None,
    port: int | None = None,
    environ: dict | None = None,
) -> dict[str, str]:
    """The environment of a local Airflow. Values already set in `environ` win, so a
    user's AIRFLOW__API__HOST or IMAGEPIPE_SCHEDULE is kept."""
    environ = os.environ if environ is None else environ
    home = home or environ.get("AIRFLOW_HOME") or str(REPO / ".airflow")
    port = port or int(environ.get("AIRFLOW__API__PORT") or 8080)
    host = host or environ.get("AIRFLOW__API__HOST") or "127.0.0.1"
    address = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
    defaults = {
        "AIRFLOW__API__HOST": host,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{address}:{port}/execution/",
        "AIRFLOW__CORE__PARALLELISM": str(max(2, os.cpu_count() or 2)),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "IMAGEPIPE_SCHEDULE": "",  # no schedule: runs are the ones a person triggers
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    values = {key: environ.get(key, value) for key, value in defaults.items()}
    values.update(
        {
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH")])),
        }
    )
    return values


def _ours(session: int, token: str) -> list:
    """The live processes the launcher started: those of the session it gave Airflow, and
    those that left it (a training launcher's workers) but carry its marker, with all their
    children. (The marker alone is not enough: a process that sets its title, as Airflow's
    API server does, may overwrite what /proc shows of its environment.)"""
    import psutil

    found = {}
    for process in psutil.process_iter(["environ", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            environ = process.info.get("environ") or {}
            if os.getsid(process.pid) == session or (token and environ.get(MARKER) == token):
                found[process.pid] = process
        except (OSError, psutil.Error):
            continue
    for process in list(found.values()):
        try:
            for child in process.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    found.pop(os.getpid(), None)
    return list(found.values())


def stop_all(
    session: int,
    token: str = "",
    *,
    grace: float = GRACE_SECONDS,
    now: threading.Event | None = None,
) -> int:
    """SIGTERM to every process of the launcher's Airflow at once, SIGKILL to what is left
    after `grace` seconds (or as soon as `now` is set: a second Ctrl-C); -> how many."""
    import psutil

    processes = _ours(session, token)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    deadline = time.monotonic() + grace
    alive = processes
    while alive and time.monotonic() < deadline and not (now and now.is_set()):
        _, alive = psutil.wait_procs(alive, timeout=0.5)
    for _ in range(3):  # and what was forked during the shutdown
        alive = _ours(session, token)
        if not alive:
            break
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(alive, timeout=2)
    return len(processes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestration.local_airflow",
        description="Airflow (UI, REST API, scheduler) on this machine with this repository's "
        "DAGs; Ctrl-C stops every process it started.",
    )
    parser.add_argument(
        "--host", help="Interface to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, help="UI and REST API port (default 8080)")
    parser.add_argument(
        "--print-env",
        action="store_true",
        help="Print the settings as shell exports (scripts/airflow-env.sh) and exit",
    )
    args = parser.parse_args(argv)
    env = settings(host=args.host, port=args.port)
    if args.print_env:
        for key, value in env.items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    token = uuid.uuid4().hex
    stopping, now = threading.Event(), threading.Event()

    def on_signal(signum, frame):
        if stopping.is_set():
            now.set()  # a second Ctrl-C: no more waiting
        stopping.set()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    home = env["AIRFLOW_HOME"]
    print(
        f"Airflow on http://{env['AIRFLOW__API__HOST']}:{env['AIRFLOW__API__PORT']} "
        f"(user admin; password in {home}/simple_auth_manager_passwords.json.generated). "
        f"Its state (database, logs) is in {home}/. Ctrl-C stops it.",
        flush=True,
    )
    airflow = str(Path(sys.executable).parent / "airflow")
    # Its own session: the terminal's Ctrl-C reaches this launcher only, which stops the
    # processes in an order and time it controls.
    process = subprocess.Popen(
        [airflow, "standalone"], env={**os.environ, **env, MARKER: token}, start_new_session=True
    )
    while process.poll() is None and not stopping.is_set():
        stopping.wait(0.5)
    if not stopping.is_set():
        stop_all(process.pid, token, grace=2)
        print(f"airflow standalone exited with {process.returncode}", file=sys.stderr)
        return process.returncode or 1
    print("stopping Airflow ...", file=sys.stderr, flush=True)
    count = stop_all(process.pid, token, now=now)
    process.wait()
    print(f"stopped Airflow ({count} processes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
