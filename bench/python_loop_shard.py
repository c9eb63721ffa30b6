"""What a user writes instead of the Beam job: one process, one loop, one TFRecordWriter.

    python -m bench.python_loop_shard IMAGES OUT.tfrecord

Same validation and the same Examples as the job (it calls the job's own
`prepare_image` and `encode_example`), no splits, no dead letters, no
staging: the baseline the sharding benchmark compares against.
"""

from __future__ import annotations

import hashlib
import os
import sys

import tensorflow as tf

from beam_jobs.images import ImageRejected, prepare_image
from training.features import encode_example


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
                writer.write(
                    encode_example(
                        encoded=image.encoded,
                        image_format=image.image_format,
                        height=image.height,
                        width=image.width,
                        image_id=hashlib.sha256(path.encode()).hexdigest(),
                        sha256=image.sha256,
                        label=label_id,
                        label_text=label,
                    )
                )
                written += 1
    print(f"wrote {written} records to {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
