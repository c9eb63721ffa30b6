"""SIGKILL the Beam job mid-run, rerun into the same output: as if it never died.

The job and all its worker processes are killed at once (their process group),
once the job is visibly writing. Meanwhile and during the rerun, a watcher
checks that whenever `_SUCCESS` exists the shards it vouches for are complete.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tensorflow as tf

from beam_jobs import sample_data
from tests.dags.airflow_env import REPO
from training import features


def _job(images, output) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "beam_jobs.shard_images", "--input", str(images),
         "--output", str(output), "--min-shards", "3", "--direct_num_workers=2",
         "--direct_running_mode=multi_processing"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip


def _records(output: Path) -> dict:
    """split -> {image id: sha256 of the stored bytes}."""
    metadata = json.loads((output / "metadata.json").read_text())
    result = {}
    for split, info in metadata["splits"].items():
        records = {}
        for shard in info["shards"]:
            for raw in tf.data.TFRecordDataset(str(output / shard["file"])):
                parsed = features.parse_example(raw)
                records[parsed[features.IMAGE_ID].numpy().decode()] = hashlib.sha256(
                    parsed[features.IMAGE_ENCODED].numpy()
                ).hexdigest()
        result[split] = records
    return result


class SuccessWatcher(threading.Thread):
    """Whenever _SUCCESS is there, every shard metadata.json lists must be there, whole."""

    def __init__(self, output: Path):
        super().__init__(daemon=True)
        self.output, self.stop, self.violations, self.checks = output, False, [], 0

    def run(self):
        while not self.stop:
            if (self.output / "_SUCCESS").exists():
                try:
                    metadata = json.loads((self.output / "metadata.json").read_text())
                    for info in metadata["splits"].values():
                        for shard in info["shards"]:
                            data = (self.output / shard["file"]).read_bytes()
                            if hashlib.sha256(data).hexdigest() != shard["sha256"]:
                                self.violations.append(shard["file"])
                    self.checks += 1
                except (OSError, ValueError) as err:
                    if (self.output / "_SUCCESS").exists():  # not a rerun removing it meanwhile
                        self.violations.append(repr(err))
            time.sleep(0.05)


@pytest.mark.extended
def test_sigkilled_job_rerun_equals_an_uninterrupted_run(tmp_path):
    images = tmp_path / "images"
    sample_data.generate(str(images), images_per_class=60, seed=5)
    reference, output = tmp_path / "reference", tmp_path / "output"
    assert _job(images, reference).wait(timeout=600) == 0

    # A complete earlier run, then a rerun killed mid-way: readers must stop trusting it.
    assert _job(images, output).wait(timeout=600) == 0
    watcher = SuccessWatcher(output)
    watcher.start()
    job = _job(images, output)
    deadline = time.monotonic() + 300
    while not list(output.glob("_staging-*/*")) and time.monotonic() < deadline:
        assert job.poll() is None, job.stdout.read()[-2000:]
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=60)
    assert not (output / "_SUCCESS").exists()
    assert list(output.glob("_staging-*")), "the kill came after the job finished"

    rerun = _job(images, output)
    assert rerun.wait(timeout=600) == 0, rerun.stdout.read()[-3000:]
    watcher.stop = True
    watcher.join()
    assert watcher.checks > 0 and watcher.violations == []
    assert not list(output.glob("_staging-*"))  # the killed run's leftovers are gone
    assert _records(output) == _records(reference)
    ours = json.loads((output / "metadata.json").read_text())
    theirs = json.loads((reference / "metadata.json").read_text())
    for key in ("splits", "label_map", "num_records", "num_errors"):
        assert ours.get(key) == theirs.get(key), key
