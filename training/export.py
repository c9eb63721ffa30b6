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

EXTRA_DIR = "assets.extra"  # TensorFlow Serving's place for files that travel with a model
LABELS_FILE = "labels.json"
METADATA_FILE = "training_metadata.json"


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
        positions = tf.range(tf.shape(encoded_images)[0])
        images = tf.map_fn(
            lambda element: features.decode_image(element[0], image_size, index=element[1]),
            (encoded_images, positions),
            fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.float32),
        )
        probabilities = tf.nn.softmax(tf.cast(model(images, training=False), tf.float32))
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
