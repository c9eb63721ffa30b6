"""The TFRecord record contract, shared by the Beam writer and the tf.data reader.

Nothing else in the project spells a feature key: the sharding job builds its
`tf.train.Example`s with `encode_example`, training and the serving signature
parse and decode with `parse_example` / `decode_image` from here. The keys follow
the conventions of TensorFlow's own model code (Model Garden, the object
detection API), so the shards are readable by tools that expect them.
"""

from __future__ import annotations

import tensorflow as tf

# Bumped whenever a key, dtype or meaning changes; readers refuse other versions.
SCHEMA_VERSION = 1

IMAGE_ENCODED = "image/encoded"
IMAGE_FORMAT = "image/format"
IMAGE_HEIGHT = "image/height"
IMAGE_WIDTH = "image/width"
IMAGE_ID = "image/id"
IMAGE_SHA256 = "image/key/sha256"
LABEL = "image/class/label"
LABEL_TEXT = "image/class/text"

# Formats a record may carry; anything else is re-encoded by the writer.
STORED_FORMATS = ("jpeg", "png")

FEATURE_SPEC = {
    IMAGE_ENCODED: tf.io.FixedLenFeature([], tf.string),
    IMAGE_FORMAT: tf.io.FixedLenFeature([], tf.string),
    IMAGE_HEIGHT: tf.io.FixedLenFeature([], tf.int64),
    IMAGE_WIDTH: tf.io.FixedLenFeature([], tf.int64),
    IMAGE_ID: tf.io.FixedLenFeature([], tf.string),
    IMAGE_SHA256: tf.io.FixedLenFeature([], tf.string, default_value=""),
    LABEL: tf.io.FixedLenFeature([], tf.int64),
    LABEL_TEXT: tf.io.FixedLenFeature([], tf.string),
}


def _bytes(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def encode_example(
    *,
    encoded: bytes,
    image_format: str,
    height: int,
    width: int,
    image_id: str,
    sha256: str,
    label: int,
    label_text: str,
) -> bytes:
    """Serialise one image record. Keyword-only so a swapped height/width cannot slip by."""
    if image_format not in STORED_FORMATS:
        raise ValueError(f"image_format must be one of {STORED_FORMATS}, got {image_format!r}")
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                IMAGE_ENCODED: _bytes(encoded),
                IMAGE_FORMAT: _bytes(image_format.encode()),
                IMAGE_HEIGHT: _int(height),
                IMAGE_WIDTH: _int(width),
                IMAGE_ID: _bytes(image_id.encode("utf-8")),
                IMAGE_SHA256: _bytes(sha256.encode()),
                LABEL: _int(label),
                LABEL_TEXT: _bytes(label_text.encode("utf-8")),
            }
        )
    )
    return example.SerializeToString(deterministic=True)


def parse_example(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
    """Parse one serialised Example (a scalar string tensor) into its features."""
    return tf.io.parse_single_example(serialized, FEATURE_SPEC)


JPEG_SCALES = (1, 2, 4, 8)  # the DCT scalings libjpeg decodes at directly


def _decode_jpeg_near(encoded: tf.Tensor, image_size: int) -> tf.Tensor:
    """Decode a JPEG at the smallest DCT scale that still covers `image_size`.

    libjpeg can decode at 1/2, 1/4 or 1/8 of full size for a fraction of the
    work (it skips most of the inverse DCT); the header gives the size without
    decoding. A 400 px photo for a 64 px model decodes at 1/4, then the resize
    works on a small image.
    """
    shape = tf.image.extract_jpeg_shape(encoded)
    shortest = tf.minimum(shape[0], shape[1])
    scale = tf.add_n([tf.cast(shortest >= image_size * s, tf.int32) for s in JPEG_SCALES[1:]])
    return tf.switch_case(
        scale,
        [lambda s=s: tf.io.decode_jpeg(encoded, channels=3, ratio=s) for s in JPEG_SCALES],
    )


def decode_image(encoded: tf.Tensor, image_size: int) -> tf.Tensor:
    """Encoded JPEG/PNG/GIF/BMP/WebP bytes -> float32 [image_size, image_size, 3] in [0, 1].

    Used by the training input pipeline and by the exported serving signature,
    so that a served image is preprocessed exactly as a training image was.
    `expand_animations=False` keeps the output rank fixed for GIFs as well.
    """
    image = tf.cond(
        tf.io.is_jpeg(encoded),
        lambda: _decode_jpeg_near(encoded, image_size),
        lambda: tf.io.decode_image(encoded, channels=3, expand_animations=False, dtype=tf.uint8),
    )
    image.set_shape([None, None, 3])
    # Area averaging: antialiased for downscaling and, unlike `antialias=True`, no slower
    # than bilinear (bench/: antialias=True cost a third of the pipeline's throughput).
    image = tf.image.resize(image, [image_size, image_size], method="area")
    return tf.cast(image, tf.float32) / 255.0
