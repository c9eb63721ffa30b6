"""Input diagnosis for every run: how much of a training step waits for input, and what helps.

Input-bound training is the most common waste in this field and the hardest to
see from a loss curve. Each run measures, once, what a step costs without
input (forward, backward and the gradient all-reduce on an in-memory batch; the
optimizer update is left out so the model is untouched), and the decode
ceiling of a sample of its own shards (records already in memory, decoded and
resized as training does). Each epoch's step time then splits into compute and
input wait, and `advice()` turns the numbers into one sentence.
"""

from __future__ import annotations

import time

import tensorflow as tf

from training import features
from training.config import DataConfig
from training.shards import ShardSet

AUTOTUNE = tf.data.AUTOTUNE
INPUT_BOUND = 0.2  # above this share of a step waiting for input, say so


def sample_encoded(shard_set: ShardSet, split: str = "train", limit: int = 256) -> tf.Tensor:
    """Up to `limit` encoded images from the first shards of a split."""
    records = tf.data.TFRecordDataset(
        shard_set.files(split), compression_type=shard_set.compression_type
    )
    encoded = records.take(limit).map(
        lambda r: features.parse_example(r, (features.IMAGE_ENCODED,))[features.IMAGE_ENCODED]
    )
    return tf.stack(list(encoded))


def decode_ceiling_dataset(encoded: tf.Tensor, batch_size: int, image_size: int) -> tf.data.Dataset:
    """Encoded images already in memory, decoded and resized in parallel: the fastest any
    pipeline over these images can deliver them (no reading, parsing or augmenting)."""
    ds = tf.data.Dataset.from_tensor_slices(encoded).repeat()
    ds = ds.map(
        lambda data: (features.decode_image(data, image_size), 0),
        num_parallel_calls=AUTOTUNE,
        deterministic=False,
    )
    return ds.batch(batch_size).prefetch(AUTOTUNE)


def decode_ceiling(
    shard_set: ShardSet, image_size: int, batch_size: int = 32, seconds: float = 1.5
) -> float:
    """Images per second this process decodes the run's own images at, at most."""
    encoded = sample_encoded(shard_set)
    iterator = iter(decode_ceiling_dataset(encoded, batch_size, image_size))
    next(iterator)  # warm-up: tracing, thread pools
    images, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        images += int(next(iterator)[0].shape[0])
    return images / (time.perf_counter() - started)


def input_wait_share(step_seconds: float, compute_step_seconds: float) -> float:
    """The share of a step not explained by compute: waiting for the next batch."""
    if step_seconds <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - compute_step_seconds / step_seconds))


def advice(
    share: float,
    *,
    images_per_second: float,
    ceiling_per_worker: float,
    num_workers: int,
    image_size: int,
    max_side: int,
    cached: bool,
) -> str:
    """One sentence: input-bound or not, and the cheapest thing that would help."""
    if share < INPUT_BOUND:
        return (
            f"compute-bound: input waits {share:.0%} of a step; a faster input pipeline "
            "would not speed this run up"
        )
    if cached:
        # Decoding stopped after the first epoch: smaller shards or more decoding cores
        # would change nothing. What the probe leaves out is what remains.
        return (
            f"{share:.0%} of a step is outside the measured compute, but decoding is not "
            "the cause: the decoded images come from the cache after the first epoch; the "
            "rest is augmentation, batching and the optimizer update (the compute probe "
            "leaves those out)"
        )
    steps = ["--cache memory (decoded images in RAM) if they fit"]
    if not max_side or max_side > 2 * image_size:
        steps.append(f"store shards at max_side {2 * image_size} (decoding shrinks with them)")
    ceiling = ceiling_per_worker * num_workers
    if ceiling < 1.2 * images_per_second:
        steps.append("more CPU cores per worker for decoding (the decode ceiling is near)")
    return (
        f"input-bound {share:.0%}: "
        + ("; or ".join(steps) or "more input cores")
        + (
            f" (decode ceiling {ceiling:.0f} images/s over {num_workers} worker(s), "
            f"training {images_per_second:.0f})"
        )
    )


class InputDiagnosis:
    """One run's diagnosis: the step cost without input (once per process, on every
    worker: the probe runs collectives) and the decode ceiling (the chief), then each
    epoch's input-wait share and one sentence of advice, the chief's alone (the other
    workers' `report` holds no advice). `report` goes to the metrics."""

    def __init__(
        self,
        *,
        measure_compute_step,
        shard_set: ShardSet,
        is_chief: bool,
        num_workers: int,
        global_batch_size: int,
        input_config: DataConfig,
    ):
        self._measure_compute_step = measure_compute_step
        self.shards, self.is_chief, self.num_workers = shard_set, is_chief, num_workers
        self.image_size, self.global_batch_size = input_config.image_size, global_batch_size
        self.input_config = input_config
        self._compute_step_seconds: float | None = None
        self.report: dict = {}

    def observe(self, metrics, first_in_process: bool) -> None:
        """Fill the epoch's `input_wait_share`; the first time, probe and measure."""
        from training.data import cache_choice

        if self._compute_step_seconds is None:
            self._compute_step_seconds = self._measure_compute_step()
            ceiling = decode_ceiling(self.shards, self.image_size) if self.is_chief else None
            self.report = {
                "compute_step_ms": 1000 * self._compute_step_seconds,
                "decode_ceiling_images_per_second_per_worker": ceiling,
            }
        steps = metrics.images_per_second * metrics.seconds / self.global_batch_size
        share = input_wait_share(metrics.seconds / steps, self._compute_step_seconds)
        # The first epoch of a process also pays for tracing and warming up (and fills the
        # cache): its share would mostly measure that, so it is left out.
        if first_in_process:
            if self.is_chief:  # the advice is the chief's: it measured the decode ceiling
                self.report.setdefault(
                    "advice", "one epoch only: train 2 or more epochs to measure the input wait"
                )
            return
        metrics.input_wait_share = share
        ceiling = self.report.get("decode_ceiling_images_per_second_per_worker")
        if ceiling:
            # The same choice build_dataset made for this worker's share of the records.
            records = -(-self.shards.num_records("train") // self.num_workers)
            cached = bool(cache_choice(self.input_config, records, quiet=True))
            self.report.update(
                input_wait_share=share,
                advice=advice(
                    share,
                    images_per_second=metrics.images_per_second,
                    ceiling_per_worker=ceiling,
                    num_workers=self.num_workers,
                    image_size=self.image_size,
                    max_side=self.shards.folder.max_side,
                    cached=cached,
                ),
            )
