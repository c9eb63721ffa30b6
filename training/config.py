"""The training stage's one typed config, built from CLI flags and validated there."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

from training.model import ARCHITECTURES


class ConfigError(ValueError):
    """A user mistake in the training parameters; reported as one line, exit code 2."""


@dataclass(frozen=True)
class TrainConfig:
    data: str
    output: str
    architecture: str = "small_cnn"
    image_size: int = 64
    epochs: int = 5
    global_batch_size: int = 32
    learning_rate: float = 2e-3
    checkpoint_every: int = 50
    steps_per_call: int = 10
    seed: int = 0
    cache: str = "auto"
    cache_budget_mb: int = 1024
    shuffle_buffer: int = 1024
    augment: bool = True
    mixed_precision: bool = False
    steps_per_epoch: int = 0  # 0: one pass over the training split
    synthetic_input: bool = False  # diagnosis only: how fast the step runs with free input

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ConfigError(
                f"unknown architecture {self.architecture!r}; choose one of "
                f"{', '.join(ARCHITECTURES)}"
            )
        if not 16 <= self.image_size <= 1024:
            raise ConfigError("--image-size must be between 16 and 1024")
        if self.architecture != "small_cnn" and self.image_size < 32:
            raise ConfigError(f"{self.architecture} needs --image-size >= 32")
        if self.epochs < 1:
            raise ConfigError("--epochs must be >= 1")
        if self.global_batch_size < 1:
            raise ConfigError("--global-batch-size must be >= 1")
        if not 0 < self.learning_rate < 10:
            raise ConfigError("--learning-rate must be in (0, 10)")
        if self.checkpoint_every < 1:
            raise ConfigError("--checkpoint-every must be >= 1")
        if not 1 <= self.steps_per_call <= 1000:
            raise ConfigError("--steps-per-call must be between 1 and 1000")
        if self.steps_per_epoch < 0:
            raise ConfigError("--steps-per-epoch must be >= 0")
        if self.cache_budget_mb < 0:
            raise ConfigError("--cache-budget-mb must be >= 0")
        if self.shuffle_buffer < 1:
            raise ConfigError("--shuffle-buffer must be >= 1")

    def to_json(self) -> dict:
        return asdict(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--data", required=True, help="Shard directory written by beam_jobs.shard_images.")
    a(
        "--output",
        required=True,
        help="Run directory: checkpoints/, tensorboard/, metrics.json, model/ (SavedModel).",
    )
    a(
        "--architecture",
        default="small_cnn",
        choices=ARCHITECTURES,
        help="Model (default small_cnn). All train from scratch; nothing is downloaded.",
    )
    a("--image-size", type=int, default=64, help="Square model input size in px (default 64).")
    a("--epochs", type=int, default=5, help="Epochs (default 5).")
    a(
        "--global-batch-size",
        type=int,
        default=32,
        help="Batch size over all replicas; must divide by the number of replicas (default 32).",
    )
    a(
        "--learning-rate",
        type=float,
        default=2e-3,
        help="Peak Adam learning rate, cosine-decayed to 0 over the run (default 2e-3).",
    )
    a(
        "--checkpoint-every",
        type=int,
        default=50,
        help="Checkpoint every N steps, and at each epoch end (default 50).",
    )
    a(
        "--steps-per-call",
        type=int,
        default=10,
        help="Training steps per call into the compiled graph (default 10): the host "
        "collects metrics once per call, not once per step. Checkpoints and epoch ends "
        "still fall on their exact steps.",
    )
    a(
        "--steps-per-epoch",
        type=int,
        default=0,
        help="Steps per epoch; 0 (default) = one pass over the training split.",
    )
    a("--seed", type=int, default=0, help="Seed for shuffling and initialisation (default 0).")
    a(
        "--cache",
        default="auto",
        help='Cache decoded images: "auto" (default: in memory when this worker\'s decoded '
        'training images fit --cache-budget-mb; the log says which), "memory", a file path '
        'prefix, or "" for none.',
    )
    a(
        "--cache-budget-mb",
        type=int,
        default=1024,
        help="Memory a worker may spend on cached decoded images with --cache auto (default 1024).",
    )
    a("--shuffle-buffer", type=int, default=1024, help="Shuffle buffer in images (default 1024).")
    a(
        "--no-augment",
        dest="augment",
        action="store_false",
        help="Disable random flip/crop/brightness augmentation.",
    )
    a(
        "--mixed-precision",
        action="store_true",
        help="float16 compute with loss scaling, on GPU (ignored with a warning on CPU).",
    )
    a(
        "--synthetic-input",
        action="store_true",
        help="Diagnosis: train on one in-memory random batch repeated instead of the shards "
        "(validation still reads them), to measure how much time the input pipeline costs.",
    )


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        data=args.data,
        output=args.output,
        architecture=args.architecture,
        image_size=args.image_size,
        epochs=args.epochs,
        global_batch_size=args.global_batch_size,
        learning_rate=args.learning_rate,
        checkpoint_every=args.checkpoint_every,
        steps_per_call=args.steps_per_call,
        steps_per_epoch=args.steps_per_epoch,
        seed=args.seed,
        cache=args.cache,
        cache_budget_mb=args.cache_budget_mb,
        shuffle_buffer=args.shuffle_buffer,
        augment=args.augment,
        mixed_precision=args.mixed_precision,
        synthetic_input=args.synthetic_input,
    )
