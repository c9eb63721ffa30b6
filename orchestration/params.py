"""The pipeline's run parameters, as the DAG's Params and as checks run before any stage.

A stage parameter (max_side, epochs, ...) is defined once, in its stage's
config (`beam_jobs/config.py`, `training/config.py`); its Param here is derived
from that definition. Only run-level parameters (where outputs go, how many
workers, the launcher) are defined in this module, as `RunConfig`. Rules that span stages are
checked by `check_run()` before the first stage starts, instead of deep inside
the training workers after sharding has run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from beam_jobs.config import ShardConfig
from datacheck.config import DataCheckConfig
from orchestration.evaluation import model_home
from orchestration.launchers import LAUNCHERS
from orchestration.publish import MODEL_NAME_PATTERN
from stageconfig import ConfigError, check, dag_param_fields, from_mapping, param, user_path
from training.config import LaunchConfig, TrainConfig
from training.gate import MIN_CLASS_EXAMPLES, BlessingRules

# DAG Param name -> (stage config, field). Param names are the DAG's public API.
STAGE_PARAMS: dict[str, tuple[type, str]] = {
    "input_uri": (ShardConfig, "input"),
    "max_side": (ShardConfig, "max_side"),
    "max_error_fraction": (ShardConfig, "max_error_fraction"),
    "force_reshard": (ShardConfig, "force_reshard"),
    "near_duplicate_distance": (ShardConfig, "near_duplicate_distance"),
    "leak_free_splits": (ShardConfig, "leak_free_splits"),
    "data_checks": (DataCheckConfig, "data_checks"),
    "max_label_shift": (DataCheckConfig, "max_label_shift"),
    "max_size_drift": (DataCheckConfig, "max_size_drift"),
    "max_error_share_rise": (DataCheckConfig, "max_error_share_rise"),
    "max_image_drop": (DataCheckConfig, "max_image_drop"),
    "architecture": (TrainConfig, "architecture"),
    "image_size": (TrainConfig, "image_size"),
    "epochs": (TrainConfig, "epochs"),
    "per_replica_batch_size": (TrainConfig, "per_replica_batch_size"),
    "learning_rate": (TrainConfig, "learning_rate"),
    "input_service": (TrainConfig, "input_service"),
    "freeze_epochs": (TrainConfig, "freeze_epochs"),
    "num_workers": (LaunchConfig, "num_workers"),
}
DATA_CHECK_PARAMS = tuple(n for n, (cls, _) in STAGE_PARAMS.items() if cls is DataCheckConfig)
TRAIN_FLAGS = tuple(name for name, (cls, _) in STAGE_PARAMS.items() if cls is TrainConfig)

BEAM_RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner")


@dataclass(frozen=True, kw_only=True)  # in trigger-form order, required or not
class RunConfig:
    """The run-level Params, defined once like a stage's: where a run's outputs go, how
    its stages are launched, what publishing asks. `check_run` builds it from a run's
    Params, so a value outside its definition stops the run before any stage starts."""

    output_root: str = param(
        help="Each run writes under <output_root>/runs/<run_id>/", section="Data"
    )
    training_launcher: str = param(
        "local",
        choices=tuple(LAUNCHERS),
        help="local: N processes here; kubernetes: N pods; vertex: a Vertex AI CustomJob "
        "(needs gs:// paths)",
        section="Cloud",
    )
    training_options: dict = param(
        default_factory=dict,
        help='Launcher settings, e.g. kubernetes {"namespace": "ml", "gpus_per_worker": 1}; '
        'vertex {"project": "p", "region": "europe-west4", "machine_type": "g2-standard-8", '
        '"accelerator_type": "NVIDIA_L4", "accelerator_count": 1}',
        section="Cloud",
    )
    beam_runner: str = param(
        "DirectRunner",
        choices=BEAM_RUNNERS,
        help="Beam runner for the sharding job. DirectRunner runs it here on Beam's local "
        "FnApiRunner, in one process or one worker per core by input size",
        section="Cloud",
    )
    beam_options: dict = param(
        default_factory=dict,
        help='Extra Beam pipeline options, e.g. {"project": "p", "region": "europe-west1", '
        '"temp_location": "gs://b/tmp"}. They cannot set the job\'s own parameters (those '
        "are the fields above)",
        section="Cloud",
    )
    accuracy_gate: float = param(
        0.6,
        minimum=0,
        maximum=1,
        help="Publish only if held-out accuracy is at least this",
        section="Publishing",
    )
    max_regression: float = param(
        BlessingRules.max_regression,
        minimum=0,
        maximum=1,
        help="Publish only if held-out accuracy is at most this below the serving model's "
        "(LATEST of model_name), scored on the same images in the same pass",
        section="Publishing",
    )
    max_class_regression: float = param(
        BlessingRules.max_class_regression,
        minimum=0,
        maximum=1,
        help="Publish only if no class's F1 falls more than this below the serving model's "
        f"(classes with fewer than {MIN_CLASS_EXAMPLES} held-out images are not compared)",
        section="Publishing",
    )
    fail_when_not_blessed: bool = param(
        False,
        help="Fail the run when the candidate is worse than the serving model (off: publish "
        "is skipped with the reason, the run succeeds and the serving model stays)",
        section="Publishing",
    )
    model_root: str = param(
        help="Published models: <model_root>/<model_name>/<version>/", section="Publishing"
    )
    warm_start: str | None = param(
        "",
        help="Start training from earlier weights: latest (the model published as "
        "model_name), a path to a run's model or train folder or a published version, or "
        "imagenet (pretrained backbones); empty: from scratch",
        section="Training",
    )
    reuse_training: bool = param(
        False,
        help="Skip training when an earlier run finished training on shards with the same "
        "content fingerprint, with the same parameters and workers: use its model",
        section="Training",
    )
    require_approval: bool = param(
        False,
        help="Wait after evaluation for a person to approve publishing (the UI's Required "
        "Actions page); Reject skips publish. Off: publish when the gate passes",
        section="Publishing",
    )
    model_name: str = param(
        "shapes",
        pattern=MODEL_NAME_PATTERN,
        help="Name the model is published under (letters, digits, . _ -)",
        section="Publishing",
    )

    def __post_init__(self) -> None:
        check(self)
        for name in ("output_root", "model_root"):
            _check_path(name, getattr(self, name))


# The run-level Params the trigger form shows between the stages' and model_root.
RUN_PARAMS_AFTER_STAGES = (
    "training_launcher",
    "training_options",
    "beam_runner",
    "beam_options",
    "accuracy_gate",
    "max_regression",
    "max_class_regression",
    "fail_when_not_blessed",
)


def _check_path(name: str, value: str) -> str:
    """`value` as a path or URI, or ConfigError if it is empty or relative: taken from
    wherever the Airflow worker runs, it would land somewhere no one looks."""
    path = user_path(str(value or ""))
    if not path:
        raise ConfigError(f"{name} is required")
    if "://" not in path and not os.path.isabs(path):
        raise ConfigError(
            f"{name} {path!r} is a relative path, which would be taken from wherever the "
            "Airflow worker runs: give an absolute path, ~/..., or gs://"
        )
    return path


RUN_PARAMS = tuple(field.name for field in fields(RunConfig))


def dag_params(*, input_uri: str, output_root: str, model_root: str) -> dict[str, dict]:
    """Keyword arguments of each Param (`Param(**kwargs)`), in trigger-form order."""

    def stage(name: str, **schema: Any) -> dict:
        cls, field = STAGE_PARAMS[name]
        fields = dag_param_fields(
            cls, field, **({"default": schema.pop("default")} if "default" in schema else {})
        )
        return {**fields, "title": name.replace("_", " "), **schema}

    def run(name: str, **schema: Any) -> dict:
        return {**dag_param_fields(RunConfig, name, **schema), "title": name.replace("_", " ")}

    return {
        "input_uri": stage("input_uri", default=input_uri, minLength=1),
        "output_root": run("output_root", default=output_root),
        "max_side": stage("max_side"),
        "max_error_fraction": stage("max_error_fraction"),
        "force_reshard": stage("force_reshard", section="Data"),
        "near_duplicate_distance": stage("near_duplicate_distance"),
        "leak_free_splits": stage("leak_free_splits"),
        **{name: stage(name) for name in DATA_CHECK_PARAMS},
        "architecture": stage("architecture"),
        "image_size": stage("image_size"),
        "epochs": stage("epochs"),
        "per_replica_batch_size": stage("per_replica_batch_size"),
        "learning_rate": stage("learning_rate"),
        "input_service": stage("input_service"),
        "num_workers": stage("num_workers"),
        **{name: run(name) for name in RUN_PARAMS_AFTER_STAGES},
        "model_root": run("model_root", default=model_root),
        "warm_start": run("warm_start"),
        "freeze_epochs": stage("freeze_epochs", section="Training"),
        **{name: run(name) for name in ("reuse_training", "require_approval", "model_name")},
    }


def check_run(params: Mapping[str, Any]) -> RunConfig:
    """The run's RunConfig, after the rules between parameters of different stages and
    the input path (ConfigError with one line). The stages would find them later (the
    sharding job after Beam's start), and their tasks would be retried for a mistake no
    retry fixes."""
    run = from_mapping(
        RunConfig, {name: params[name] for name in RUN_PARAMS if name in params}, name=""
    )
    source = _check_path("input_uri", params.get("input_uri"))
    if "://" not in source and not os.path.exists(source):
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
    freeze = params.get("freeze_epochs") or 0
    if freeze and not run.warm_start:
        raise ConfigError(
            "freeze_epochs needs warm_start: a frozen backbone that starts random learns "
            "nothing (warm_start latest, a model's path or imagenet)"
        )
    if freeze > params["epochs"]:
        raise ConfigError(f"freeze_epochs {freeze} is more than epochs {params['epochs']}")
    return run


def train_flags(params: Mapping[str, Any]) -> dict[str, Any]:
    """The training CLI flags a run's Params set (the rest keep the config's defaults).

    An empty text field arrives as None from the trigger form: it means the default."""
    flags = {STAGE_PARAMS[name][1]: params.get(name) for name in TRAIN_FLAGS}
    if warm := params.get("warm_start"):
        flags["init_from"] = model_home(params) if warm == "latest" else user_path(warm)
    if params.get("training_launcher", "local") != "local":
        # Evaluated where it trained, beside the serving model (orchestration/evaluation.py).
        flags["evaluate"] = True
        flags["baseline"] = model_home(params)
    return {flag: value for flag, value in flags.items() if value is not None}
