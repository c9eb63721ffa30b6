import json
import subprocess
import sys

import pytest

from orchestration.beam_options import shard_job_options
from orchestration.runs import RunPaths, safe_run_id
from tests.dags.airflow_env import REPO, airflow_env

pytestmark = pytest.mark.slow  # parses the DAG folder in an Airflow subprocess


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    env = airflow_env(tmp_path_factory.mktemp("airflow_home"))
    del env["IMAGEPIPE_SCHEDULE"]  # the shipped default
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "dags" / "inspect_dag.py"), str(REPO / "dags")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_dag_folder_imports_cleanly(parsed):
    assert parsed["import_errors"] == {}
    assert parsed["dag_ids"] == ["image_model_pipeline", "model_published"]


def test_parsing_imports_no_tensorflow_or_beam(parsed):
    assert parsed["heavy_modules"] == []


def test_tasks_and_dependencies_are_as_documented(parsed):
    assert parsed["tasks"] == {
        "check_params": ["shard_images"],
        "shard_images": ["validate_shards"],
        "validate_shards": ["check_data"],
        "check_data": ["train"],
        "train": ["evaluate"],
        "evaluate": ["approve_publish", "publish"],  # publish reads evaluate's XCom
        "approve_publish": ["publish"],
        "publish": [],
    }
    # Beam's operator, reconnecting to its Dataflow job on retry.
    assert parsed["shard_operator"][0] == "ShardImagesOperator"
    assert {"BeamRunPythonPipelineOperator", "ResumableJobMixin"} <= set(parsed["shard_operator"])
    assert parsed["outlets"]["shard_images"] == ["imagepipe_shards"]
    assert parsed["outlets"]["publish"] == ["imagepipe_model"]
    assert parsed["consumer_schedule"] == ["imagepipe_model"]  # another DAG runs on a new model


def test_every_task_uses_the_default_queue_unless_configured(parsed):
    assert len(set(parsed["queues"].values())) == 1  # IMAGEPIPE_TRAINING_QUEUE unset


def test_scheduling_retries_and_timeouts(parsed):
    assert parsed["schedule"] == "@daily"
    assert parsed["catchup"] is False and parsed["max_active_runs"] == 1
    assert parsed["retries"]["train"] >= 1 and parsed["retries"]["validate_shards"] == 0
    assert parsed["retries"]["check_data"] == 0  # the same data gives the same answer
    # The approval waits for a person: its limit is the operator's response_timeout (7 days).
    assert all(seconds for task, seconds in parsed["timeouts"].items() if task != "approve_publish")


def test_params_have_defaults_descriptions_and_reject_bad_values(parsed):
    assert parsed["params_described"]
    for name in (
        "input_uri",
        "output_root",
        "model_name",
        "architecture",
        "image_size",
        "epochs",
        "per_replica_batch_size",
        "num_workers",
        "learning_rate",
        "max_error_fraction",
        "accuracy_gate",
        "beam_runner",
        "beam_options",
        "training_launcher",
        "training_options",
        "require_approval",
        "input_service",
        "reuse_training",
    ):
        assert name in parsed["params"]
    assert parsed["rejected"] == {name: True for name in parsed["rejected"]}


def test_run_paths_are_keyed_by_a_filesystem_safe_run_id():
    paths = RunPaths.for_run("gs://b/out/", "manual__2026-12-01T10:00:00+00:00")
    assert paths.shards == "gs://b/out/runs/manual__2026-12-01T10_00_00_00_00/shards"
    assert paths.train == "gs://b/out/runs/manual__2026-12-01T10_00_00_00_00/train"
    assert safe_run_id("../../x") == "x"


def test_beam_operator_options_come_from_params_alone():
    params = {
        "input_uri": "gs://in",
        "max_side": 512,
        "max_error_fraction": 0.1,
        "num_workers": 4,
        "beam_options": {
            "project": "p",
            "region": "europe-west1",
            "temp_location": "gs://b/tmp",
            "sdk_container_image": "europe-docker.pkg.dev/p/r/beam:1",
        },
    }
    assert shard_job_options(params, "gs://out/shards") == {
        "input": "gs://in",
        "output": "gs://out/shards",
        "max-side": 512,
        "max-error-fraction": 0.1,
        "min-shards": 4,
        "project": "p",
        "region": "europe-west1",
        "temp_location": "gs://b/tmp",
        "sdk_container_image": "europe-docker.pkg.dev/p/r/beam:1",
    }
    with pytest.raises(ValueError, match="output"):
        shard_job_options({**params, "beam_options": {"output": "elsewhere"}}, "x")


def test_the_dags_params_are_derived_from_the_stage_configs(parsed):
    from orchestration.params import dag_params

    expected = dag_params(input_uri="in", output_root="out", model_root="models")
    assert list(parsed["param_schemas"]) == list(expected)
    for name, fields in expected.items():
        shown = parsed["param_schemas"][name]
        for key, value in fields.items():
            if key != "default" or name not in ("input_uri", "output_root", "model_root"):
                assert shown.get(key) == value, (name, key)
