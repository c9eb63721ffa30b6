"""The training stage's one typed config, built from CLI flags and validated there."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import stageconfig
from runspec.layout import CHECKPOINTS, METRICS, MODEL, TENSORBOARD
from stageconfig import ConfigError, param
from training.worker_env import PREEMPTED_EXIT_CODE

__all__ = [
    "ARCHITECTURES",
    "BATCH_NORM_MODES",
    "FINE_TUNE_LR_FACTOR",
    "REFERENCE_BATCH",
    "WARMUP_SHARE",
    "ConfigError",
    "DataConfig",
    "LaunchConfig",
    "TrainConfig",
    "add_arguments",
    "config_from_args",
    "parse_input_service",
    "resume_conflicts",
    "scaled_learning_rate",
]


# The model code (training/model.py) imports TensorFlow; the names live here so the
# DAG can offer them at parse time.
ARCHITECTURES = ("small_cnn", "mobilenet_v3_small", "resnet50")
# Where BatchNorm takes its batch statistics: each replica's own batch, or the global batch.
BATCH_NORM_MODES = ("local", "sync")

# The global batch --learning-rate is given for; the recipe was tuned at it.
REFERENCE_BATCH = 32
# Share of the run's steps over which the learning rate rises linearly to its peak.
WARMUP_SHARE = 0.05
# After --freeze-epochs the whole model trains at this share of the schedule's rate: the
# pretrained backbone is adjusted, not overwritten (Keras' transfer-learning guide).
FINE_TUNE_LR_FACTOR = 0.1


def scaled_learning_rate(learning_rate: float, global_batch: int) -> float:
    """The square-root scaling rule for Adam (Malladi et al., NeurIPS 2022): the gradient
    noise shrinks with the square root of the batch, so a linear rule, right for SGD,
    would overshoot when many workers make the global batch large."""
    return learning_rate * (global_batch / REFERENCE_BATCH) ** 0.5


# What a run's checkpoints depend on (its weights, optimizer state and input position): the
# TrainConfig fields tagged RESUME, and what the trainer records beside them in its
# config.json about the data and the cluster. A run resumes only with these unchanged;
# --epochs may change (the run goes on to the new end), as may how the input is served.
RESUME = "resume"
RESUME_RECORDED = ("shards_content", "num_classes", "num_workers")


def resume_conflicts(saved: dict, now: dict) -> list[str]:
    """Why a run folder's checkpoints cannot go on under `now`, as `key saved -> now`
    texts (empty: they can). `saved` is the run's config.json; a key it does not hold
    (written by an older trainer) is not compared."""
    return [
        f"{key} {saved[key]!r} -> {now[key]!r}"
        for key in resume_keys()
        if key in saved and saved[key] != now.get(key)
    ]


def resume_keys() -> tuple[str, ...]:
    return RESUME_RECORDED + stageconfig.tagged(TrainConfig, RESUME)


def min_train_records(per_replica_batch_size: int, replicas: int) -> int:
    """The fewest train records a run needs: one global batch (steps drop the remainder,
    so fewer gives an epoch of no step). The trainer and the DAG's pre-check both ask."""
    return per_replica_batch_size * replicas


CLUSTER_INPUT_SERVICE = "cluster"  # the TF_CONFIG cluster's `ps` task (Vertex AI's pool 2)


def parse_input_service(value: str) -> tuple[str, int]:
    """--input-service as ("", 0) off, ("", N) start N local workers, or (address, 0).

    The address may be CLUSTER_INPUT_SERVICE, resolved by the trainer from TF_CONFIG.
    """
    if not value:
        return "", 0
    if value == CLUSTER_INPUT_SERVICE:
        return value, 0
    if value.startswith("local:"):
        count = value.removeprefix("local:")
        if not count.isdigit() or not 1 <= int(count) <= 64:
            raise ConfigError(f"--input-service {value!r}: local:N needs N from 1 to 64")
        return "", int(count)
    host, _, port = value.removeprefix("grpc://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"--input-service {value!r}: use HOST:PORT, local:N, cluster or empty for off"
        )
    return f"{host}:{port}", 0


@dataclass(frozen=True)
class DataConfig:
    """What the input pipeline (`training.data.build_dataset`) takes of the trainer's
    config: the trainer nests it, and `python -m training.data` offers the same flags."""

    image_size: int = param(
        64,
        minimum=16,
        maximum=1024,
        help="Square model input size in pixels",
        section="Model",
        tags=(RESUME,),
    )
    cache: str = param(
        "auto",
        help='Cache decoded images: "auto" (in memory when this worker\'s decoded training '
        'images fit --cache-budget-mb; the log says which), "memory", a file path prefix, '
        'or "" for none',
        section="Training",
    )
    cache_budget_mb: int = param(
        1024,
        minimum=0,
        maximum=1 << 30,
        help="Memory a worker may spend on cached decoded images with --cache auto",
        section="Training",
    )
    shuffle_buffer: int = param(
        1024,
        minimum=1,
        maximum=1 << 30,
        help="Shuffle buffer in images",
        section="Training",
        tags=(RESUME,),
    )
    augment: bool = param(
        True,
        help="Random flip/crop/brightness augmentation (--no-augment disables it)",
        section="Training",
        tags=(RESUME,),
    )

    def __post_init__(self) -> None:
        stageconfig.check(self)


@dataclass(frozen=True)
class TrainConfig:
    data: str = param(help="Shard directory written by beam_jobs.shard_images", section="Data")
    output: str = param(
        help=f"Run directory: {CHECKPOINTS}/, {TENSORBOARD}/, {METRICS}, {MODEL}/ (SavedModel)",
        section="Training",
    )
    input: DataConfig = stageconfig.group(DataConfig)
    architecture: str = param(
        "small_cnn",
        choices=ARCHITECTURES,
        help="Model, trained from scratch (nothing is downloaded)",
        section="Model",
        tags=(RESUME,),
    )
    batch_norm: str = param(
        "local",
        choices=BATCH_NORM_MODES,
        help="BatchNorm batch statistics: local = each replica normalises over its own batch "
        "and the moving statistics are averaged over the replicas once per --steps-per-call "
        "(what data-parallel ImageNet training does at 32 or more images a replica; one "
        "collective a step, for the gradients); sync = over the global batch, one all-reduce "
        "per layer forward and one backward every step (for per-replica batches too small "
        "for stable statistics)",
        section="Model",
        tags=(RESUME,),
    )
    epochs: int = param(30, minimum=1, maximum=10000, help="Training epochs", section="Training")
    per_replica_batch_size: int = param(
        32,
        minimum=1,
        maximum=65536,
        help="Images per replica per step (a replica is a worker on CPU, a GPU on GPUs). The "
        "global batch is this times the replicas, so each worker's share of a step stays the "
        "same as workers are added",
        section="Training",
        tags=(RESUME,),
    )
    learning_rate: float = param(
        2e-3,
        minimum=0,
        exclusive_minimum=True,
        maximum=1,
        help=f"Peak Adam learning rate for a global batch of {REFERENCE_BATCH}; other global "
        "batches scale it by the square root of the ratio. Warmed up over the first 5% of "
        "the steps, then cosine-decayed to 0",
        section="Training",
        tags=(RESUME,),
    )
    checkpoint_every: int = param(
        50,
        minimum=1,
        maximum=1 << 30,
        help="Checkpoint every N steps, and at each epoch end",
        section="Training",
    )
    steps_per_call: int = param(
        10,
        minimum=1,
        maximum=1000,
        help="Training steps per call into the compiled graph: the host collects metrics "
        "once per call, not once per step. Checkpoints and epoch ends still fall on their "
        "exact steps",
        section="Training",
    )
    seed: int = param(
        0,
        minimum=0,
        maximum=2**31 - 1,
        help="Seed for shuffling and initialisation",
        section="Training",
        tags=(RESUME,),
    )
    mixed_precision: bool = param(
        False,
        help="float16 compute with loss scaling, on GPU (ignored with a warning on CPU)",
        section="Training",
        tags=(RESUME,),
    )
    jit_compile: bool = param(
        False,
        help="Compile each replica's training step with XLA (fuses the step's ops; "
        "helps most on GPUs)",
        section="Training",
    )
    cpu_devices: int = param(
        1,
        minimum=1,
        maximum=64,
        help="Split this worker's CPU into N logical devices and train one replica on each "
        "(MirroredStrategy; with several workers, N replicas a worker): the layout of a "
        "multi-GPU worker, for trying the multi-device path without GPUs. The global batch "
        "is --per-replica-batch-size x workers x N",
        section="Training",
        tags=(RESUME,),
    )
    steps_per_epoch: int = param(
        0,
        minimum=0,
        maximum=1 << 30,
        help="Steps per epoch; 0 = one pass over the training split",
        section="Training",
        tags=(RESUME,),
    )
    input_service: str = param(
        "",
        help="tf.data service for the training input: empty for off, HOST:PORT of a "
        "dispatcher (python -m training.input_service), local:N to start one with N "
        "workers beside the trainers (its own process, pod or Vertex AI pool), or cluster "
        "for TF_CONFIG's ps task. The order is then not deterministic: a resumed run "
        "restarts its input",
        section="Training",
    )
    evaluate: bool = param(
        False,
        help="After exporting, the chief scores the model through its serving signature on "
        "the held-out split and writes OUTPUT/evaluation.json: the remote launchers set it, "
        "so evaluation runs where training ran instead of on the Airflow worker",
        section="Training",
    )
    init_from: str = param(
        "",
        help="Start from an earlier model's weights instead of random ones: a run's model/ "
        "or train folder, a published version, a published model's home (MODEL_ROOT/NAME: "
        "its LATEST), imagenet (Keras' pretrained backbones: mobilenet_v3_small, resnet50), "
        "or a .weights.h5 file of the backbone. The classifier head is kept when the classes "
        "match. Only a run's first start; part of the recipe a resume checks",
        section="Model",
        tags=(RESUME,),
    )
    freeze_epochs: int = param(
        0,
        minimum=0,
        maximum=10000,
        help="With --init-from: train only the classifier head for this many epochs, the "
        "backbone frozen (its BatchNorm in inference mode), then the whole model at "
        f"{FINE_TUNE_LR_FACTOR:g}x the learning rate; 0 = everything trains from the start",
        section="Model",
        tags=(RESUME,),
    )
    baseline: str = param(
        "",
        help="With --evaluate: also score this model on the same held-out records, for the "
        "publish decision: a SavedModel folder, or a published model's home "
        "(MODEL_ROOT/NAME: the version its LATEST names; nothing published yet is fine)",
        section="Training",
    )
    synthetic_input: bool = param(
        False,
        help="Diagnosis: train on one in-memory random batch repeated instead of the shards "
        "(validation still reads them), to measure how much time the input pipeline costs",
        section="Training",
        tags=(RESUME,),
    )

    def __post_init__(self) -> None:
        for name in ("data", "output", "baseline", "init_from"):  # file://, ~ -> a path
            object.__setattr__(self, name, stageconfig.user_path(getattr(self, name)))
        stageconfig.check(self)
        stageconfig.check_output_folder("--output", self.output)
        stageconfig.check_utf8_name("--data", self.data)
        if self.data and self.output and stageconfig.is_inside(self.output, self.data):
            raise ConfigError(
                f"--output {self.output} is inside --data {self.data}: the run's checkpoints "
                "and model would go among the shards; give an output folder outside them"
            )
        parse_input_service(self.input_service)
        if self.freeze_epochs and not self.init_from:
            raise ConfigError(
                "--freeze-epochs needs --init-from: a frozen backbone that starts random "
                "learns nothing (start from a model, a weights file or imagenet)"
            )
        if self.freeze_epochs > self.epochs:
            raise ConfigError(
                f"--freeze-epochs {self.freeze_epochs} is more than --epochs {self.epochs}"
            )
        if self.jit_compile and self.cpu_devices > 1:
            raise ConfigError(
                "--jit-compile with --cpu-devices > 1: XLA compiles a CPU function for the "
                "first CPU device only, and the other replicas' weights live on the others "
                "(tensorflow.org/xla/known_issues); use one of them"
            )
        if self.architecture != "small_cnn" and self.input.image_size < 32:
            raise ConfigError(f"{self.architecture} needs --image-size >= 32")

    def to_json(self) -> dict:
        """Flat, as the flags spell it: a run's config.json and its resume keys."""
        return stageconfig.flat(self)


@dataclass(frozen=True)
class LaunchConfig:
    """How many training workers start, wherever the launcher starts them."""

    num_workers: int = param(
        2,
        minimum=1,
        maximum=64,
        help="Training workers (MultiWorkerMirroredStrategy), one process or pod each",
        section="Training",
    )
    max_restarts: int = param(
        3,
        minimum=0,
        maximum=100,
        help=f"Times all workers are started again after a preemption (a worker got SIGTERM; "
        f"every worker saved a checkpoint at the same step and exited {PREEMPTED_EXIT_CODE})",
        section="Training",
    )
    pin_cores: bool = param(
        False,
        help="Run worker i on core i only (for benchmarks; needs as many cores as workers)",
    )

    def __post_init__(self) -> None:
        stageconfig.check(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stageconfig.add_arguments(parser, TrainConfig)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return stageconfig.from_args(TrainConfig, args)
