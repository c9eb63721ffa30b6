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

from bench.report import load, table
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
        "ratio_cached_vs_synthetic_input",
        "input_bound_share",
    ],
    "orchestration": [
        "ratio_wall_vs_stages",
        "ratio_run_vs_stages",
        "ratio_second_vs_first_run",
        "ratio_reuse_vs_first_run",
        "ratio_reuse_vs_first_run_recorded",
    ],
    "warm_start": ["ratio_warm_vs_cold_accuracy", "ratio_warm_vs_cold_seconds"],
    "data_statistics": ["ratio_with_vs_without_seconds"],
    "sharding_scale": ["ratio_driver_memory_thumbnails_largest_vs_smallest"],
}

# Ratios the table gives in words or in another row's text rather than by name.
UNTABLED = (
    "ratio_real_vs_synthetic_input",
    "resized_shards_ratio_vs_ceiling",
    "resized_shards_ratio_vs_naive",
    "ratio_driver_memory_thumbnails_largest_vs_smallest",
)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    work = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--work", str(work), "--results",
         str(work / "results"), "--scale", "32,64"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return work / "results", proc.stdout


@pytest.mark.slow
@pytest.mark.extended  # the smoke run (every benchmark, 3 DAG runs): 5-8 min
@pytest.mark.parametrize("name", sorted(RATIOS))
def test_each_benchmark_writes_named_ratios_and_the_machine(smoke, name):
    results, _ = smoke
    result = json.loads((results / f"{name}.json").read_text())
    assert result["benchmark"] == name
    assert {"cores", "cpu_model", "tensorflow"} <= set(result["machine"])
    for key in RATIOS[name]:
        assert isinstance(result[key], float) and math.isfinite(result[key]), key


@pytest.mark.slow
@pytest.mark.extended  # the smoke run (every benchmark, 3 DAG runs): 5-8 min
def test_report_writes_table_and_plot(smoke):
    results, stdout = smoke
    table = (results / "results.md").read_text()
    for keys in RATIOS.values():
        for key in keys:
            if key not in UNTABLED:
                assert key in table, key
    assert (results / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| benchmark | measured | ratio |" in stdout


def test_the_table_names_every_ratio_a_stored_result_holds():
    """The fast tier's guard for the smoke test above: a row that prints a ratio
    without its name cannot be found in the table (as `recorded 0.28` could not)."""
    results = load(REPO / "bench" / "results")
    table_text = table(results)
    checked = 0
    for name, keys in RATIOS.items():
        for key in keys:
            if key in results.get(name, {}) and key not in UNTABLED:
                assert f"{key} {results[name][key]:.2f}" in table_text, key
                checked += 1
    assert checked >= 10


def test_fixed_and_per_image_cost_are_recovered_from_a_line():
    line = fit_line([(100, 12.0), (300, 16.0), (1000, 30.0)])
    assert line["fixed_seconds"] == pytest.approx(10.0)
    assert line["seconds_per_image"] == pytest.approx(0.02)
    assert line["marginal_images_per_second"] == pytest.approx(50.0)


def test_training_step_time_is_split_by_what_the_runs_differ_in():
    """Hand-computed: 1 worker 10 steps/s real, 20 synthetic; 2 workers 5 and 8."""
    from bench.training import step_breakdown

    split = step_breakdown(
        {"1_worker": 10, "1_worker_synthetic": 20, "2_workers": 5, "2_workers_synthetic": 8}
    )
    assert split["1_worker"] == {
        "step": 100.0, "compute": 50.0, "all_reduce": 0.0, "input_wait": 50.0
    }  # fmt: skip
    assert split["2_workers"] == {
        "step": 200.0, "compute": 50.0, "all_reduce": 75.0, "input_wait": 75.0
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.extended  # the smoke run (every benchmark, 3 DAG runs): 5-8 min
def test_the_smoke_run_reports_the_step_breakdown(smoke):
    results, _ = smoke
    breakdown = json.loads((results / "training.json").read_text())["step_time_breakdown_ms"]
    assert set(breakdown) == {"1_worker", "2_workers"}
    assert all(split["compute"] > 0 and split["step"] > 0 for split in breakdown.values())


@pytest.mark.slow
def test_sharding_scaling_runs_without_tensorflow(tmp_path):
    """The many-core scaling run: tiny here; TensorFlow blocked in its process, as on
    machines that lack it (the sharding job it starts imports none either)."""
    blocked = (
        "import sys; sys.modules['tensorflow'] = None; "
        "from bench.sharding_scaling import main; raise SystemExit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", blocked, "--work", str(tmp_path / "work"), "--images", "40",
         "--workers", "1,2", "--repeats", "1", "--results", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "sharding_scaling.json").read_text())
    assert result["machine"]["tensorflow"] is None
    assert result["params"]["images"] == 40  # drawn by 2 processes, merged into 4 classes
    assert set(result["images_per_second"]) == {
        "beam_1_workers", "beam_2_workers", "beam_default", "beam_in_process"
    }  # fmt: skip
    assert result["ratio_vs_1_worker"]["1"] == 1.0
    for ratios in ("ratio_vs_1_worker", "validation_ratio_vs_1_process"):
        assert all(math.isfinite(v) and v > 0 for v in result[ratios].values())
