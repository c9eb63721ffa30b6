"""The pipeline's run parameters, as the DAG's Params and as checks run before any stage.

A stage parameter (max_side, epochs, ...) is defined once, in its stage's
config (`beam_jobs/config.py`, `training/config.py`); its Param here is derived
from that definition. Only run-level parameters (where outputs go, how many
workers, the launcher) are defined in this module. Rules that span stages are
checked by `check_run()` before the first stage starts, instead of deep inside
the training workers after sharding has run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from beam_jobs.config import ShardConfig
from orchestration.launchers import LAUNCHERS
from orchestration.publish import MODEL_NAME_PATTERN
from stageconfig import ConfigError, dag_param_fields, user_path
from training.config import LaunchConfig, TrainConfig

# DAG Param name -> (stage config, field). Param names are the DAG's public API.
STAGE_PARAMS: dict[str, tuple[type, str]] = {
    "input_uri": (ShardConfig, "input"),
    "max_side": (ShardConfig, "max_side"),
    "max_error_fraction": (ShardConfig, "max_error_fraction"),
    "force_reshard": (ShardConfig, "force_reshard"),
    "architecture": (TrainConfig, "architecture"),
    "image_size": (TrainConfig, "image_size"),
    "epochs": (TrainConfig, "epochs"),
    "per_replica_batch_size": (TrainConfig, "per_replica_batch_size"),
    "learning_rate": (TrainConfig, "learning_rate"),
    "input_service": (TrainConfig, "input_service"),
    "num_workers": (LaunchConfig, "num_workers"),
}
TRAIN_FLAGS = tuple(name for name, (cls, _) in STAGE_PARAMS.items() if cls is TrainConfig)

BEAM_RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner")


def dag_params(*, input_uri: str, output_root: str, model_root: str) -> dict[str, dict]:
    """Keyword arguments of each Param (`Param(**kwargs)`), in trigger-form order."""

    def stage(name: str, **schema: Any) -> dict:
        cls, field = STAGE_PARAMS[name]
        fields = dag_param_fields(
            cls, field, **({"default": schema.pop("default")} if "default" in schema else {})
        )
        return {**fields, "title": name.replace("_", " "), **schema}

    return {
        "input_uri": stage("input_uri", default=input_uri, minLength=1),
        "output_root": {
            "default": output_root,
            "type": "string",
            "minLength": 1,
            "title": "output root",
            "section": "Data",
            "description": "Each run writes under <output_root>/runs/<run_id>/.",
        },
        "max_side": stage("max_side"),
        "max_error_fraction": stage("max_error_fraction"),
        "force_reshard": stage("force_reshard", section="Data"),
        "architecture": stage("architecture"),
        "image_size": stage("image_size"),
        "epochs": stage("epochs"),
        "per_replica_batch_size": stage("per_replica_batch_size"),
        "learning_rate": stage("learning_rate"),
        "input_service": stage("input_service"),
        "num_workers": stage("num_workers"),
        "training_launcher": {
            "default": "local",
            "type": "string",
            "enum": list(LAUNCHERS),
            "title": "training launcher",
            "section": "Cloud",
            "description": "local: N processes here; kubernetes: N pods; vertex: a Vertex AI "
            "CustomJob (needs gs:// paths).",
        },
        "training_options": {
            "default": {},
            "type": "object",
            "title": "training options",
            "section": "Cloud",
            "description": 'Launcher settings, e.g. kubernetes {"namespace": "ml", '
            '"gpus_per_worker": 1}; vertex {"project": "p", "region": "europe-west4", '
            '"machine_type": "g2-standard-8", "accelerator_type": "NVIDIA_L4", '
            '"accelerator_count": 1}.',
        },
        "beam_runner": {
            "default": "DirectRunner",
            "type": "string",
            "enum": list(BEAM_RUNNERS),
            "title": "beam runner",
            "section": "Cloud",
            "description": "Beam runner for the sharding job. DirectRunner runs it here on "
            "Beam's local FnApiRunner, in one process or one worker per core by input size.",
        },
        "beam_options": {
            "default": {},
            "type": "object",
            "title": "beam options",
            "section": "Cloud",
            "description": 'Extra Beam pipeline options, e.g. {"project": "p", '
            '"region": "europe-west1", "temp_location": "gs://b/tmp"}. They cannot set '
            "the job's own parameters (those are the fields above).",
        },
        "accuracy_gate": {
            "default": 0.6,
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "title": "accuracy gate",
            "section": "Publishing",
            "description": "Publish only if held-out accuracy is at least this. Range in [0, 1].",
        },
        "model_root": {
            "default": model_root,
            "type": "string",
            "minLength": 1,
            "title": "model root",
            "section": "Publishing",
            "description": "Published models: <model_root>/<model_name>/<version>/.",
        },
        "reuse_training": {
            "default": False,
            "type": "boolean",
            "title": "reuse training",
            "section": "Training",
            "description": "Skip training when an earlier run finished training on shards with "
            "the same content fingerprint, with the same parameters and workers: use its model.",
        },
        "require_approval": {
            "default": False,
            "type": "boolean",
            "title": "require approval",
            "section": "Publishing",
            "description": "Wait after evaluation for a person to approve publishing (the UI's "
            "Required Actions page); Reject skips publish. Off: publish when the gate passes.",
        },
        "model_name": {
            "default": "shapes",
            "type": "string",
            "pattern": MODEL_NAME_PATTERN,
            "title": "model name",
            "section": "Publishing",
            "description": "Name the model is published under (letters, digits, . _ -).",
        },
    }


def check_run(params: Mapping[str, Any]) -> None:
    """Rules between parameters of different stages, and local paths that cannot be right
    (relative, or an input that is not there); ConfigError with one line. The stages would
    find them later (the sharding job after Beam's start), and their tasks would be
    retried for a mistake no retry fixes."""
    paths = {
        name: user_path(str(params.get(name) or ""))
        for name in ("input_uri", "output_root", "model_root")
    }
    for name, path in paths.items():
        if path and "://" not in path and not os.path.isabs(path):
            raise ConfigError(
                f"{name} {path!r} is a relative path, which would be taken from wherever the "
                "Airflow worker runs: give an absolute path, ~/..., or gs://"
            )
    source = paths["input_uri"]
    if source and "://" not in source and not os.path.exists(source):
        raise ConfigError(
            f"input_uri {source} does not exist on this Airflow worker: give a folder of "
            "<label>/<image> files or a .csv/.jsonl manifest (gs:// for a bucket)"
        )
    max_side, image_size = params.get("max_side", 0), params["image_size"]
    if max_side and max_side < image_size:
        raise ConfigError(
            f"max_side {max_side} is below image_size {image_size}: the stored images would "
            f"be scaled up again for training; use max_side 0 or >= {image_size}"
        )


def train_flags(params: Mapping[str, Any]) -> dict[str, Any]:
    """The training CLI flags a run's Params set (the rest keep the config's defaults).

    An empty text field arrives as None from the trigger form: it means the default."""
    flags = {STAGE_PARAMS[name][1]: params.get(name) for name in TRAIN_FLAGS}
    if params.get("training_launcher", "local") != "local":
        flags["evaluate"] = True  # evaluated where it trained (orchestration/evaluation.py)
    return {flag: value for flag, value in flags.items() if value is not None}
