"""The training loop and everything in it that needs TensorFlow (`training.train` is its CLI).

One process per worker; the cluster comes from `TF_CONFIG` (see
`training.launch` for N local processes). Keras 3 `model.fit` does not work
under MultiWorkerMirroredStrategy (keras-team/keras#20585), so this is a custom
loop: `strategy.run` per step, losses averaged over the global batch.

Fault tolerance: every worker saves a checkpoint every `--checkpoint-every`
steps and at each epoch end (the chief into RUN_DIR/checkpoints, the others
into temporary folders they delete). Started again with the same arguments
after a crash, training restores the chief's latest checkpoint, skips its input
to that step and runs to the same total number of steps as an uninterrupted run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import posixpath
import signal
import sys
import time
from dataclasses import dataclass

import keras
import tensorflow as tf

from runspec.layout import (
    CHECKPOINTS,
    EVALUATION,
    MODEL,
    TENSORBOARD,
)
from shardspec.folder import too_few_classes
from shardspec.layout import SPLIT_NAMES
from training import diagnosis
from training.config import (
    CLUSTER_INPUT_SERVICE,
    WARMUP_SHARE,
    ConfigError,
    TrainConfig,
    min_train_records,
    parse_input_service,
    scaled_learning_rate,
)
from training.data import InputOptions, build_dataset, cache_choice, synthetic_dataset
from training.distribute import ClusterInfo, cluster_from_env, make_strategy
from training.export import export_serving_model
from training.input_service import start_local, through_service
from training.model import average_moving_statistics, build_model, moving_statistics
from training.model_files import WEIGHTS_FINGERPRINT
from training.run_folder import RunFolder
from training.shards import ShardError, ShardSet
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
    """One worker's training run: the model and its compiled steps under the strategy,
    the input, the loop with its checkpoints, the stop agreement between workers, and
    the export. The run folder's files are RunFolder's (training/run_folder.py).

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
        self.global_batch_size = config.per_replica_batch_size * strategy.num_replicas_in_sync
        if problem := too_few_classes(shard_set.folder.label_map):
            raise ShardError(f"{shard_set.directory}: {problem}")
        train_records = shard_set.num_records("train")
        if train_records < min_train_records(
            config.per_replica_batch_size, strategy.num_replicas_in_sync
        ):
            raise ShardError(
                f"the train split has {train_records} records, fewer than one global batch "
                f"({self.global_batch_size} = --per-replica-batch-size "
                f"{config.per_replica_batch_size} x {strategy.num_replicas_in_sync} replicas)"
            )
        self.steps_per_epoch = config.steps_per_epoch or train_records // self.global_batch_size
        self.total_steps = self.steps_per_epoch * config.epochs
        self.learning_rate = scaled_learning_rate(config.learning_rate, self.global_batch_size)
        self.input_options = InputOptions(
            image_size=config.image_size,
            shuffle_buffer=config.shuffle_buffer,
            cache=config.cache,
            cache_budget_mb=config.cache_budget_mb,
            augment=config.augment,
            seed=config.seed,
        )
        self.service_address, self._local_service = self._input_service()
        self._eval_step = None
        self.resumed_from_step = 0
        self.stop_requested = False  # set from the SIGTERM handler
        self.diagnosis: dict = {}
        self._compute_step_seconds: float | None = None

    # ---- data -----------------------------------------------------------------------
    def _input_service(self):
        """(dispatcher address or "", the local servers to keep alive or None)."""
        address, local_workers = parse_input_service(self.config.input_service)
        if address == CLUSTER_INPUT_SERVICE:
            address = self.cluster.input_service
            if not address:
                raise ConfigError("--input-service cluster: TF_CONFIG's cluster has no ps task")
        local = start_local(local_workers) if local_workers else None
        if local:
            address = local.address
        if address:
            log.info(
                "input: through the tf.data service at %s%s (DYNAMIC sharding: each record "
                "at most once per pass; the order is not deterministic, so a resumed run "
                "restarts its input)",
                address,
                f", {local_workers} worker(s) in this process" if local else "",
            )
        return address, local

    def _distributed(self, split: str, training: bool, start_step: int = 0):
        """The split as the strategy's per-replica batches; training input begins at the
        batch an uninterrupted run would read at `start_step`."""
        files = self.shards.files(split)

        def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
            if training and self.config.synthetic_input:
                return synthetic_dataset(
                    self.config.per_replica_batch_size,
                    self.config.image_size,
                    self.shards.num_classes,
                )
            dataset = build_dataset(
                files,
                batch_size=self.config.per_replica_batch_size,
                training=training,
                compression_type=self.shards.compression_type,
                options=self.input_options,
                num_pipelines=context.num_input_pipelines,
                pipeline_id=context.input_pipeline_id,
                num_records=-(-self.shards.num_records(split) // context.num_input_pipelines),
                # Each step takes one batch per replica this pipeline feeds.
                skip_batches=0
                if training and self.service_address
                else start_step * context.num_replicas_in_sync // context.num_input_pipelines,
            )
            if training and self.service_address:
                return through_service(dataset, self.service_address)
            return dataset

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    # ---- model and steps ---------------------------------------------------------------
    def build(self) -> None:
        keras.utils.set_random_seed(self.config.seed)
        if self.config.mixed_precision:
            if tf.config.list_physical_devices("GPU"):
                keras.mixed_precision.set_global_policy("mixed_float16")
            else:
                log.warning("--mixed-precision ignored: no GPU (float16 on CPU is slower)")
        with self.strategy.scope():
            self.model = build_model(
                self.config.architecture,
                self.config.image_size,
                self.shards.num_classes,
                batch_norm=self.config.batch_norm,
            )
            # A short linear warm-up (a large global batch starts at a large rate), then
            # cosine decay to zero over the run: a stable end point to evaluate and export.
            warmup = int(WARMUP_SHARE * self.total_steps)
            schedule = keras.optimizers.schedules.CosineDecay(
                0.0 if warmup else self.learning_rate,
                decay_steps=self.total_steps - warmup,
                warmup_target=self.learning_rate if warmup else None,
                warmup_steps=warmup,
            )
            optimizer = keras.optimizers.Adam(schedule)
            if keras.mixed_precision.global_policy().name == "mixed_float16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            self.optimizer = optimizer
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            # [loss sum, correct count] since the epoch began, kept per replica and summed
            # over replicas only when read: no collective and no host sync per step.
            self.train_totals = tf.Variable(
                tf.zeros([2]),
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
                name="train_totals",
            )
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, step=self.step
        )
        self.checkpoints = tf.train.CheckpointManager(
            self.checkpoint,
            self.folder.write_dir(CHECKPOINTS),
            max_to_keep=3,
        )
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def _train_steps_fn(self):
        strategy, model, optimizer = self.strategy, self.model, self.optimizer
        global_batch = self.global_batch_size
        scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

        def replica_step(images, labels):
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                per_example = self.loss_fn(labels, logits)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
                if model.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
                loss_for_grads = optimizer.scale_loss(loss) if scaled else loss
            grads = tape.gradient(loss_for_grads, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            correct = tf.reduce_sum(
                tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
            )
            self.train_totals.assign_add(tf.stack([loss, correct]))

        # Local BatchNorm statistics: the replicas' moving statistics meet once per call,
        # so they are equal wherever the weights are read (calls end at checkpoints).
        averaged = self.config.batch_norm == "local" and strategy.num_replicas_in_sync > 1
        statistics = moving_statistics(model) if averaged else []

        @tf.function
        def train_steps(iterator, num_steps):
            """`num_steps` steps in one call: the loop runs in the graph, not in Python."""
            for _ in tf.range(num_steps):
                strategy.run(replica_step, args=next(iterator))
                self.step.assign_add(1)
            if statistics:
                strategy.run(lambda: average_moving_statistics(statistics))

        return train_steps

    @functools.cached_property
    def _sum_over_workers(self):
        """Whether any worker was told to stop: one scalar all-reduce, called between
        calls into the training graph (so every `steps_per_call` steps), so all workers
        stop at the same step; a worker stopping alone would hang the others'
        collectives. TF's PreemptionCheckpointHandler does this through the coordination
        service but does nothing on CPU machines on GCP, where our CPU workers run."""
        strategy = self.strategy
        if not self.cluster.multi_worker:
            return lambda flag: flag

        @tf.function
        def agree(flag):
            per_replica = strategy.run(tf.identity, args=(flag,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        return agree

    def request_stop(self) -> None:
        self.stop_requested = True

    def wait_for_all_workers(self) -> None:
        """Return when every worker has called this: the last thing each worker does, so
        none exits while the chief still exports or evaluates (TensorFlow's coordination
        service would report the early one as crashed, an ERROR line in a healthy run)."""
        self._any_worker_stopping()

    def _any_worker_stopping(self) -> bool:
        return float(self._sum_over_workers(tf.constant(float(self.stop_requested)))) > 0

    def _preempted(self, step: int) -> None:
        """Called on every worker at the same step, after the checkpoint of that step."""
        log.warning(
            "%s: preempted: checkpoint saved at step %d; exit %d so the launcher restarts "
            "the workers",
            self.cluster.name,
            step,
            PREEMPTED_EXIT_CODE,
        )
        raise Preempted(step)

    def _eval_step_fn(self):
        """One traced function per trainer: a new one per evaluation would retrace each
        epoch (and TensorFlow warns about it)."""
        if self._eval_step is not None:
            return self._eval_step
        strategy, model = self.strategy, self.model

        def replica_eval(images, labels):
            logits = model(images, training=False)
            loss_sum = tf.reduce_sum(self.loss_fn(labels, logits))
            correct = tf.reduce_sum(
                tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
            )
            count = tf.cast(tf.shape(labels)[0], tf.float32)
            return tf.stack([loss_sum, correct, count])

        @tf.function(reduce_retracing=True)  # the last batch of a split is smaller
        def eval_step(batch):
            stats = strategy.run(replica_eval, args=batch)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, stats, axis=None)

        self._eval_step = eval_step
        return eval_step

    def measure_compute_step(self, steps: int = 10) -> float:
        """Seconds of one step without input: forward, backward and the gradient
        all-reduce on an in-memory batch. No optimizer update, and the layers' state
        (BatchNorm statistics, dropout seeds) is restored after: the model is untouched.
        Every worker calls it at the same point of the run (it runs collectives)."""
        strategy, model, global_batch = self.strategy, self.model, self.global_batch_size
        state = [v.numpy() for v in model.non_trainable_variables]

        def replica_probe(images, labels):
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = tf.nn.compute_average_loss(
                    self.loss_fn(labels, logits), global_batch_size=global_batch
                )
            grads = tape.gradient(loss, model.trainable_variables)
            tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)

        @tf.function
        def probe(iterator, num_steps):
            for _ in tf.range(num_steps):
                strategy.run(replica_probe, args=next(iterator))

        iterator = iter(
            strategy.distribute_datasets_from_function(
                lambda context: synthetic_dataset(
                    self.config.per_replica_batch_size,
                    self.config.image_size,
                    self.shards.num_classes,
                )
            )
        )
        probe(iterator, tf.constant(1))  # tracing
        started = time.perf_counter()
        probe(iterator, tf.constant(steps))
        seconds = (time.perf_counter() - started) / steps
        for variable, value in zip(model.non_trainable_variables, state, strict=True):
            variable.assign(value)
        return seconds

    def _diagnose(self, metrics: EpochMetrics, first_in_process: bool) -> None:
        """Fill the epoch's input-wait share; once per process, the probe and the ceiling."""
        if self.config.synthetic_input:
            return
        if self._compute_step_seconds is None:
            self._compute_step_seconds = self.measure_compute_step()
            ceiling = (
                diagnosis.decode_ceiling(self.shards, self.config.image_size)
                if self.cluster.is_chief
                else None
            )
            self.diagnosis = {
                "compute_step_ms": 1000 * self._compute_step_seconds,
                "decode_ceiling_images_per_second_per_worker": ceiling,
            }
        steps = metrics.images_per_second * metrics.seconds / self.global_batch_size
        share = diagnosis.input_wait_share(metrics.seconds / steps, self._compute_step_seconds)
        # The first epoch of a process also pays for tracing and warming up (and fills the
        # cache): its share would mostly measure that, so it is left out.
        if first_in_process:
            self.diagnosis.setdefault(
                "advice", "one epoch only: train 2 or more epochs to measure the input wait"
            )
            return
        metrics.input_wait_share = share
        ceiling = self.diagnosis.get("decode_ceiling_images_per_second_per_worker")
        if ceiling:
            # The same choice build_dataset made for this worker's share of the records.
            records = -(-self.shards.num_records("train") // self.cluster.num_workers)
            cached = bool(cache_choice(self.input_options, records, quiet=True))
            self.diagnosis.update(
                input_wait_share=share,
                advice=diagnosis.advice(
                    share,
                    images_per_second=metrics.images_per_second,
                    ceiling_per_worker=ceiling,
                    num_workers=self.cluster.num_workers,
                    image_size=self.config.image_size,
                    max_side=self.shards.folder.max_side,
                    cached=cached,
                ),
            )

    def evaluate(self, split: str = "validation") -> tuple[float, float] | None:
        """Loss and accuracy over the whole split (every record once, across workers)."""
        if not self.shards.files(split) or not self.shards.num_records(split):
            return None
        eval_step = self._eval_step_fn()
        totals = tf.zeros([3])
        for batch in self._distributed(split, training=False):
            totals += eval_step(batch)
        loss_sum, correct, count = (float(v) for v in totals.numpy())
        return loss_sum / count, correct / count

    # ---- the loop --------------------------------------------------------------------
    def restore(self) -> None:
        latest = self.folder.latest_checkpoint()
        if latest:
            # expect_partial: the optimizer's slots are created at its first step, so a run
            # that is already finished never resolves them (that is not an error).
            self.checkpoint.restore(latest).assert_existing_objects_matched().expect_partial()
            self.resumed_from_step = int(self.step.numpy())
            log.info(
                "%s: resumed from step %d (%s)", self.cluster.name, self.resumed_from_step, latest
            )

    def save_checkpoint(self) -> None:
        self.checkpoints.save(checkpoint_number=int(self.step.numpy()))

    def run(self) -> list[dict]:
        self.build()
        self.restore()
        if self.cluster.is_chief:
            self.folder.write_config(self.effective_config())
        history = self.folder.load_history() if self.resumed_from_step else []
        writer = (
            tf.summary.create_file_writer(self.folder.path(TENSORBOARD))
            if self.cluster.is_chief
            else tf.summary.create_noop_writer()
        )
        train_steps = self._train_steps_fn()
        step = int(self.step.numpy())
        if step >= self.total_steps:
            log.info(
                "%s: already trained %d/%d steps; exporting the model again",
                self.cluster.name,
                step,
                self.total_steps,
            )
        else:
            if step:
                log.info(
                    "%s: input resumes at step %d (step %d of epoch %d), where the "
                    "checkpoint left it",
                    self.cluster.name,
                    step,
                    step % self.steps_per_epoch,
                    step // self.steps_per_epoch + 1,
                )
            iterator = iter(self._distributed("train", training=True, start_step=step))
        first_in_process = True
        while step < self.total_steps:
            epoch = step // self.steps_per_epoch + 1
            epoch_end = epoch * self.steps_per_epoch
            started, steps_done = time.perf_counter(), 0
            self.train_totals.assign(tf.zeros([2]))
            every = self.config.checkpoint_every
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
                if self._any_worker_stopping():
                    if not saved:
                        self.save_checkpoint()
                    self._preempted(step)
            loss_sum, correct_sum = (float(v) for v in self.train_totals.read_value().numpy())
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
            self._diagnose(metrics, first_in_process)
            first_in_process = False
            log.info(
                "%s: %s", self.cluster.name, metrics.line(self.config.epochs, self.total_steps)
            )
            history = [h for h in history if h["epoch"] < epoch] + [vars(metrics)]
            # The epoch's metrics before its checkpoint: killed between the two, a resumed run
            # redoes the end of the epoch and replaces its line; the other order lost the line
            # (the checkpoint said the epoch was done, the metrics had never heard of it).
            if self.cluster.is_chief:
                self.folder.write_history(history, self.resumed_from_step, self.diagnosis)
            self.save_checkpoint()
            if step < self.total_steps and self._any_worker_stopping():
                self._preempted(step)
            with writer.as_default(step=step):
                for key, value in vars(metrics).items():
                    if key not in ("epoch", "step") and value is not None:
                        tf.summary.scalar(key, value)
                writer.flush()
        return history

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
        }

    def export(self, history: list[dict]) -> str | None:
        """Every worker exports (reads may run collectives); only the chief's copy stays."""
        # A plain (non-distributed) copy: the SavedModel must not depend on the strategy.
        weights = self.model.get_weights()
        policy = keras.mixed_precision.global_policy()
        keras.mixed_precision.set_global_policy("float32")
        try:
            serving_model = build_model(
                self.config.architecture, self.config.image_size, self.shards.num_classes
            )
        finally:
            keras.mixed_precision.set_global_policy(policy)
        serving_model.set_weights(weights)
        metadata = {
            "config": self.config.to_json(),
            "label_map": self.shards.folder.label_map,
            "shards": {
                "directory": self.shards.directory,
                "num_records": {s: self.shards.num_records(s) for s in SPLIT_NAMES},
            },
            "total_steps": self.total_steps,
            "num_workers": self.cluster.num_workers,
            WEIGHTS_FINGERPRINT: self.weights_fingerprint(),
            "final_metrics": history[-1] if history else None,
            "tensorflow_version": tf.__version__,
            "keras_version": keras.__version__,
        }
        path = self.folder.write_dir(MODEL)
        export_serving_model(
            serving_model,
            path,
            label_names=self.shards.label_names,
            image_size=self.config.image_size,
            metadata=metadata,
        )
        if not self.cluster.is_chief:
            self.folder.cleanup_worker_tmp()
            return None
        return path

    def weights_fingerprint(self) -> str:
        """sha256 over all weights: equal on every worker when replicas stayed in sync."""
        digest = hashlib.sha256()
        for weight in self.model.get_weights():
            digest.update(weight.tobytes())
        return digest.hexdigest()[:16]


def run(config: TrainConfig) -> int:
    """Train and export as this process's worker; the exit code of `python -m training.train`."""
    try:
        cluster = cluster_from_env()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # The strategy first: MultiWorkerMirroredStrategy must exist before other TF ops.
    strategy = make_strategy(cluster)
    try:
        shard_set = ShardSet.open(config.data)
        trainer = Trainer(config, cluster, strategy, shard_set)
        trainer.folder.check_resumable(trainer.effective_config())
    except (ShardError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
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
    signal.signal(signal.SIGTERM, lambda _signum, _frame: trainer.request_stop())
    try:
        history = trainer.run()
    except Preempted:
        return PREEMPTED_EXIT_CODE
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
        return 2
    except tf.errors.InvalidArgumentError as err:
        # A stored record the decoder refuses (the sharding job stores only what it proved
        # decodable, so: shards from elsewhere, or a decoder change). Name it, one line.
        bad = shard_set.undecodable_records(config.image_size)
        if not bad:
            raise  # not a record's fault: a real bug, keep its traceback
        print(
            f"error: records in {config.data} that cannot be decoded "
            f"({err.message.strip().splitlines()[0][:200]}): {'; '.join(bad)}; "
            "reshard the images or remove these records",
            file=sys.stderr,
        )
        return 2
    log.info("%s: final weights fingerprint %s", cluster.name, trainer.weights_fingerprint())
    if trainer.diagnosis.get("advice"):
        log.info("input diagnosis: %s", trainer.diagnosis["advice"])
    path = trainer.export(history)
    if path and config.evaluate:
        from training.evaluate import evaluate_saved_model, write_evaluation

        evaluation = evaluate_saved_model(path, config.data)
        written = posixpath.join(config.output, EVALUATION)
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
