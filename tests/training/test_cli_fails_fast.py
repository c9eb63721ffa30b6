"""A mistake in the training command fails in one line before TensorFlow loads."""

import subprocess
import sys

from tests.dags.airflow_env import REPO

PROBE = """
import sys
from training import train
code = train.main(sys.argv[1:])
print("exit", code, "tensorflow loaded:", "tensorflow" in sys.modules)
"""


def _probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=REPO,
        timeout=120,
    )  # fmt: skip


def test_a_missing_local_shard_folder_is_refused_before_tensorflow_loads(tmp_path):
    proc = _probe("--data", str(tmp_path / "nowhere"), "--output", str(tmp_path / "run"))
    assert proc.stdout.strip() == "exit 2 tensorflow loaded: False"
    assert proc.stderr.strip() == f"error: {tmp_path / 'nowhere'}: shard directory does not exist"


def test_an_unfinished_shard_folder_is_refused_before_tensorflow_loads(trainable_shards, tmp_path):
    import shutil

    shards = tmp_path / "shards"
    shutil.copytree(trainable_shards, shards)
    (shards / "_SUCCESS").unlink()
    proc = _probe("--data", str(shards), "--output", str(tmp_path / "run"))
    assert proc.stdout.strip() == "exit 2 tensorflow loaded: False"
    assert "no _SUCCESS marker" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
