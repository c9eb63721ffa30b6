"""The tf.data input pipeline over the TFRecord shards, and a throughput probe.

    python -m training.data --data SHARDS [--split train] [--batches 50]

One builder, `build_dataset`, used for training (file-sharded per worker,
shuffled, augmented, repeated) and for evaluation (record-sharded, in order,
no augmentation). Everything per element runs as TensorFlow graph ops.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import tensorflow as tf

import stageconfig
from stageconfig import ConfigError, user_path
from training import features
from training.config import DataConfig
from training.shards import ShardError, ShardSet

log = logging.getLogger(__name__)

AUTOTUNE = tf.data.AUTOTUNE
MIN_CROP_SCALE = 0.8  # random crops keep at least this fraction of each side
BRIGHTNESS_DELTA = 0.15


CYCLE_LENGTH = 4  # shard files read at once


def shard_files(files: list[str], num_pipelines: int, pipeline_id: int) -> tuple[list[str], bool]:
    """This worker's files, and whether records must be sharded instead.

    With at least as many files as workers each worker reads a disjoint subset
    of whole files (the FILE policy). With fewer, every worker reads every file
    and keeps every n-th record (the DATA policy), which reads n times more.
    """
    if num_pipelines <= 1:
        return list(files), False
    if len(files) >= num_pipelines:
        return list(files[pipeline_id::num_pipelines]), False
    log.warning(
        "only %d shard files for %d input pipelines: falling back to record-level (DATA) "
        "sharding; reshard with --min-shards %d to avoid reading everything on every worker",
        len(files),
        num_pipelines,
        num_pipelines,
    )
    return list(files), True


def _options() -> tf.data.Options:
    options = tf.data.Options()
    options.autotune.enabled = True
    # The order is a pure function of (seed, worker): a resumed run skips to its step and
    # sees what an uninterrupted run would have (parallel work still runs in parallel;
    # only its outputs keep their order).
    options.deterministic = True
    # 0: a pool of its own, sized to the cores at run time, so input threads do not queue
    # behind the training step's ops (None would mean TF's shared default pool).
    options.threading.private_threadpool_size = 0
    # We shard by hand below (the builder knows the files), so tf.distribute must not.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.experimental_optimization.map_parallelization = True
    return options


def _decode(serialized, image_size: int):
    parsed = features.parse_example(serialized, features.TRAINING_KEYS)
    image = features.decode_image(parsed[features.IMAGE_ENCODED], image_size)
    return image, tf.cast(parsed[features.LABEL], tf.int32)


def _decode_batch(serialized, image_size: int):
    """A batch of serialised records -> decoded images and labels: one vectorised parse
    for the batch, then one decode per image inside the same map call."""
    parsed = features.parse_examples(serialized, features.TRAINING_KEYS)
    images = tf.map_fn(
        lambda encoded: features.decode_image(encoded, image_size),
        parsed[features.IMAGE_ENCODED],
        fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.float32),
    )
    return images, tf.cast(parsed[features.LABEL], tf.int32)


def _prepare_batch(records, options: DataConfig):
    images, labels = _decode_batch(records, options.image_size)
    if options.augment:
        images, labels = _augment_batch(images, labels, options.image_size)
    return images, labels


def decoded_megabytes(num_records: int, image_size: int) -> float:
    return num_records * image_size * image_size * 3 * 4 / 2**20  # float32 RGB


def cache_choice(
    options: DataConfig, num_records: int | None, training: bool = True, *, quiet: bool = False
) -> str:
    """What to cache: the option as given, or for "auto" memory when it fits the budget
    (said in the log unless `quiet`: the trainer's input diagnosis asks again).

    "auto" caches training input only: an evaluation dataset is built anew for each
    evaluation, so its cache would be filled and never read again.
    """
    if options.cache != "auto":
        return options.cache
    if num_records is None or not training:
        return ""
    size = decoded_megabytes(num_records, options.image_size)
    if quiet:
        return "memory" if size <= options.cache_budget_mb else ""
    if size <= options.cache_budget_mb:
        log.info(
            "input: caching %d decoded images in memory (%.0f MB <= budget %d MB); "
            "epochs after the first skip decoding",
            num_records,
            size,
            options.cache_budget_mb,
        )
        return "memory"
    log.info(
        "input: not caching: %d decoded images need %.0f MB > budget %d MB",
        num_records,
        size,
        options.cache_budget_mb,
    )
    return ""


def _augment_batch(images, labels, image_size: int):
    """Random flip, crop/scale and brightness for a whole batch at once.

    Vectorised after `batch`: one op per batch instead of five per image
    (bench/ measured the per-element version at several % of the pipeline).
    Each image still gets its own flip, crop box and brightness shift. The flip
    is the crop box's: `crop_and_resize` samples a box whose x1 > x2 mirrored,
    which saves a pass over the batch (a third of the augmentation's time).
    """
    batch = tf.shape(images)[0]
    scale = tf.random.uniform([batch, 1], MIN_CROP_SCALE, 1.0)
    corner = tf.random.uniform([batch, 2]) * (1.0 - scale)
    top, left = corner[:, :1], corner[:, 1:]
    flip = tf.random.uniform([batch, 1]) < 0.5
    right = left + scale
    boxes = tf.concat(  # y1, x1, y2, x2 in [0, 1]
        [top, tf.where(flip, right, left), top + scale, tf.where(flip, left, right)], axis=1
    )
    images = tf.image.crop_and_resize(
        images, boxes, tf.range(batch), [image_size, image_size], method="bilinear"
    )
    shift = tf.random.uniform([batch, 1, 1, 1], -BRIGHTNESS_DELTA, BRIGHTNESS_DELTA)
    return tf.clip_by_value(images + shift, 0.0, 1.0), labels


def build_dataset(
    files: list[str],
    *,
    batch_size: int,
    training: bool,
    compression_type: str = "",
    options: DataConfig = DataConfig(),
    seed: int = 0,
    num_pipelines: int = 1,
    pipeline_id: int = 0,
    num_records: int | None = None,
    skip_batches: int = 0,
) -> tf.data.Dataset:
    """(images float32 [B, S, S, 3] in [0, 1], labels int32 [B]) batches for one worker.

    `batch_size` is this pipeline's batch (the per-replica batch under a
    distribution strategy). Training datasets repeat forever and drop the last
    partial batch, so every worker runs the same number of steps; evaluation
    datasets are finite, in order, and keep every record exactly once across
    all pipelines. `num_records`: how many records this pipeline reads (for
    `cache="auto"`; unknown means no cache). `seed` orders the training input.
    `skip_batches`: where a resumed run
    starts; the training order depends only on the seed and the files, so the
    batches that follow are exactly those an uninterrupted run would have read
    next (skipped before decoding where nothing is cached).
    """
    if not files:
        raise ShardError("no shard files to read")
    own_files, shard_records = (
        shard_files(files, num_pipelines, pipeline_id)
        if training
        else (list(files), num_pipelines > 1)
    )
    ds = tf.data.Dataset.from_tensor_slices(own_files)
    if training:
        ds = ds.shuffle(len(own_files), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=compression_type),
        cycle_length=max(1, min(CYCLE_LENGTH, len(own_files))),
        num_parallel_calls=AUTOTUNE,
        deterministic=True,
    )
    if shard_records:
        ds = ds.shard(num_pipelines, pipeline_id)
    cache = cache_choice(options, num_records, training)
    if training and not cache:
        # Shuffle and batch the small encoded records, then parse a whole batch at once and
        # decode and augment it in one map: nothing copies decoded images around, and the
        # per-element work is one op instead of three (bench/: 1.14x the per-record order).
        ds = ds.repeat()
        ds = ds.shuffle(options.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        ds = ds.batch(batch_size, drop_remainder=True).skip(skip_batches)
        ds = ds.map(
            lambda records: _prepare_batch(records, options),
            num_parallel_calls=AUTOTUNE,
            deterministic=True,
        )
        return ds.prefetch(AUTOTUNE).with_options(_options())
    ds = ds.map(
        lambda record: _decode(record, options.image_size),
        num_parallel_calls=AUTOTUNE,
        deterministic=True,
    )
    if cache:
        # After decode+resize, before augmentation: epochs after the first skip decoding.
        ds = ds.cache() if cache == "memory" else ds.cache(cache)
    if training:
        ds = ds.repeat()
        ds = ds.shuffle(options.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=training, num_parallel_calls=AUTOTUNE)
    if training:
        ds = ds.skip(skip_batches)
    if training and options.augment:
        ds = ds.map(
            lambda images, labels: _augment_batch(images, labels, options.image_size),
            num_parallel_calls=AUTOTUNE,
            deterministic=True,
        )
    ds = ds.prefetch(AUTOTUNE)
    return ds.with_options(_options())


def synthetic_dataset(batch_size: int, image_size: int, num_classes: int) -> tf.data.Dataset:
    """One random batch of the real shapes and dtypes, repeated: input that costs nothing.

    Training on it measures the step alone; the real pipeline's speed divided
    by this one is the share of training time the input pipeline does not cost.
    """
    images = tf.random.stateless_uniform([batch_size, image_size, image_size, 3], seed=[0, 1])
    labels = tf.random.stateless_uniform(
        [batch_size], seed=[0, 2], maxval=num_classes, dtype=tf.int32
    )
    return tf.data.Dataset.from_tensors((images, labels)).repeat()


def measure_throughput(dataset: tf.data.Dataset, batches: int, warmup: int = 5) -> float:
    """Images per second the pipeline delivers on its own (no model)."""
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    images = 0
    started = time.perf_counter()
    for _ in range(batches):
        images_batch, _ = next(iterator)
        images += int(images_batch.shape[0])
    return images / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.data",
        description="Measure the input pipeline's throughput (images/s) without a model. "
        "The input flags are the trainer's, except that --cache defaults to none here: "
        "this measures decoding every batch.",
    )
    parser.add_argument(
        "--data", required=True, type=user_path, help="Shard directory (local or gs://)."
    )
    parser.add_argument("--split", default="train", help="Split to read (default train).")
    parser.add_argument("--batch-size", type=int, default=64, help="Batch size (default 64).")
    parser.add_argument("--batches", type=int, default=50, help="Batches to time (default 50).")
    stageconfig.add_arguments(parser, DataConfig)  # the trainer's own input flags
    # Not the trainer's "auto": this measures the pipeline decoding every batch.
    parser.set_defaults(cache="")
    args = parser.parse_args(argv)
    try:
        shard_set = ShardSet.open(args.data)
        files = shard_set.files(args.split)
        if not files:
            raise ShardError(f"split {args.split!r} has no shards in {args.data}")
        dataset = build_dataset(
            files,
            batch_size=args.batch_size,
            training=True,
            compression_type=shard_set.compression_type,
            options=stageconfig.from_args(DataConfig, args),
        )
    except (ShardError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rate = measure_throughput(dataset, args.batches)
    print(
        f"input pipeline: {rate:.1f} images/s ({args.split}, batch {args.batch_size}, "
        f"{args.image_size}px, {args.batches} batches)"
    )
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(main())
