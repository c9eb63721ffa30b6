"""TensorFlow's start-up banner is kept off the CLIs' stderr; everything else still gets
there; importing the package (as the DAG processor does) changes nothing global."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # CLI subprocesses


def _cli(level: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    # training.evaluate imports TensorFlow at its top; no arguments: argparse's error.
    return subprocess.run(
        [sys.executable, "-m", "training.evaluate"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


def test_the_banner_is_filtered_and_the_rest_of_stderr_kept():
    quiet = _cli(None)
    assert quiet.returncode == 2
    assert "absl::InitializeLog" not in quiet.stderr and "oneDNN" not in quiet.stderr
    assert "error: the following arguments are required" in quiet.stderr


def test_a_verbose_log_level_shows_tensorflows_lines():
    verbose = _cli("0")
    assert "absl::InitializeLog" in verbose.stderr or "oneDNN" in verbose.stderr


def test_importing_the_package_sets_nothing_global():
    script = (
        "import os, sys; before = dict(os.environ); hooks = list(sys.meta_path)\n"
        "import training, training.config, orchestration.params\n"
        "assert dict(os.environ) == before, set(os.environ) ^ set(before)\n"
        "assert sys.meta_path == hooks, sys.meta_path\n"
        "print('clean')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip
    assert proc.stdout.strip() == "clean", proc.stderr[-2000:]
