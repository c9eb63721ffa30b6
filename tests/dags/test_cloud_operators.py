"""The DAG's cloud paths, checked at the last step before a request would leave the process."""

import json
import subprocess
import sys

import pytest
from google.cloud.aiplatform_v1.types import CustomJob

from orchestration.beam_options import dataflow_config, dataflow_job_name
from orchestration.launchers import (
    LauncherConfigError,
    TrainingJob,
    launcher_options,
    vertex,
)
from tests.dags.airflow_env import REPO, airflow_env

pytestmark = pytest.mark.slow  # the DAG's operators in an Airflow subprocess

RUN_ID = "manual__2026-12-01T10:00:00+00:00"
SAFE_RUN = "manual__2026-12-01T10_00_00_00_00"
BEAM_OPTIONS = {
    "project": "acme-ml",
    "region": "europe-west1",
    "temp_location": "gs://acme-tmp/dataflow",
    "sdk_container_image": "europe-docker.pkg.dev/acme-ml/imagepipe/beam:1.0",
}
VERTEX_OPTIONS = {
    "project": "acme-ml",
    "region": "europe-west4",
    "machine_type": "g2-standard-8",
    "accelerator_type": "NVIDIA_L4",
    "accelerator_count": 1,
    "service_account": "trainer@acme-ml.iam.gserviceaccount.com",
}


# The wait for each remote job in the triggerer (the default) and in the worker slot.
@pytest.fixture(scope="module", params=["triggerer", "worker"])
def captured(tmp_path_factory, request):
    case = {
        "run_id": RUN_ID,
        "params": {
            "input_uri": "gs://acme-raw/images",
            "output_root": "gs://acme-pipeline",
            "num_workers": 3,
            "max_side": 512,
            "beam_runner": "DataflowRunner",
            "beam_options": BEAM_OPTIONS,
            "training_launcher": "vertex",
            "training_options": VERTEX_OPTIONS,
        },
        "shards": f"gs://acme-pipeline/runs/{SAFE_RUN}/shards",
        "train": f"gs://acme-pipeline/runs/{SAFE_RUN}/train",
        "image": "europe-docker.pkg.dev/acme-ml/imagepipe/trainer:1.0",
    }
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "dags" / "capture_requests.py"),
            str(REPO / "dags"),
            json.dumps(case),
        ],
        env=airflow_env(
            tmp_path_factory.mktemp("airflow_home"),
            # A keyless connection (credentials would come from ADC), as on Composer/GKE.
            AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT="google-cloud-platform://",
            # Never let google-auth probe a metadata server from a test.
            NO_GCE_CHECK="True",
            GCE_METADATA_HOST="127.0.0.1:9",
            GCE_METADATA_IP="127.0.0.1:9",
            AIRFLOW__IMAGEPIPE__DEFERRABLE=str(request.param == "triggerer"),
        ),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    deferred = result.get("deferred", {})
    assert set(deferred) == ({"shard_images", "train"} if request.param == "triggerer" else set())
    result["waits_in"] = request.param
    return result


def _wait(captured: dict, task: str, in_worker: str) -> dict:
    """What the wait for `task`'s job was given: the hook's call in the worker, or the
    trigger the triggerer would run."""
    if captured["waits_in"] == "worker":
        return captured[in_worker]
    path, kwargs = captured["deferred"][task]
    expected = {"shard_images": "DataflowJobStatusTrigger", "train": "CustomJobTrigger"}[task]
    assert path.rsplit(".", 1)[-1] == expected
    return kwargs


def test_dataflow_runner_gets_exactly_the_params_options(captured):
    beam = captured["beam"]
    variables = beam["variables"]
    job_name = variables.pop("job_name")
    labels = variables.pop("labels")
    assert variables == {
        "input": "gs://acme-raw/images",
        "output": f"gs://acme-pipeline/runs/{SAFE_RUN}/shards",
        "max-side": 512,
        "max-error-fraction": 0.05,
        "min-shards": 3,
        "near-duplicate-distance": 6,  # the Param's default, passed as every Param is
        "cache-dir": "gs://acme-pipeline/shard_cache",  # runs reuse unchanged shards
        **BEAM_OPTIONS,
    }
    assert job_name == dataflow_job_name(RUN_ID)  # one per run: Dataflow refuses a twin
    # the operator's own label, nothing else, as Beam's --labels take it
    assert [label.split("=")[0] for label in labels] == ["airflow-version"]
    assert beam["command_prefix"][1:] == ["-m", "beam_jobs.shard_images"]
    # The operator waits for the job where it was launched, not in its default region.
    wait = _wait(captured, "shard_images", "dataflow_wait")
    assert (wait["project_id"], wait["location"]) == ("acme-ml", "europe-west1")
    if captured["waits_in"] == "worker":
        assert wait["job_name"] == job_name
    else:
        assert "JOB_STATE_DONE" in str(wait["expected_statuses"])
    # ... and for the job the launcher reported, whose id the task returns.
    assert wait["job_id"] == "2026-12-01_10_00_00-42" == captured["shard_images"]["dataflow_job_id"]


def test_dataflow_without_region_or_temp_location_is_a_clear_error():
    with pytest.raises(ValueError, match=r"\['region', 'temp_location'\]"):
        dataflow_config({"beam_runner": "DataflowRunner", "beam_options": {"project": "p"}}, "r")
    assert dataflow_config({"beam_runner": "DirectRunner", "beam_options": {}}, "r") == {}


def test_vertex_request_is_what_the_operator_sends(captured):
    create = captured["vertex_create"]
    assert (create["project_id"], create["region"]) == ("acme-ml", "europe-west4")
    custom_job = create["custom_job"]
    pools = custom_job["job_spec"]["worker_pool_specs"]
    # Pool 0 is Vertex's chief, pool 1 the other workers: 3 processes in all.
    assert [p["replica_count"] for p in pools] == [1, 2]
    for pool in pools:
        assert pool["machine_spec"] == {
            "machine_type": "g2-standard-8",
            "accelerator_type": "NVIDIA_L4",
            "accelerator_count": 1,
        }
        container = pool["container_spec"]
        assert container["image_uri"] == "europe-docker.pkg.dev/acme-ml/imagepipe/trainer:1.0"
        assert container["command"] == ["python", "-m", "training.train"]
        assert container["args"][:4] == [
            "--data",
            f"gs://acme-pipeline/runs/{SAFE_RUN}/shards",
            "--output",
            f"gs://acme-pipeline/runs/{SAFE_RUN}/train",
        ]
    spec = custom_job["job_spec"]
    assert spec["scheduling"] == {"restart_job_on_worker_restart": True}
    assert spec["service_account"] == VERTEX_OPTIONS["service_account"]
    assert captured["xcom"]["custom_job_id"] == "123"  # the operator's own link to the job
    if captured["waits_in"] == "triggerer":  # the trigger waits for that job, where it runs
        wait = _wait(captured, "train", "vertex_wait")
        assert (wait["project_id"], wait["location"]) == ("acme-ml", "europe-west4")
        assert wait["custom_job_id"] == "123"


def test_vertex_request_is_a_valid_api_message():
    job = TrainingJob(data="gs://b/shards", output="gs://b/train", num_workers=1)
    options = vertex.Options(project="p", region="r")
    custom_job = vertex.render(job, options, display_name="Run 1", image="img:1")
    message = CustomJob(custom_job)
    assert len(message.job_spec.worker_pool_specs) == 1
    assert message.display_name == "run-1"
    with pytest.raises(KeyError):
        CustomJob(
            vertex.render(
                job,
                vertex.Options(
                    project="p",
                    region="r",
                    accelerator_type="NVIDIA_NOT_A_GPU",
                    accelerator_count=1,
                ),
                display_name="x",
                image="img",
            )
        )


@pytest.mark.parametrize(
    ("launcher", "options", "data", "message"),
    [
        ("vertex", {"project": "p"}, "gs://b/s", r"training_options needs \['region'\]"),
        ("vertex", {"project": "p", "region": "r", "gpus": 1}, "gs://b/s", "are not settings"),
        ("local", {"namespace": "ml"}, "/data", "not settings here .* for the 'local' launcher"),
        ("vertex", {"project": "p", "region": "r"}, "/local/shards", "only see gs:// paths"),
    ],
)
def test_launcher_settings_mistakes_are_clear_errors(launcher, options, data, message):
    with pytest.raises(LauncherConfigError, match=message):
        options = launcher_options(launcher, options)
        job = TrainingJob(data=data, output="gs://b/train")
        vertex.render(job, options, display_name="x", image="img")
