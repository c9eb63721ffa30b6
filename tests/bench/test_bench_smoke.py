"""Every benchmark runs end to end at a tiny size, so `make bench` cannot rot.

The numbers at this size mean nothing; the test checks that each result file
has its machine record, its repeats and its named ratios, and that the report
writes the table and the plot.
"""

import json
import math
import subprocess
import sys

import pytest

from bench.sharding import fit_line
from tests.dags.airflow_env import REPO

RATIOS = {
    "input_pipeline": [
        "ratio_vs_ceiling",
        "ratio_vs_naive",
        "resized_shards_ratio_vs_ceiling",
        "resized_shards_ratio_vs_naive",
    ],
    "sharding": [
        "ratio_vs_naive",
        "ratio_2_vs_1_workers",
        "marginal_ratio_vs_naive",
        "marginal_ratio_2_vs_1_workers",
        "ratio_default_vs_naive",
        "ratio_2_workers_vs_in_process",
    ],
    "training": [
        "ratio_2_vs_1_workers",
        "ratio_2_vs_1_workers_sync_batch_norm",
        "ratio_real_vs_synthetic_input",
        "input_bound_share",
    ],
    "orchestration": ["ratio_wall_vs_stages", "ratio_second_vs_first_run"],
}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    work = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--work", str(work), "--results",
         str(work / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return work / "results", proc.stdout


@pytest.mark.parametrize("name", sorted(RATIOS))
def test_each_benchmark_writes_named_ratios_and_the_machine(smoke, name):
    results, _ = smoke
    result = json.loads((results / f"{name}.json").read_text())
    assert result["benchmark"] == name
    assert {"cores", "cpu_model", "tensorflow"} <= set(result["machine"])
    for key in RATIOS[name]:
        assert isinstance(result[key], float) and math.isfinite(result[key]), key


def test_report_writes_table_and_plot(smoke):
    results, stdout = smoke
    table = (results / "results.md").read_text()
    for keys in RATIOS.values():
        for key in keys:
            if key not in ("ratio_real_vs_synthetic_input", "resized_shards_ratio_vs_ceiling",
                           "resized_shards_ratio_vs_naive"):  # fmt: skip
                assert key in table, key
    assert (results / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| benchmark | measured | ratio |" in stdout


def test_fixed_and_per_image_cost_are_recovered_from_a_line():
    line = fit_line([(100, 12.0), (300, 16.0), (1000, 30.0)])
    assert line["fixed_seconds"] == pytest.approx(10.0)
    assert line["seconds_per_image"] == pytest.approx(0.02)
    assert line["marginal_images_per_second"] == pytest.approx(50.0)


def test_training_step_time_splits_into_compute_all_reduce_and_input(smoke):
    results, _ = smoke
    breakdown = json.loads((results / "training.json").read_text())["step_time_breakdown_ms"]
    for workers in ("1_worker", "2_workers"):
        split = breakdown[workers]
        assert split["step"] == pytest.approx(
            split["compute"] + split["all_reduce"] + split["input_wait"]
        )
