"""Train an image classifier on the shards, on one or many workers, and export it.

    python -m training.train --data SHARDS --output RUN_DIR [flags]

One process per worker; the cluster comes from `TF_CONFIG` (see
`training.launch` for N local processes); the loop is `training.trainer`.
This module checks the flags, and a local shard folder, before TensorFlow
loads (several seconds): a mistake costs a moment and one line, not a start-up.

Exit codes: 0 done, 2 bad parameters or unusable shards, 75 preempted (every
worker saved a checkpoint; start them again), 130 interrupted by Ctrl-C (saved too).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time

from runspec.layout import EVALUATION
from shardspec.folder import LOCAL_FILES, check_folder
from stageconfig import exit_codes
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
    try:
        config = checked_config(argv)
    except train_config.ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_codes.BAD_INPUT
    try:
        return run(config)
    except KeyboardInterrupt:  # Ctrl-C before the loop began, or a second one in it
        print(INTERRUPTED, file=sys.stderr)
        return exit_codes.INTERRUPTED


INTERRUPTED = "interrupted: the same command resumes from the run's last checkpoint"


def checked_config(argv: list[str] | None, prog: str | None = None) -> train_config.TrainConfig:
    """The flags as a config, checked with a local shard folder before TensorFlow loads:
    a bad flag exits 2 with argparse's usage and error, an unusable folder raises
    ConfigError (`training.launch` checks its workers' flags here too, once, before it
    starts any)."""
    parser = build_parser()
    if prog:  # another command's check of the flags it passes on: a one-line usage
        parser.prog, parser.usage = prog, f"{prog} --data SHARDS --output RUN_DIR [flags]"
    args = parser.parse_args(argv)
    try:
        config = train_config.config_from_args(args)
    except train_config.ConfigError as err:
        parser.error(str(err))
    if "://" not in config.data:  # remote folders are checked once TensorFlow can read them
        _, problems = check_folder(config.data, LOCAL_FILES)
        if problems:
            raise train_config.ConfigError(f"{config.data}: {'; '.join(problems[:5])}")
    return config


def run(config: train_config.TrainConfig) -> int:
    """Train and export as this process's worker; the CLI's exit code (stageconfig/
    exit_codes.py): 2 for bad parameters or unusable shards (one line naming what), 75
    when preempted after a checkpoint every worker agreed on."""
    import tensorflow as tf  # here, not at import: the checks above run without it

    from training.distribute import cluster_from_env, make_strategy
    from training.shards import ShardError, ShardSet
    from training.trainer import Preempted, Trainer

    try:
        cluster = cluster_from_env()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_codes.BAD_INPUT
    # The strategy first: MultiWorkerMirroredStrategy must exist before other TF ops.
    strategy = make_strategy(cluster, config.cpu_devices)
    try:
        shard_set = ShardSet.open(config.data)
        trainer = Trainer(config, cluster, strategy, shard_set)
        trainer.folder.check_resumable(trainer.effective_config())
    except (ShardError, train_config.ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_codes.BAD_INPUT
    log = logging.getLogger("training.train")
    log.info(
        "%s: %d steps (%d epochs x %d), global batch %d, %s, %d classes",
        cluster.name,
        trainer.total_steps,
        config.epochs,
        trainer.steps_per_epoch,
        trainer.global_batch_size,
        config.architecture,
        shard_set.num_classes,
    )
    # SIGTERM (preemption, eviction, a launcher stopping us) asks for a clean stop: every
    # worker saves at the next step boundary they agree on, then exits to be restarted.
    # Ctrl-C (SIGINT) too, and says so in one line; a second Ctrl-C stops at once.
    interrupted = []

    def on_interrupt(_signum, _frame):
        if interrupted:
            raise KeyboardInterrupt
        interrupted.append(True)
        trainer.request_stop(quiet=True)

    signal.signal(signal.SIGTERM, lambda _signum, _frame: trainer.request_stop())
    signal.signal(signal.SIGINT, on_interrupt)
    try:
        history = trainer.run()
    except Preempted as stopped:
        if interrupted:
            print(
                f"interrupted: checkpoint saved at step {stopped.step}; the same command "
                "resumes from it",
                file=sys.stderr,
            )
            return exit_codes.INTERRUPTED
        return exit_codes.PREEMPTED
    except train_config.ConfigError as err:  # the init source could not be loaded
        print(f"error: {err}", file=sys.stderr)
        return exit_codes.BAD_INPUT
    except tf.errors.DataLossError as err:  # a record's CRC or length did not check out
        corrupt = shard_set.corrupt_files()
        named = (
            ", ".join(corrupt) if corrupt else "no shard differs from its sha256 (a read error?)"
        )
        print(
            f"error: corrupt shard data in {config.data} ({err.message.splitlines()[0]}); "
            f"corrupt: {named}; rerun the sharding job",
            file=sys.stderr,
        )
        return exit_codes.BAD_INPUT
    except tf.errors.InvalidArgumentError as err:
        # A stored record the decoder refuses (the sharding job stores only what it proved
        # decodable, so: shards from elsewhere, or a decoder change). Name it, one line.
        bad = shard_set.undecodable_records(config.input.image_size)
        if not bad:
            raise  # not a record's fault: a real bug, keep its traceback
        print(
            f"error: records in {config.data} that cannot be decoded "
            f"({err.message.strip().splitlines()[0][:200]}): {'; '.join(bad)}; "
            "reshard the images or remove these records",
            file=sys.stderr,
        )
        return exit_codes.BAD_INPUT
    log.info(
        "%s: final weights fingerprint %s (local replicas: %s)",
        cluster.name,
        trainer.task.weights_fingerprint(),
        " ".join(trainer.task.replica_fingerprints()),
    )
    if advice := trainer.diagnosis.report.get("advice"):
        log.info("input diagnosis: %s", advice)
    started = time.monotonic()
    log.info("%s: exporting the model (SavedModel serving image bytes)", cluster.name)
    path = trainer.export(history)
    log.info("%s: export done in %.0fs", cluster.name, time.monotonic() - started)
    if path and config.evaluate:
        from training.evaluate import evaluate_saved_model, write_evaluation

        evaluation = evaluate_saved_model(path, config.data, baseline=config.baseline or None)
        written = trainer.folder.path(EVALUATION)
        write_evaluation(evaluation, written)
        log.info(
            "held-out accuracy %.3f on %d %s images -> %s",
            evaluation["accuracy"],
            evaluation["num_examples"],
            evaluation["split"],
            written,
        )
    trainer.wait_for_all_workers()
    if path:
        final = history[-1] if history else {}
        print(
            json.dumps(
                {"model": path, "metrics": final, "resumed_from_step": trainer.resumed_from_step}
            )
        )
    return 0


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("absl", "tensorflow"):  # per-collective INFO lines drown the epoch lines
        logging.getLogger(noisy).setLevel(logging.WARNING)


def __getattr__(name: str):
    """`training.train.Trainer` and friends, imported (with TensorFlow) on first use."""
    if name.startswith("__"):  # `from training.train import x` asks for __path__
        raise AttributeError(name)
    from training import trainer

    try:
        return getattr(trainer, name)
    except AttributeError:
        raise AttributeError(f"module 'training.train' has no attribute {name!r}") from None


if __name__ == "__main__":
    configure_logging()
    sys.exit(main())
