"""A run folder read back through its one reader: what 'finished' means, one error rule."""

import json

import pytest

from runspec.layout import CONFIG, EVALUATION, METRICS, MODEL, SAVED_MODEL
from runspec.record import RunFolderError, RunRecord, metrics_document, read_json


def _run(tmp_path, *, steps=10, last_step=10, model=True, evaluation=None):
    (tmp_path / CONFIG).write_text(json.dumps({"total_steps": steps, "num_workers": 2}))
    epochs = [{"epoch": 1, "step": last_step // 2}, {"epoch": 2, "step": last_step}]
    document = metrics_document(epochs, resumed_from_step=5, input_diagnosis={"advice": "x"})
    (tmp_path / METRICS).write_text(json.dumps(document))
    if model:
        (tmp_path / MODEL).mkdir()
        (tmp_path / MODEL / SAVED_MODEL).write_bytes(b"pb")
    if evaluation is not None:
        (tmp_path / EVALUATION).write_text(json.dumps(evaluation))
    return RunRecord.read(str(tmp_path))


def test_a_run_is_finished_when_trained_to_its_last_step_and_exported(tmp_path):
    record = _run(tmp_path, evaluation={"accuracy": 0.9})
    assert record.finished
    assert record.training_result() == {
        "model_dir": str(tmp_path / MODEL),
        "val_accuracy": None,
        "train_loss": None,
        "steps": 10,
        "resumed_from_step": 5,
    }
    assert record.input_diagnosis == {"advice": "x"}
    assert record.evaluation == {"accuracy": 0.9}


@pytest.mark.parametrize(
    "kwargs", [{"last_step": 8}, {"model": False}, {"steps": 0, "last_step": 0}], ids=str
)
def test_a_run_short_of_its_steps_or_its_model_is_not_finished(tmp_path, kwargs):
    assert not _run(tmp_path, **kwargs).finished


def test_a_folder_without_config_is_no_run(tmp_path):
    assert RunRecord.read(str(tmp_path)) is None


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_a_file_that_is_there_but_unreadable_is_an_error_naming_it(tmp_path, content):
    path = tmp_path / CONFIG
    path.write_text(content)
    with pytest.raises(RunFolderError, match=str(path)):
        read_json(str(path))
    with pytest.raises(RunFolderError):
        RunRecord.read(str(tmp_path))


def test_a_missing_file_is_none(tmp_path):
    assert read_json(str(tmp_path / "absent.json")) is None
