import argparse
import os
import re

import pytest

import stageconfig
from beam_jobs.config import ShardConfig
from orchestration.beam_options import shard_job_options
from orchestration.params import (
    RUN_PARAMS,
    STAGE_PARAMS,
    RunConfig,
    check_run,
    dag_params,
    train_flags,
)
from stageconfig import ConfigError
from training.config import TrainConfig

PARAMS = dag_params(input_uri="in", output_root="out", model_root="models")
DEFAULTS = {name: fields["default"] for name, fields in PARAMS.items()}


@pytest.mark.parametrize("name", sorted(STAGE_PARAMS))
def test_each_stage_param_is_its_configs_definition(name):
    cls, field = STAGE_PARAMS[name]
    parser = argparse.ArgumentParser()
    stageconfig.add_arguments(parser, cls)
    cli_default = parser.get_default(field)
    expected = stageconfig.dag_param_fields(cls, field, default=PARAMS[name]["default"])
    for key in ("type", "minimum", "maximum", "exclusiveMinimum", "enum", "description"):
        assert PARAMS[name].get(key) == expected.get(key), key
    if name != "input_uri":  # required on the CLI; the DAG's default is the demo folder
        assert PARAMS[name]["default"] == cli_default


def test_every_param_has_a_section_title_and_description():
    for name, fields in PARAMS.items():
        assert fields["section"] in {"Data", "Model", "Training", "Publishing", "Cloud"}, name
        assert fields["title"] and fields["description"], name


def _roots(tmp_path) -> dict:
    return {
        "input_uri": str(tmp_path),
        "output_root": str(tmp_path / "out"),
        "model_root": "~/models",
    }


def test_the_default_run_passes_its_own_checks_and_builds_valid_stage_configs(tmp_path):
    check_run({**DEFAULTS, **_roots(tmp_path)})
    # Read by the job, not here.
    check_run(
        {**DEFAULTS, "input_uri": "gs://b/in", "output_root": "gs://b/o", "model_root": "gs://b/m"}
    )
    stageconfig.from_mapping(
        TrainConfig, {"data": "d", "output": "o", **train_flags(DEFAULTS)}, name="train"
    )
    ShardConfig(input="i", output="o", max_side=DEFAULTS["max_side"])


def test_a_text_field_left_empty_in_the_trigger_form_is_valid_and_means_the_default():
    """The form sends an empty text box as null and requires a value where the type excludes
    null: a Param whose default is "" must take null, or the form refuses its own defaults
    (the browser test saw the Trigger button disabled)."""
    from airflow.sdk import Param

    empty_by_default = [name for name, fields in PARAMS.items() if fields["default"] == ""]
    assert "input_service" in empty_by_default
    for name in empty_by_default:
        Param(**PARAMS[name]).resolve(value=None)  # raises ParamValidationError if refused
    flags = train_flags({**DEFAULTS, **dict.fromkeys(empty_by_default)})
    config = stageconfig.from_mapping(TrainConfig, {"data": "d", "output": "o", **flags}, name="t")
    assert config.input_service == ""


def test_each_run_param_is_the_run_configs_definition():
    for name in RUN_PARAMS:
        expected = stageconfig.dag_param_fields(RunConfig, name, default=PARAMS[name]["default"])
        assert {**expected, "title": name.replace("_", " ")} == PARAMS[name]
    roots = {"input_uri": "gs://b/i", "output_root": "gs://b/o", "model_root": "gs://b/m"}
    run = check_run({**DEFAULTS, **roots})
    assert run == RunConfig(output_root="gs://b/o", model_root="gs://b/m")
    assert stageconfig.flat(run) == {name: {**DEFAULTS, **roots}[name] for name in RUN_PARAMS}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_side": 32, "image_size": 64}, "max_side 32 is below image_size 64"),
        ({"input_uri": "/no/such/images"}, "input_uri /no/such/images does not exist on this"),
        ({"input_uri": "file:///no/such/list.csv"}, "input_uri /no/such/list.csv does not"),
        ({"output_root": "out"}, "output_root 'out' is a relative path, which would be taken"),
        ({"model_root": "./models"}, "model_root './models' is a relative path"),
        ({"input_uri": "images"}, "input_uri 'images' is a relative path"),
        ({"model_name": "../up"}, "model_name '../up' does not match"),
        ({"accuracy_gate": 1.5}, "accuracy_gate must be in [0, 1], got 1.5"),
        ({"training_launcher": "slurm"}, "training_launcher must be one of local, kubernetes"),
        ({"training_options": "gpus=2"}, "training_options must be a JSON object"),
        ({"reuse_training": "yes"}, "reuse_training must be true or false"),
        ({"freeze_epochs": 2}, "freeze_epochs needs warm_start"),
        ({"freeze_epochs": 5, "epochs": 4, "warm_start": "latest"}, "more than epochs 4"),
    ],
)
def test_rules_between_stages_are_checked_before_any_stage(change, message, tmp_path):
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_run({**DEFAULTS, **_roots(tmp_path), **change})


@pytest.mark.parametrize("spelling", ["max_side", "max-side", "--max-side", "min_shards", "runner"])
def test_beam_options_cannot_override_a_parameter_the_run_sets(spelling):
    params = {**DEFAULTS, "beam_options": {spelling: 1}}
    with pytest.raises(ValueError, match="may not set"):
        shard_job_options(params, "shards")


def test_beam_options_may_add_job_flags_the_dag_does_not_set():
    params = {**DEFAULTS, "beam_options": {"compression": "gzip", "project": "p"}}
    options = shard_job_options(params, "shards")
    assert options["compression"] == "gzip" and options["max-side"] == DEFAULTS["max_side"]


def test_warm_start_latest_is_the_served_model_of_this_runs_name(tmp_path):
    roots = _roots(tmp_path)
    assert "init_from" not in train_flags({**DEFAULTS, **roots, "warm_start": None})
    check_run({**DEFAULTS, **roots, "warm_start": None})  # the form's empty box
    flags = train_flags({**DEFAULTS, **roots, "warm_start": "latest", "model_name": "cats"})
    assert flags["init_from"] == os.path.expanduser("~/models/cats")
    flags = train_flags({**DEFAULTS, **roots, "warm_start": "file:///runs/r1/train/model"})
    assert flags["init_from"] == "/runs/r1/train/model"
