"""TensorFlow's start-up banner is kept off the CLIs' stderr; everything else still gets there."""

import os
import subprocess
import sys

SCRIPT = (
    "import sys, training, tensorflow as tf; "
    "print('ours', file=sys.stderr); print(tf.constant(2).numpy())"
)


def _run(level: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": level},
    )  # fmt: skip


def test_the_banner_is_filtered_and_the_rest_of_stderr_kept():
    quiet = _run("2")
    assert quiet.returncode == 0 and quiet.stdout.strip() == "2"
    assert "absl::InitializeLog" not in quiet.stderr and "oneDNN" not in quiet.stderr
    assert "ours" in quiet.stderr


def test_a_verbose_log_level_shows_tensorflows_lines():
    verbose = _run("0")
    assert "absl::InitializeLog" in verbose.stderr or "oneDNN" in verbose.stderr
