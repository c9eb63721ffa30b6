"""Run the cloud-facing operators with their network calls replaced by recorders; print JSON.

What each operator would send (the Beam command's options, the Dataflow wait's
project/region, the Vertex AI CreateCustomJob request) is recorded at the
provider's hook, the last step before a request leaves the process, so the
test sees exactly what a real run would submit. Runs in a subprocess because
Airflow reads its configuration once per process.
"""

import json
import sys
from types import SimpleNamespace
from unittest import mock

from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.beam.hooks.beam import BeamHook
from airflow.providers.google.cloud.hooks.dataflow import DataflowHook
from airflow.providers.google.cloud.hooks.vertex_ai.custom_job import CustomJobHook
from google.cloud.aiplatform_v1.types import CustomJob

from orchestration.launchers import TrainingJob, check_launcher_options, render_vertex_custom_job
from orchestration.submit import submit_vertex

case = json.loads(sys.argv[2])
dag = DagBag(sys.argv[1]).dags["image_model_pipeline"]
recorded: dict = {}


def record(name):
    def recorder(*args, **kwargs):
        recorded[name] = {k: v for k, v in kwargs.items() if not callable(v)}
        return SimpleNamespace(name="projects/p/locations/r/customJobs/123")

    return recorder


class FakeTaskInstance:
    stats_tags: dict = {}

    def xcom_push(self, key, value):
        recorded.setdefault("xcom", {})[key] = value


def launch_beam(*args, process_line_callback, **kwargs):
    """The launcher prints the job's id as Beam's Dataflow runner does; the operator reads it."""
    record("beam")(**kwargs)
    process_line_callback("Created job with id: [2026-12-01_10_00_00-42]")


params = {k: dag.params.get_param(k).resolve() for k in dag.params}
params.update(case["params"])
context = {"params": params, "run_id": case["run_id"], "ti": FakeTaskInstance()}

with (
    mock.patch.object(BeamHook, "start_python_pipeline", launch_beam),
    mock.patch.object(DataflowHook, "wait_for_done", record("dataflow_wait")),
    mock.patch("airflow.providers.google.cloud.links.dataflow.DataflowJobLink.persist"),
    mock.patch.object(CustomJobHook, "create_custom_job", record("vertex_create")),
    mock.patch.object(CustomJobHook, "wait_for_custom_job", record("vertex_wait")),
):
    task = dag.get_task("shard_images")
    task.render_template_fields(context)
    recorded["shard_images"] = task.execute(context)

    options = check_launcher_options("vertex", params["training_options"])
    project, region = options.pop("project"), options.pop("region")
    job = TrainingJob(data=case["shards"], output=case["train"], num_workers=params["num_workers"])
    custom_job = render_vertex_custom_job(
        job, display_name=f"imagepipe-{case['run_id']}", image=case["image"], **options
    )
    CustomJob(custom_job)  # the API's own message type rejects unknown fields and enum values
    submit_vertex(custom_job, project=project, region=region, context=context)
    recorded["vertex_create"]["custom_job"] = custom_job

print(json.dumps(recorded, default=str))
