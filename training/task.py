"""The learning problem, apart from the loop that drives it (TF Model Garden's `Task`):
the model, its optimizer and schedule, the loss, and the compiled train and eval steps.

Everything here is built in the strategy's scope and runs on every replica; the
loop (training/trainer.py) decides when, the run folder (training/run_folder.py)
where things are written.
"""

from __future__ import annotations

import hashlib
import time

import keras
import tensorflow as tf

from training.config import FINE_TUNE_LR_FACTOR, WARMUP_SHARE, TrainConfig
from training.data import synthetic_dataset
from training.model import average_moving_statistics, build_model, moving_statistics


class FineTuneSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule`, times `factor` from step `boundary` on: the fine-tuning phase after a
    frozen backbone. A function of the step alone, so a resumed run gets the same rates."""

    def __init__(self, schedule, boundary: int, factor: float):
        self.schedule, self.boundary, self.factor = schedule, boundary, factor

    def __call__(self, step):
        rate = self.schedule(step)
        return tf.where(tf.cast(step, tf.int64) < self.boundary, rate, rate * self.factor)

    def get_config(self) -> dict:
        return {
            "schedule": keras.optimizers.schedules.serialize(self.schedule),
            "boundary": self.boundary,
            "factor": self.factor,
        }


class ImageTask:
    """A classifier of `num_classes` trained with Adam on a warm-up + cosine schedule.

    `step` counts optimizer steps; `train_totals` holds [loss sum, correct count] of
    the current epoch per replica, summed only when read: no collective and no host
    sync per step."""

    def __init__(
        self,
        config: TrainConfig,
        strategy: tf.distribute.Strategy,
        *,
        num_classes: int,
        global_batch_size: int,
        learning_rate: float,
        total_steps: int,
        freeze_steps: int = 0,
    ):
        self.config = config
        self.freeze_steps = freeze_steps
        self.strategy = strategy
        self.num_classes = num_classes
        self.global_batch_size = global_batch_size
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        self._eval_step = None
        with strategy.scope():
            self.model = build_model(
                config.architecture,
                config.input.image_size,
                num_classes,
                batch_norm=config.batch_norm,
            )
            # A short linear warm-up (a large global batch starts at a large rate), then
            # cosine decay to zero over the run: a stable end point to evaluate and export.
            warmup = int(WARMUP_SHARE * total_steps)
            schedule = keras.optimizers.schedules.CosineDecay(
                0.0 if warmup else learning_rate,
                decay_steps=total_steps - warmup,
                warmup_target=learning_rate if warmup else None,
                warmup_steps=warmup,
            )
            if freeze_steps:
                schedule = FineTuneSchedule(schedule, freeze_steps, FINE_TUNE_LR_FACTOR)
            optimizer = keras.optimizers.Adam(schedule)
            if keras.mixed_precision.global_policy().name == "mixed_float16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            # Slots for every weight now, not at the first step: a first phase with the
            # backbone frozen would otherwise build them for the head alone.
            optimizer.build(self.model.trainable_variables)
            self.optimizer = optimizer
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self.train_totals = tf.Variable(
                tf.zeros([2]),
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
                name="train_totals",
            )

    def checkpoint(self) -> tf.train.Checkpoint:
        return tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step)

    def _correct(self, logits, labels):
        predicted = tf.argmax(logits, -1, output_type=tf.int32)
        return tf.reduce_sum(tf.cast(tf.equal(predicted, labels), tf.float32))

    def train_steps_fn(self):
        """A compiled `train_steps(iterator, num_steps)`: that many steps in one call,
        the loop in the graph, not in Python. It trains the weights that are trainable
        when it is made (`training.model.freeze_backbone`)."""
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
            self.train_totals.assign_add(tf.stack([loss, self._correct(logits, labels)]))

        # Local BatchNorm statistics: the replicas' moving statistics meet once per call,
        # so they are equal wherever the weights are read (calls end at checkpoints).
        averaged = self.config.batch_norm == "local" and strategy.num_replicas_in_sync > 1
        statistics = moving_statistics(model) if averaged else []

        if self.config.jit_compile:
            replica_step = tf.function(replica_step, jit_compile=True)

        @tf.function
        def train_steps(iterator, num_steps):
            for _ in tf.range(num_steps):
                strategy.run(replica_step, args=next(iterator))
                self.step.assign_add(1)
            if statistics:
                strategy.run(lambda: average_moving_statistics(statistics))

        return train_steps

    def eval_step_fn(self):
        """[loss sum, correct, count] of a batch, summed over replicas. One traced
        function per task: a new one per evaluation would retrace every epoch."""
        if self._eval_step is not None:
            return self._eval_step
        strategy, model = self.strategy, self.model

        def replica_eval(images, labels):
            logits = model(images, training=False)
            loss_sum = tf.reduce_sum(self.loss_fn(labels, logits))
            count = tf.cast(tf.shape(labels)[0], tf.float32)
            return tf.stack([loss_sum, self._correct(logits, labels), count])

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

        config = self.config
        iterator = iter(
            strategy.distribute_datasets_from_function(
                lambda context: synthetic_dataset(
                    config.per_replica_batch_size, config.input.image_size, self.num_classes
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

    def serving_copy(self) -> keras.Model:
        """The trained weights in a plain float32 model: the SavedModel must depend
        neither on the strategy nor on the training precision."""
        weights = self.model.get_weights()
        policy = keras.mixed_precision.global_policy()
        keras.mixed_precision.set_global_policy("float32")
        try:
            model = build_model(
                self.config.architecture, self.config.input.image_size, self.num_classes
            )
        finally:
            keras.mixed_precision.set_global_policy(policy)
        model.set_weights(weights)
        return model

    def weights_fingerprint(self) -> str:
        """sha256 over all weights: equal on every worker when replicas stayed in sync."""
        return _fingerprint(self.model.get_weights())

    def replica_fingerprints(self) -> list[str]:
        """weights_fingerprint of each of this worker's replicas' own copies of the
        weights (a mirrored variable holds one per device): all equal when the local
        replicas stayed in sync."""
        per_variable = [
            self.strategy.experimental_local_results(getattr(v, "value", v))
            for v in self.model.weights
        ]
        return [
            _fingerprint([copies[i].numpy() for copies in per_variable])
            for i in range(len(per_variable[0]))
        ]


def _fingerprint(weights) -> str:
    digest = hashlib.sha256()
    for weight in weights:
        digest.update(weight.tobytes())
    return digest.hexdigest()[:16]
