"""What a user writes instead of the Beam job: one process, one loop, one TFRecordWriter.

    python -m bench.python_loop_shard IMAGES OUT.tfrecord

Same validation and the same Examples as the job (the job's own `prepare_image`;
each record built with `tf.train.Example`, as a user would), no splits, no dead
letters, no staging: the baseline the sharding benchmark compares against.
"""

from __future__ import annotations

import hashlib
import os
import sys

import tensorflow as tf

from beam_jobs.images import ImageRejected, prepare_image
from shardspec import example as spec


def _bytes(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def main(argv: list[str] | None = None) -> int:
    root, output = (argv if argv is not None else sys.argv[1:])[:2]
    labels = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    written = 0
    with tf.io.TFRecordWriter(output) as writer:
        for label_id, label in enumerate(labels):
            for name in sorted(os.listdir(os.path.join(root, label))):
                path = os.path.join(root, label, name)
                with open(path, "rb") as handle:
                    data = handle.read()
                try:
                    image = prepare_image(data)
                except ImageRejected:
                    continue
                feature = {
                    spec.IMAGE_ENCODED: _bytes(image.encoded),
                    spec.IMAGE_FORMAT: _bytes(image.image_format.encode()),
                    spec.IMAGE_HEIGHT: _int(image.height),
                    spec.IMAGE_WIDTH: _int(image.width),
                    spec.IMAGE_ID: _bytes(hashlib.sha256(path.encode()).hexdigest().encode()),
                    spec.IMAGE_SHA256: _bytes(image.sha256.encode()),
                    spec.LABEL: _int(label_id),
                    spec.LABEL_TEXT: _bytes(label.encode()),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString(deterministic=True))
                written += 1
    print(f"wrote {written} records to {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
