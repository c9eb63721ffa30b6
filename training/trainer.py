"""The training loop (`training.train` is its CLI): the order of things, one worker.

One process per worker; the cluster comes from `TF_CONFIG` (see
`training.launch` for N local processes). Keras 3 `model.fit` does not work
under MultiWorkerMirroredStrategy (keras-team/keras#20585), so this is a custom
loop over `ImageTask`'s compiled steps (training/task.py), with the input from
`DistributedInput`, the stop agreement from `StopAgreement` and the files from
`RunFolder`.

Fault tolerance: every worker saves a checkpoint every `--checkpoint-every`
steps and at each epoch end (the chief into RUN_DIR/checkpoints, the others
into temporary folders they delete). Started again with the same arguments
after a crash, training restores the chief's latest checkpoint, skips its input
to that step and runs to the same total number of steps as an uninterrupted run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import keras
import tensorflow as tf

from runspec.layout import CHECKPOINTS, MODEL, TENSORBOARD
from shardspec.folder import too_few_classes
from shardspec.layout import SPLIT_NAMES
from training import warm_start
from training.config import (
    FINE_TUNE_LR_FACTOR,
    TrainConfig,
    min_train_records,
    scaled_learning_rate,
)
from training.diagnosis import InputDiagnosis
from training.distribute import ClusterInfo, StopAgreement
from training.distributed_input import DistributedInput
from training.export import export_serving_model
from training.model import freeze_backbone
from training.model_files import WEIGHTS_FINGERPRINT
from training.run_folder import RunFolder
from training.shards import ShardError, ShardSet
from training.task import ImageTask
from training.worker_env import PREEMPTED_EXIT_CODE

log = logging.getLogger("training.train")


@dataclass
class EpochMetrics:
    epoch: int
    step: int
    train_loss: float
    train_accuracy: float
    val_loss: float | None
    val_accuracy: float | None
    images_per_second: float
    seconds: float
    input_wait_share: float | None = None  # see training/diagnosis.py

    def line(self, epochs: int, total_steps: int) -> str:
        val = (
            f"val_loss {self.val_loss:.4f} val_acc {self.val_accuracy:.4f}"
            if self.val_loss is not None
            else "no validation split"
        )
        return (
            f"epoch {self.epoch}/{epochs} step {self.step}/{total_steps} "
            f"train_loss {self.train_loss:.4f} train_acc {self.train_accuracy:.4f} {val} "
            f"images/s {self.images_per_second:.1f} ({self.seconds:.1f}s)"
            + (
                f" input wait {self.input_wait_share:.0%}"
                if self.input_wait_share is not None
                else ""
            )
        )


class Preempted(Exception):
    """Every worker saved a checkpoint at this step after one of them was told to stop."""

    def __init__(self, step: int):
        super().__init__(f"preempted at step {step}")
        self.step = step


class Trainer:
    """One worker's run: sizes and checks, then the loop (train, evaluate, record,
    checkpoint, agree on stopping) and the export.

    Every worker runs the same loop in the same order: a collective one worker skips
    would hang the others, so anything that may run one (evaluation, saving, the stop
    agreement) happens on every worker at the same step."""

    def __init__(
        self,
        config: TrainConfig,
        cluster: ClusterInfo,
        strategy: tf.distribute.Strategy,
        shard_set: ShardSet,
    ):
        self.config = config
        self.cluster = cluster
        self.strategy = strategy
        self.shards = shard_set
        self.folder = RunFolder(config.output, cluster)
        replicas = strategy.num_replicas_in_sync
        self.global_batch_size = config.per_replica_batch_size * replicas
        if problem := too_few_classes(shard_set.folder.label_map):
            raise ShardError(f"{shard_set.directory}: {problem}")
        train_records = shard_set.num_records("train")
        if train_records < min_train_records(config.per_replica_batch_size, replicas):
            raise ShardError(
                f"the train split has {train_records} records, fewer than one global batch "
                f"({self.global_batch_size} = --per-replica-batch-size "
                f"{config.per_replica_batch_size} x {replicas} replicas)"
            )
        self.steps_per_epoch = config.steps_per_epoch or train_records // self.global_batch_size
        self.total_steps = self.steps_per_epoch * config.epochs
        self.freeze_steps = self.steps_per_epoch * config.freeze_epochs
        self.learning_rate = scaled_learning_rate(config.learning_rate, self.global_batch_size)
        self.init_source = warm_start.resolve(
            config.init_from,
            architecture=config.architecture,
            image_size=config.input.image_size,
        )
        self.warm_started = ""  # what the first start loaded (--init-from)
        self.input = DistributedInput(config, cluster, strategy, shard_set)
        self.stop = StopAgreement(cluster, strategy)
        self.resumed_from_step = 0
        self.stop_quietly = False
        self.task: ImageTask | None = None
        self.diagnosis: InputDiagnosis | None = None

    def request_stop(self, quiet: bool = False) -> None:
        """From the SIGTERM (or SIGINT) handler: stop at the next step all workers agree
        on. `quiet`: the caller says why (Ctrl-C), no preemption warning."""
        self.stop_quietly = quiet
        self.stop.request()

    def wait_for_all_workers(self) -> None:
        """Return when every worker has called this (the last thing each one does)."""
        self.stop.any_worker_stopping()

    def build(self) -> None:
        keras.utils.set_random_seed(self.config.seed)
        if self.config.mixed_precision:
            if tf.config.list_physical_devices("GPU"):
                keras.mixed_precision.set_global_policy("mixed_float16")
            else:
                log.warning("--mixed-precision ignored: no GPU (float16 on CPU is slower)")
        self.task = ImageTask(
            self.config,
            self.strategy,
            num_classes=self.shards.num_classes,
            global_batch_size=self.global_batch_size,
            learning_rate=self.learning_rate,
            total_steps=self.total_steps,
            freeze_steps=self.freeze_steps,
        )
        self.checkpoint = self.task.checkpoint()
        self.checkpoints = tf.train.CheckpointManager(
            self.checkpoint, self.folder.write_dir(CHECKPOINTS), max_to_keep=3
        )
        self.diagnosis = InputDiagnosis(
            measure_compute_step=self.task.measure_compute_step,
            shard_set=self.shards,
            is_chief=self.cluster.is_chief,
            num_workers=self.cluster.num_workers,
            global_batch_size=self.global_batch_size,
            input_config=self.config.input,
        )

    def restore(self) -> None:
        latest = self.folder.latest_checkpoint()
        if latest:
            # expect_partial: the optimizer's slots are created at its first step, so a run
            # that is already finished never resolves them (that is not an error).
            self.checkpoint.restore(latest).assert_existing_objects_matched().expect_partial()
            self.resumed_from_step = int(self.task.step.numpy())
            log.info(
                "%s: resumed from step %d (%s)", self.cluster.name, self.resumed_from_step, latest
            )

    def save_checkpoint(self) -> None:
        self.checkpoints.save(checkpoint_number=int(self.task.step.numpy()))

    def _preempted(self, step: int) -> None:
        """Called on every worker at the same step, after the checkpoint of that step."""
        if self.stop_quietly:
            raise Preempted(step)
        log.warning(
            "%s: preempted: checkpoint saved at step %d; exit %d so the launcher restarts "
            "the workers",
            self.cluster.name,
            step,
            PREEMPTED_EXIT_CODE,
        )
        raise Preempted(step)

    def evaluate(self, split: str = "validation") -> tuple[float, float] | None:
        """Loss and accuracy over the whole split (every record once, across workers)."""
        if not self.shards.files(split) or not self.shards.num_records(split):
            return None
        eval_step = self.task.eval_step_fn()
        totals = tf.zeros([3])
        for batch in self.input.distributed(split, training=False):
            totals += eval_step(batch)
        loss_sum, correct, count = (float(v) for v in totals.numpy())
        return loss_sum / count, correct / count

    def run(self) -> list[dict]:
        """Train to `total_steps` from wherever the checkpoints left off; -> the epochs."""
        self.build()
        self.restore()
        if self.init_source and not self.resumed_from_step:
            self.warm_started = warm_start.load(
                self.task.model,
                self.init_source,
                architecture=self.config.architecture,
                image_size=self.config.input.image_size,
                labels=self.shards.label_names,
            )
            log.info("%s: warm start: %s", self.cluster.name, self.warm_started)
        if self.cluster.is_chief:
            self.folder.write_config(self.effective_config())
        history = self.folder.load_history() if self.resumed_from_step else []
        step = int(self.task.step.numpy())
        if step >= self.total_steps:
            log.info(
                "%s: already trained %d/%d steps; exporting the model again",
                self.cluster.name,
                step,
                self.total_steps,
            )
            return history
        if step:
            log.info(
                "%s: input resumes at step %d (step %d of epoch %d), where the checkpoint left it",
                self.cluster.name,
                step,
                step % self.steps_per_epoch,
                step // self.steps_per_epoch + 1,
            )
        writer = (
            tf.summary.create_file_writer(self.folder.path(TENSORBOARD))
            if self.cluster.is_chief
            else tf.summary.create_noop_writer()
        )
        train_steps = self._train_steps_fn(step)
        iterator = iter(self.input.distributed("train", training=True, start_step=step))
        first_in_process = True
        while step < self.total_steps:
            if step == self.freeze_steps and self.freeze_steps:
                train_steps = self._train_steps_fn(step)  # the backbone thaws
            metrics = self._train_epoch(train_steps, iterator, step, first_in_process)
            step, first_in_process = metrics.step, False
            history = [h for h in history if h["epoch"] < metrics.epoch] + [vars(metrics)]
            # The epoch's metrics before its checkpoint: killed between the two, a resumed run
            # redoes the end of the epoch and replaces its line; the other order lost the line
            # (the checkpoint said the epoch was done, the metrics had never heard of it).
            if self.cluster.is_chief:
                self.folder.write_history(history, self.resumed_from_step, self.diagnosis.report)
            self.save_checkpoint()
            if step < self.total_steps and self.stop.any_worker_stopping():
                self._preempted(step)
            with writer.as_default(step=step):
                for key, value in vars(metrics).items():
                    if key not in ("epoch", "step") and value is not None:
                        tf.summary.scalar(key, value)
                writer.flush()
        return history

    def _train_steps_fn(self, step: int):
        """The compiled steps for the phase `step` is in: the head alone before
        `freeze_steps` (--freeze-epochs), every weight after."""
        frozen = step < self.freeze_steps
        freeze_backbone(self.task.model, frozen)
        if self.freeze_steps:
            log.info(
                "%s: %s",
                self.cluster.name,
                f"backbone frozen until step {self.freeze_steps}: training the classifier head"
                if frozen
                else f"fine-tuning every layer at {FINE_TUNE_LR_FACTOR:g}x the learning rate",
            )
        return self.task.train_steps_fn()

    def _train_epoch(self, train_steps, iterator, step: int, first_in_process: bool):
        """From `step` to the end of its epoch, checkpointing on the way; -> its metrics."""
        epoch = step // self.steps_per_epoch + 1
        epoch_end = epoch * self.steps_per_epoch
        every = self.config.checkpoint_every
        started, steps_done = time.perf_counter(), 0
        self.task.train_totals.assign(tf.zeros([2]))
        while step < epoch_end:
            # Up to steps_per_call steps, never past a checkpoint step or the epoch end.
            next_checkpoint = (step // every + 1) * every
            count = min(self.config.steps_per_call, epoch_end - step, next_checkpoint - step)
            train_steps(iterator, tf.constant(count, tf.int32))
            step += count
            steps_done += count
            if step == epoch_end:
                break  # the epoch ends (evaluation, metrics, checkpoint) before any stop
            saved = step % every == 0
            if saved:
                self.save_checkpoint()
            if self.stop.any_worker_stopping():
                if not saved:
                    self.save_checkpoint()
                self._preempted(step)
        loss_sum, correct_sum = (float(v) for v in self.task.train_totals.read_value().numpy())
        seconds = time.perf_counter() - started
        evaluation = self.evaluate()
        metrics = EpochMetrics(
            epoch=epoch,
            step=step,
            train_loss=loss_sum / steps_done,
            train_accuracy=correct_sum / (steps_done * self.global_batch_size),
            val_loss=evaluation[0] if evaluation else None,
            val_accuracy=evaluation[1] if evaluation else None,
            images_per_second=steps_done * self.global_batch_size / seconds,
            seconds=seconds,
        )
        if not self.config.synthetic_input:
            self.diagnosis.observe(metrics, first_in_process)
        log.info("%s: %s", self.cluster.name, metrics.line(self.config.epochs, self.total_steps))
        return metrics

    def effective_config(self) -> dict:
        return {
            **self.config.to_json(),
            "num_workers": self.cluster.num_workers,
            "replicas": self.strategy.num_replicas_in_sync,
            "global_batch_size": self.global_batch_size,
            "scaled_learning_rate": self.learning_rate,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total_steps,
            "num_classes": self.shards.num_classes,
            "shards_content": self.shards.folder.content_id,
            "init_source": self.init_source.describe() if self.init_source else None,
        }

    def export(self, history: list[dict]) -> str | None:
        """Every worker exports (reads may run collectives); only the chief's copy stays."""
        metadata = {
            "config": self.config.to_json(),
            "label_map": self.shards.folder.label_map,
            "shards": {
                "directory": self.shards.directory,
                "num_records": {s: self.shards.num_records(s) for s in SPLIT_NAMES},
            },
            "total_steps": self.total_steps,
            "num_workers": self.cluster.num_workers,
            WEIGHTS_FINGERPRINT: self.task.weights_fingerprint(),
            "final_metrics": history[-1] if history else None,
            "tensorflow_version": tf.__version__,
            "keras_version": keras.__version__,
        }
        path = self.folder.write_dir(MODEL)
        export_serving_model(
            self.task.serving_copy(),
            path,
            label_names=self.shards.label_names,
            image_size=self.config.input.image_size,
            metadata=metadata,
        )
        if not self.cluster.is_chief:
            self.folder.cleanup_worker_tmp()
            return None
        return path
