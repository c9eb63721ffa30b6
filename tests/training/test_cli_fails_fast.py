"""A mistake in the training command fails in one line before TensorFlow loads."""

import subprocess
import sys

import pytest

from tests.dags.airflow_env import REPO

pytestmark = pytest.mark.slow  # CLI subprocesses

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


def test_an_output_inside_the_shard_folder_is_refused(trainable_shards, tmp_path):
    """The run's checkpoints, model and TensorBoard files would go among the shards (also
    through a symlink to the shard folder)."""
    from training.config import ConfigError, TrainConfig

    link = tmp_path / "link"
    link.symlink_to(trainable_shards)
    for output in (trainable_shards, f"{trainable_shards}/run", str(link / "run")):
        try:
            TrainConfig(data=str(link), output=output)
        except ConfigError as err:
            assert str(err).startswith(f"--output {output} is inside --data {link}:")
        else:
            raise AssertionError(f"{output} accepted")
    TrainConfig(data=trainable_shards, output=str(tmp_path / "run"))  # beside it: fine
    TrainConfig(data=str(tmp_path / "run" / "shards"), output=str(tmp_path / "run"))  # above
    proc = _probe("--data", trainable_shards, "--output", f"{trainable_shards}/run")
    assert proc.returncode == 2 and "tensorflow loaded" not in proc.stdout
    assert proc.stderr.strip().endswith("give an output folder outside them")
