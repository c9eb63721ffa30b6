"""Ctrl-C during the sharding job: one line, exit 130, nothing half-written, whichever
way the local runner runs (threads, or worker processes that get the SIGINT too)."""

import sys

import pytest

from beam_jobs import sample_data
from stageconfig import exit_codes
from tests.interrupt import interrupt_when

pytestmark = pytest.mark.slow  # a job in a subprocess


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Images large enough that the job runs for seconds, not milliseconds."""
    folder = tmp_path_factory.mktemp("photos")
    sample_data.generate(str(folder), images_per_class=300, seed=1, min_size=400, max_size=640)
    return folder


@pytest.mark.parametrize("mode", ["multi_threading", "multi_processing"])
def test_ctrl_c_is_one_line_exit_130_and_leaves_no_shards(photos, tmp_path, mode):
    output = tmp_path / "shards"
    code, printed = interrupt_when(
        [sys.executable, "-m", "beam_jobs.shard_images", "--input", str(photos),
         "--output", str(output), "--direct_running_mode", mode, "--direct_num_workers", "2"],
        said="running the sharding pipeline",
        after=2.0,  # the workers are up and reading images
    )  # fmt: skip
    assert code == exit_codes.INTERRUPTED, printed[-3000:]
    assert "Traceback" not in printed and "Exception" not in printed, printed[-3000:]
    last = printed.strip().splitlines()[-1]
    assert last.startswith("interrupted: nothing was written to "), printed[-3000:]
    left = sorted(p.name for p in output.iterdir())
    assert "_SUCCESS" not in left and not [n for n in left if n.startswith("_staging")], left
