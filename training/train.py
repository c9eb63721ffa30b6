"""Train an image classifier on the shards, on one or many workers, and export it.

    python -m training.train --data SHARDS --output RUN_DIR [flags]

One process per worker; the cluster comes from `TF_CONFIG` (see
`training.launch` for N local processes); the loop is `training.trainer`.
This module checks the flags, and a local shard folder, before TensorFlow
loads (several seconds): a mistake costs a moment and one line, not a start-up.

Exit codes: 0 done, 2 bad parameters or unusable shards, 75 preempted (every
worker saved a checkpoint; start them again).
"""

from __future__ import annotations

import argparse
import logging
import sys

from shardspec.folder import LOCAL_FILES, check_folder
from training import config as train_config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training.train",
        description="Train on TFRecord shards (one process per worker; cluster from TF_CONFIG) "
        "and export a SavedModel that serves raw image bytes.",
        allow_abbrev=False,
    )
    train_config.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = train_config.config_from_args(args)
    except train_config.ConfigError as err:
        parser.error(str(err))
    if "://" not in config.data:  # remote folders are checked once TensorFlow can read them
        _, problems = check_folder(config.data, LOCAL_FILES)
        if problems:
            print(f"error: {config.data}: {'; '.join(problems[:5])}", file=sys.stderr)
            return 2
    from training.trainer import run  # TensorFlow loads here

    return run(config)


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("absl", "tensorflow"):  # per-collective INFO lines drown the epoch lines
        logging.getLogger(noisy).setLevel(logging.WARNING)


def __getattr__(name: str):
    """`training.train.Trainer` and friends, imported (with TensorFlow) on first use."""
    from training import trainer

    try:
        return getattr(trainer, name)
    except AttributeError:
        raise AttributeError(f"module 'training.train' has no attribute {name!r}") from None


if __name__ == "__main__":
    configure_logging()
    sys.exit(main())
