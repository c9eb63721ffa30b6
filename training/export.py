"""The exported model: a SavedModel that serves raw encoded images.

`serving_default` takes a batch of encoded JPEG/PNG/GIF/BMP bytes (tf.string
[None]) and returns class probabilities, the top class id and its name, so
TensorFlow Serving or `tf.saved_model.load` clients send images as they are,
with no client-side preprocessing. Decoding and resizing are the same
`features.decode_image` training used.
"""

from __future__ import annotations

import json
import posixpath
import uuid

import keras
import tensorflow as tf
from keras.export import ExportArchive

from training import features
from training.model_files import EXTRA_DIR, LABELS_FILE, METADATA_FILE

__all__ = ["EXTRA_DIR", "LABELS_FILE", "METADATA_FILE", "export_serving_model"]


def export_serving_model(
    model: keras.Model,
    path: str,
    *,
    label_names: list[str],
    image_size: int,
    metadata: dict,
) -> str:
    """Write the SavedModel to `path` (replacing it), via a temporary sibling folder."""
    names = tf.constant(label_names)

    def serve(encoded_images):
        # A refusal names the element a client must fix (`images[3]: ...`). Header and
        # decoding run through tf.data with ignore_errors, which drops an element whose op
        # fails (a truncated JPEG fails even the header read) so the batch can say which
        # one it was; the pixel limit is checked before any element is decoded.
        count = tf.shape(encoded_images)[0]
        positions = tf.range(count)

        def survivors(fn, empty):
            """(fn's outputs, their positions) for the elements fn did not fail on."""
            dataset = tf.data.Dataset.from_tensor_slices((encoded_images, positions)).map(
                lambda encoded, i: (fn(encoded), i),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
            return (
                dataset.ignore_errors()
                .batch(tf.cast(tf.maximum(count, 1), tf.int64))
                .reduce(
                    (empty, tf.zeros([0], tf.int32)),
                    lambda done, batch: (
                        tf.concat([done[0], batch[0]], 0),
                        tf.concat([done[1], batch[1]], 0),
                    ),
                )
            )

        def refuse_any(bad, reason):
            first = tf.concat([tf.cast(bad, tf.int32), [-1]], 0)[0]
            message = tf.strings.format("images[{}]: " + reason, [first])
            return tf.debugging.Assert(tf.size(bad) == 0, [message])

        pixels, parsed = survivors(features.header_pixels, tf.zeros([0], tf.int64))
        claimed = tf.tensor_scatter_nd_update(
            tf.fill([count], tf.constant(-1, tf.int64)), parsed[:, None], pixels
        )
        header_checks = [
            refuse_any(
                tf.where(claimed < 0)[:, 0],
                "not a JPEG, PNG, GIF or BMP image (or a corrupt header)",
            ),
            refuse_any(
                tf.where(claimed > features.MAX_PIXELS)[:, 0],
                f"image header claims more than {features.MAX_PIXELS} pixels",
            ),
        ]
        with tf.control_dependencies(header_checks):
            images, decoded = survivors(
                lambda encoded: features.decode_image(encoded, image_size),
                tf.zeros([0, image_size, image_size, 3]),
            )
        failed = tf.sets.difference(positions[None], decoded[None]).values
        with tf.control_dependencies(
            [refuse_any(failed, "cannot be decoded (corrupt or truncated image data)")]
        ):
            images = tf.identity(images)
        probabilities = tf.cond(  # an empty request gets empty answers (the model refuses 0)
            count > 0,
            lambda: tf.nn.softmax(tf.cast(model(images, training=False), tf.float32)),
            lambda: tf.zeros([0, len(label_names)]),
        )
        class_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {
            "probabilities": probabilities,
            "class_id": class_id,
            "class_name": tf.gather(names, class_id),
        }

    archive = ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=serve,
        input_signature=[tf.TensorSpec([None], tf.string, name="images")],
    )
    path = path.rstrip("/")
    staging = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    archive.write_out(staging, verbose=False)
    extra = posixpath.join(staging, EXTRA_DIR)
    tf.io.gfile.makedirs(extra)
    with tf.io.gfile.GFile(posixpath.join(extra, LABELS_FILE), "w") as handle:
        json.dump(label_names, handle, indent=2, ensure_ascii=False)
    with tf.io.gfile.GFile(posixpath.join(extra, METADATA_FILE), "w") as handle:
        json.dump(metadata, handle, indent=2, ensure_ascii=False)
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
    tf.io.gfile.rename(staging, path)
    return path
