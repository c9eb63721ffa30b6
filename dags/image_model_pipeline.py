"""image_model_pipeline: raw images -> TFRecord shards -> multi-worker training -> blessed publish.

check_params -> shard_images -> validate_shards -> check_data -> train -> evaluate
    -> approve_publish -> publish

Wiring only: each task calls a library function in orchestration/, beam_jobs/ or training/.
Nothing heavy (TensorFlow, Beam) is imported at parse time. Every run writes
under <output_root>/runs/<run_id>/, so clearing one task reruns just that
stage against its upstream outputs.
"""

from __future__ import annotations

import datetime as dt
import os
import sys

from airflow.sdk import Asset, Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from orchestration import lineage
from orchestration.approval import PublishApprovalOperator
from orchestration.beam_options import dataflow_config, shard_job_options
from orchestration.dataflow_job import ShardImagesOperator
from orchestration.params import check_run, dag_params, train_flags
from orchestration.runs import RunPaths, shard_cache_dir
from orchestration.train_operator import TrainModelOperator
from stageconfig import ConfigError, user_path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEDULE = os.environ.get("IMAGEPIPE_SCHEDULE", "@daily") or None
DEFAULT_INPUT = os.environ.get("IMAGEPIPE_INPUT", os.path.join(REPO, "demo-output", "images"))
DEFAULT_OUTPUT_ROOT = os.environ.get(
    "IMAGEPIPE_OUTPUT_ROOT", os.path.join(REPO, "demo-output", "pipeline")
)
DEFAULT_MODEL_ROOT = os.environ.get(
    "IMAGEPIPE_MODEL_ROOT", os.path.join(REPO, "demo-output", "models")
)
TRAINER_IMAGE = os.environ.get("IMAGEPIPE_TRAINER_IMAGE", "imagepipe-trainer:latest")
# The tasks that run TensorFlow on the Airflow worker when the launcher is local (train,
# evaluate) can go to their own executor queue: docker/compose.yaml serves it with the one
# Airflow image that has TensorFlow; every other worker installs none.
TENSORFLOW_QUEUE = (
    {"queue": os.environ["IMAGEPIPE_TRAINING_QUEUE"]}
    if os.environ.get("IMAGEPIPE_TRAINING_QUEUE")
    else {}
)

# Consumers refer to these by name (Asset.ref(name="imagepipe_model")).
SHARDS = Asset(name="imagepipe_shards", uri="imagepipe://image_model_pipeline/shards")
MODEL = Asset(name="imagepipe_model", uri="imagepipe://image_model_pipeline/model")

# Stage parameters come from the stage configs; see orchestration/params.py.
PARAMS = {
    name: Param(**fields)
    for name, fields in dag_params(
        input_uri=DEFAULT_INPUT, output_root=DEFAULT_OUTPUT_ROOT, model_root=DEFAULT_MODEL_ROOT
    ).items()
}


def _root(params, name: str) -> str:
    """output_root or model_root as typed in the form: `~` and file:// are local paths."""
    return user_path(params[name])


def _paths(params, run_id) -> RunPaths:
    return RunPaths.for_run(_root(params, "output_root"), run_id)


def _note(context, **outcome) -> None:
    from orchestration.run_note import note_this_run

    note_this_run(context, **outcome)


def _shard_options(params, run_id) -> dict:
    cache_dir = shard_cache_dir(_root(params, "output_root"))
    return shard_job_options(params, _paths(params, run_id).shards, cache_dir)


@dag(
    dag_id="image_model_pipeline",
    schedule=SCHEDULE,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    # One run at a time by default (runs publish to the same model name); raise it with
    # IMAGEPIPE_MAX_ACTIVE_RUNS: runs keep to their own folders and publishing is locked.
    max_active_runs=int(os.environ.get("IMAGEPIPE_MAX_ACTIVE_RUNS", "1")),
    params=PARAMS,
    render_template_as_native_obj=True,  # pipeline_options renders to a dict
    user_defined_macros={
        "shard_options": _shard_options,
        "dataflow_config": dataflow_config,
        "run_paths": _paths,
        "root": _root,
        "train_flags": train_flags,
    },
    default_args={"retries": 0},
    tags=["imagepipe"],
    doc_md=__doc__,
)
def image_model_pipeline():
    @task(execution_timeout=dt.timedelta(minutes=5))
    def check_params() -> None:
        """Rules between stages' parameters, before any stage spends time."""
        try:
            check_run(get_current_context()["params"])
        except ConfigError as err:
            raise AirflowFailException(str(err)) from None

    shard_images = ShardImagesOperator(
        task_id="shard_images",
        py_file="beam_jobs.shard_images",
        py_options=["-m"],
        py_interpreter=sys.executable,
        runner="{{ params.beam_runner }}",
        pipeline_options="{{ shard_options(params, run_id) }}",
        dataflow_config="{{ dataflow_config(params, run_id) }}",
        retries=1,
        retry_delay=dt.timedelta(minutes=2),
        retry_exponential_backoff=True,
        execution_timeout=dt.timedelta(hours=6),
        outlets=[SHARDS],
    )

    @task(execution_timeout=dt.timedelta(minutes=30))
    def validate_shards() -> dict:
        from beam_jobs.validate import ShardValidationError
        from beam_jobs.validate import validate_shards as check
        from orchestration.launchers import replicas_per_worker
        from shardspec.folder import MIN_CLASSES
        from training.config import min_train_records

        context = get_current_context()
        params = context["params"]
        try:
            return check(
                _paths(params, context["run_id"]).shards,
                max_error_fraction=params["max_error_fraction"],
                min_train_shards=params["num_workers"],
                # The trainer's own rule: one global batch of the replicas it will have.
                min_train_records=min_train_records(
                    params["per_replica_batch_size"],
                    params["num_workers"]
                    * replicas_per_worker(params["training_launcher"], params["training_options"]),
                ),
                min_classes=MIN_CLASSES,
                verify_records=False,  # metadata and sizes; the job hashed what it wrote
            )
        except ShardValidationError as err:
            raise AirflowFailException(str(err)) from None  # retrying cannot fix the data

    @task(execution_timeout=dt.timedelta(minutes=15))
    def check_data() -> dict:
        """This run's data against what the serving model was trained on (data_checks)."""
        from datacheck.run import DataCheckError
        from orchestration.check_data import DataChecksFailed, check_data_task

        context = get_current_context()
        params = context["params"]
        try:
            return check_data_task(params, _paths(params, context["run_id"]))
        except DataChecksFailed as err:
            _note(context, not_published=str(err))
            raise AirflowFailException(str(err)) from None  # the data needs a person
        except DataCheckError as err:
            raise AirflowFailException(str(err)) from None

    train = TrainModelOperator(
        task_id="train",
        shards_dir="{{ ti.xcom_pull(task_ids='validate_shards')['shards_dir'] }}",
        train_dir="{{ run_paths(params, run_id).train }}",
        output_root="{{ root(params, 'output_root') }}",
        num_workers="{{ params.num_workers }}",
        train_flags="{{ train_flags(params) }}",
        launcher="{{ params.training_launcher }}",
        launcher_options="{{ params.training_options }}",
        reuse_training="{{ params.reuse_training }}",
        job_name="imagepipe-{{ run_id }}",
        image=TRAINER_IMAGE,
        retries=2,
        retry_delay=dt.timedelta(minutes=1),
        retry_exponential_backoff=True,
        execution_timeout=dt.timedelta(hours=24),
        **TENSORFLOW_QUEUE,
    )

    @task(retries=1, execution_timeout=dt.timedelta(hours=2), **TENSORFLOW_QUEUE)
    def evaluate(trained: dict) -> dict:
        from orchestration.evaluation import evaluate_and_bless
        from training.gate import AccuracyGateFailed

        context = get_current_context()
        params, paths = context["params"], _paths(context["params"], context["run_id"])
        try:
            return evaluate_and_bless(params, model_dir=trained["model_dir"], paths=paths)
        except AccuracyGateFailed as err:
            _note(context, not_published=str(err))
            raise AirflowFailException(str(err)) from None

    @task(
        retries=2,
        retry_delay=dt.timedelta(seconds=30),
        outlets=[MODEL],
        execution_timeout=dt.timedelta(minutes=30),
    )
    def publish(evaluated: dict) -> dict:
        from orchestration.publish import NotBlessed, PublishError, publish_run

        context = get_current_context()
        params = context["params"]
        try:
            published = publish_run(
                evaluated,
                model_root=_root(params, "model_root"),
                model_name=params["model_name"],
                run_id=context["run_id"],
            )
        except NotBlessed as err:
            _note(context, evaluated=evaluated, not_published=str(err))
            if params["fail_when_not_blessed"]:
                raise AirflowFailException(f"not published: {err}") from None
            raise AirflowSkipException(f"not published: {err}") from None
        except PublishError as err:
            raise AirflowFailException(str(err)) from None
        lineage.record(inputs=[evaluated["model_dir"]], outputs=[published["path"]])
        context["outlet_events"][MODEL].extra = published  # the Assets page, downstream DAGs
        print(
            f"published model {params['model_name']} version {published['version']} at "
            f"{published['path']} (accuracy {evaluated['accuracy']:.3f})"
        )
        _note(context, evaluated=evaluated, published=published)
        return published

    validated = validate_shards()
    check_params() >> shard_images >> validated
    validated >> check_data() >> train
    evaluated = evaluate(train.output)
    approve = PublishApprovalOperator(
        task_id="approve_publish",
        subject="Publish {{ params.model_name }} from run {{ run_id }}?",
        body="Held-out accuracy {{ ti.xcom_pull(task_ids='evaluate')['accuracy'] | round(3) }} "
        "({{ ti.xcom_pull(task_ids='evaluate')['per_class_accuracy'] }}). Reject skips publish.",
    )
    evaluated >> approve >> publish(evaluated)


image_model_pipeline()
