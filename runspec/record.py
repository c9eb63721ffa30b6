"""A training run folder read back: one reader, one rule for missing and broken files.

A file that is not there is `None` (a run in progress has no model yet); a file
that is there but is not a JSON object raises `RunFolderError` naming it, since
guessing would let a torn write pass for a finished run.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field

from runspec.layout import CONFIG, EVALUATION, METRICS, MODEL, SAVED_MODEL


class RunFolderError(ValueError):
    """A run folder's file is there but unreadable; the message names it."""


def join(directory: str, *names: str) -> str:
    return posixpath.join(directory.rstrip("/"), *names)


def read_json(path: str) -> dict | None:
    """The JSON object at `path` (local or any fsspec URL); None when it does not exist."""
    import fsspec

    try:
        with fsspec.open(path) as handle:
            value = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise RunFolderError(f"{path} cannot be read: {err}") from None
    if not isinstance(value, dict):
        raise RunFolderError(f"{path} does not hold a JSON object")
    return value


def exists(path: str) -> bool:
    import fsspec

    fs, local = fsspec.core.url_to_fs(path)
    return fs.exists(local)


def metrics_document(
    epochs: list[dict], *, resumed_from_step: int, input_diagnosis: dict | None
) -> dict:
    """What the trainer writes to METRICS after every epoch."""
    return {
        "epochs": epochs,
        "resumed_from_step": resumed_from_step,
        "input_diagnosis": input_diagnosis,
    }


@dataclass(frozen=True)
class RunRecord:
    """What a run folder says: its parameters, its epochs so far, and its outputs."""

    directory: str
    config: dict
    epochs: list[dict] = field(default_factory=list)
    resumed_from_step: int = 0
    input_diagnosis: dict = field(default_factory=dict)
    has_model: bool = False
    evaluation: dict | None = None

    @classmethod
    def read(cls, directory: str) -> RunRecord | None:
        """The run in `directory`; None when it holds no CONFIG (not a run, or not started)."""
        config = read_json(join(directory, CONFIG))
        if config is None:
            return None
        metrics = read_json(join(directory, METRICS)) or {}
        return cls(
            directory=directory.rstrip("/"),
            config=config,
            epochs=list(metrics.get("epochs") or []),
            resumed_from_step=int(metrics.get("resumed_from_step") or 0),
            input_diagnosis=dict(metrics.get("input_diagnosis") or {}),
            has_model=exists(join(directory, MODEL, SAVED_MODEL)),
            evaluation=read_json(join(directory, EVALUATION)),
        )

    @property
    def model_dir(self) -> str:
        return join(self.directory, MODEL)

    @property
    def total_steps(self) -> int | None:
        return self.config.get("total_steps")

    @property
    def final_metrics(self) -> dict:
        return self.epochs[-1] if self.epochs else {}

    @property
    def finished(self) -> bool:
        """Trained to its last step and exported: the model is the run's final one."""
        steps = self.total_steps
        return bool(steps) and self.final_metrics.get("step") == steps and self.has_model

    def training_result(self) -> dict:
        """The model's path and final metrics: what goes through XCom."""
        final = self.final_metrics
        return {
            "model_dir": self.model_dir,
            "val_accuracy": final.get("val_accuracy"),
            "train_loss": final.get("train_loss"),
            "steps": final.get("step"),
            "resumed_from_step": self.resumed_from_step,
        }


def read_training_result(directory: str) -> dict:
    """The result of the run in `directory` (what the train task returns), or
    RunFolderError when no run with epochs is there."""
    record = RunRecord.read(directory)
    if record is None or not record.epochs:
        raise RunFolderError(f"{directory} holds no training run with finished epochs")
    return record.training_result()
