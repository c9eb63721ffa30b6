"""How the orchestrator starts a multi-worker training job: one module per launcher.

`local` runs `python -m training.launch` (N processes on this machine),
`kubernetes` one Job per worker behind a headless Service, `vertex` a Vertex AI
CustomJob. Each module holds its typed options (`Options`, a stageconfig
dataclass checked from the DAG's `training_options`), its rendering and its
submission; all run the same `python -m training.train` with the same flags, so
the launcher is configuration. Here: the job every launcher runs, and what a
trainer's exit code means for the task that launched it (stageconfig/exit_codes.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from stageconfig import ConfigError, exit_codes, from_mapping
from training.config import parse_input_service

LAUNCHERS = ("local", "kubernetes", "vertex")
TRAIN_COMMAND = ["python", "-m", "training.train"]
INPUT_SERVICE_COMMAND = ["python", "-m", "training.input_service"]
INPUT_SERVICE_PORT = 5050


class LauncherConfigError(ConfigError):
    """Settings that do not fit the chosen launcher; a user mistake, not a crash."""


class TrainingFailed(RuntimeError):
    """The trainers failed (a crash: retry). `code` is their exit code, when one is known."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


class TrainingRefused(TrainingFailed):
    """The trainers exited 2: bad parameters or unusable shards; a retry repeats it."""


class TrainingPreempted(TrainingFailed):
    """Every trainer saved a checkpoint and exited 75: start again, not a failure."""


def failure(code: int, message: str) -> TrainingFailed:
    """The exception for trainers that exited `code`."""
    if code == exit_codes.BAD_INPUT:
        return TrainingRefused(message, code)
    if code == exit_codes.PREEMPTED:
        return TrainingPreempted(message, code)
    return TrainingFailed(message, code)


@dataclass(frozen=True)
class TrainingJob:
    data: str
    output: str
    num_workers: int = 2
    train_flags: dict = field(default_factory=dict)

    def train_args(self) -> list[str]:
        args = ["--data", self.data, "--output", self.output]
        for key, value in sorted(self.train_flags.items()):
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                if value:
                    args.append(flag)
            elif value is not None:
                args.extend([flag, str(value)])
        return args

    @property
    def local_service_workers(self) -> int:
        """N of `input_service: local:N` (0 otherwise): the service the launcher starts."""
        return parse_input_service(str(self.train_flags.get("input_service") or ""))[1]

    def with_input_service(self, address: str) -> TrainingJob:
        """The same job, its trainers pointed at a tf.data service the launcher started."""
        return replace(self, train_flags={**self.train_flags, "input_service": address})


def dns_name(text: str) -> str:
    """`text` as a DNS label (Kubernetes object names, Vertex display names)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:40].rstrip("-") or "train"


def launcher_options(launcher: str, options: dict):
    """The launcher's typed options from the DAG's `training_options` (one-line errors)."""
    if launcher not in LAUNCHERS:
        raise LauncherConfigError(f"unknown training launcher {launcher!r}; one of {LAUNCHERS}")
    module = _module(launcher)
    try:
        return from_mapping(module.Options, options, name="training_options")
    except ConfigError as err:
        raise LauncherConfigError(f"{err} for the {launcher!r} launcher") from None


def replicas_per_worker(launcher: str, options: dict) -> int:
    """Replicas each worker trains (a GPU each, else one): the global batch is the
    per-replica batch times the workers times this. 1 when the options are not valid
    (the train task refuses them in one line)."""
    try:
        typed = launcher_options(launcher, options)
    except LauncherConfigError:
        return 1
    gpus = getattr(typed, "gpus_per_worker", 0) or getattr(typed, "accelerator_count", 0)
    return max(1, gpus)


def _module(launcher: str):
    import importlib

    return importlib.import_module(f"orchestration.launchers.{launcher}")
