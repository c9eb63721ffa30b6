"""`make airflow` starts and stops like a dev server: this machine only, workers as many as
its cores, no schedule of its own, and one Ctrl-C stops every process it started."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from orchestration.local_airflow import MARKER, settings
from tests.dags.airflow_env import REPO


def test_the_local_settings_and_what_a_user_set_wins(tmp_path):
    env = settings(home=str(tmp_path), environ={"PATH": "/bin"})
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__CORE__PARALLELISM"] == str(max(2, os.cpu_count()))
    assert env["IMAGEPIPE_SCHEDULE"] == ""  # runs are the ones a person triggers
    assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
    assert env["AIRFLOW_HOME"] == str(tmp_path)
    mine = settings(
        environ={"AIRFLOW__API__HOST": "0.0.0.0", "IMAGEPIPE_SCHEDULE": "@daily", "PATH": ""}
    )
    assert (mine["AIRFLOW__API__HOST"], mine["IMAGEPIPE_SCHEDULE"]) == ("0.0.0.0", "@daily")
    assert mine["AIRFLOW_HOME"] == str(REPO / ".airflow")


def _marked(home) -> list[psutil.Process]:
    """Processes that carry the launcher's marker and this home in their environment (those
    that left its session, as a training launcher's workers do)."""
    found = []
    for process in psutil.process_iter(["environ", "status"]):
        environ = process.info.get("environ") or {}
        if MARKER in environ and environ.get("AIRFLOW_HOME") == str(home):
            found.append(process)
    return [p for p in found if p.info["status"] != psutil.STATUS_ZOMBIE]


@pytest.mark.slow  # starts Airflow
def test_one_ctrl_c_stops_every_process_it_started(tmp_path, free_port):
    home = tmp_path / "airflow_home"
    env = {**os.environ, "AIRFLOW_HOME": str(home)}
    env.pop("AIRFLOW__API__HOST", None)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "orchestration.local_airflow", "--port", str(free_port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            assert launcher.poll() is None, launcher.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "Airflow did not come up"
            try:
                url = f"http://127.0.0.1:{free_port}/api/v2/monitor/health"
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(2)
        session = os.getsid(next(iter(_children(launcher))).pid)
        processes = [p for p in psutil.process_iter() if _sid(p) == session]
        listening = {
            conn.laddr.ip
            for p in processes
            for conn in _connections(p)
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == free_port
        }
        assert listening == {"127.0.0.1"}  # this machine only
        workers = [p for p in processes if "LocalExecutor" in " ".join(_cmdline(p))]
        assert len(workers) == max(2, os.cpu_count())  # not Airflow's default 32

        launcher.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends it
        output, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, output[-3000:]
    assert "stopped Airflow" in output.splitlines()[-1]
    assert "Traceback" not in output
    time.sleep(1)
    left = [p for p in psutil.process_iter() if _sid(p) == session] + _marked(home)
    assert [p for p in left if p.status() != psutil.STATUS_ZOMBIE] == []


def _children(launcher: subprocess.Popen) -> list[psutil.Process]:
    return psutil.Process(launcher.pid).children()


def _sid(process: psutil.Process) -> int | None:
    try:
        return os.getsid(process.pid)
    except OSError:
        return None


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _connections(process: psutil.Process) -> list:
    try:
        return process.net_connections(kind="inet")
    except psutil.Error:
        return []
