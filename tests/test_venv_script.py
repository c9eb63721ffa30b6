"""`make install`'s first step (scripts/venv.sh): Python 3.11 or one line saying how to
pass it, and a virtual environment left by another Python is rebuilt, not reused."""

import subprocess
import sys

import pytest

from tests.dags.airflow_env import REPO

pytestmark = pytest.mark.slow  # subprocesses, a venv


def _venv(python: str, venv) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "scripts" / "venv.sh"), python, str(venv)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _fake_python(path, version: str) -> str:
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return str(path)


def test_another_python_is_refused_in_one_line(tmp_path):
    proc = _venv(_fake_python(tmp_path / "python3", "3.12"), tmp_path / "venv")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "needs Python 3.11" in line and "is Python 3.12" in line
    assert "make PYTHON=python3.11" in line
    assert not (tmp_path / "venv").exists()
    proc = _venv(str(tmp_path / "no-such-python"), tmp_path / "venv")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_a_venv_of_another_python_is_rebuilt(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    _fake_python(venv / "bin" / "python", "3.12")
    proc = _venv(sys.executable, venv)
    assert proc.returncode == 0, proc.stderr
    assert "rebuilding it" in proc.stdout
    version = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert version.strip() == "(3, 11)"
