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
from airflow.sdk.exceptions import TaskDeferred
from google.cloud.aiplatform_v1.types import CustomJob

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

    def xcom_pull(self, task_ids):
        assert task_ids == "validate_shards"
        return {"shards_dir": case["shards"]}


def launch_beam(*args, process_line_callback, **kwargs):
    """The launcher command as it would start (the hook's last step before the process);
    it prints the job's id as Beam's Dataflow runner does, and the operator reads it."""
    record("beam")(**kwargs)
    process_line_callback("Created job with id: [2026-12-01_10_00_00-42]")


def execute(task, context):
    """As the task runner runs it: when it defers (the wait in the triggerer), the trigger
    is recorded as it would be stored, and the task resumes with the trigger's success."""
    try:
        return task.execute(context)
    except TaskDeferred as deferred:
        recorded.setdefault("deferred", {})[task.task_id] = deferred.trigger.serialize()
        resume = getattr(task, deferred.method_name)
        event = {"status": "success", "message": "the job succeeded"}
        return resume(context, event, **(deferred.kwargs or {}))


params = {k: dag.params.get_param(k).resolve() for k in dag.params}
params.update(case["params"])
context = {"params": params, "run_id": case["run_id"], "ti": FakeTaskInstance()}

with (
    mock.patch.object(BeamHook, "_start_pipeline", launch_beam),
    mock.patch.object(DataflowHook, "wait_for_done", record("dataflow_wait")),
    mock.patch("airflow.providers.google.cloud.links.dataflow.DataflowJobLink.persist"),
    mock.patch.object(CustomJobHook, "create_custom_job", record("vertex_create")),
    mock.patch.object(CustomJobHook, "wait_for_custom_job", record("vertex_wait")),
):
    task = dag.get_task("shard_images")
    task.render_template_fields(context)
    recorded["shard_images"] = execute(task, context)

    # The DAG's own train task, as the task runner would run it: the run folder on gs:// is
    # the only other edge (a stale-run check before, the run's result after).
    train = dag.get_task("train")
    train.render_template_fields(context)
    train.image = case["image"]
    with (
        mock.patch("orchestration.reuse.discard_stale_training", return_value=""),
        mock.patch("orchestration.train_operator.read_training_result",
                   return_value={"model_dir": case["train"] + "/model"}),
    ):  # fmt: skip
        recorded["train"] = execute(train, context)
    CustomJob(recorded["vertex_create"]["custom_job"])  # the API's own message type accepts it

print(json.dumps(recorded, default=str))
