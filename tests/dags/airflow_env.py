"""Helpers to run Airflow in an isolated AIRFLOW_HOME (subprocesses only: Airflow reads its
configuration once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def airflow_env(home: Path, **extra: str) -> dict:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "IMAGEPIPE_SCHEDULE": "",  # no scheduled run competing with the test's runs
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": str(REPO),
        **extra,
    }


def airflow(env: dict, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "airflow"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
