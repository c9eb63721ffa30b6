"""TensorFlow's side of the record contract: parse and decode what `shardspec` defines.

The keys, schema version and limits live in `shardspec.example` (no TensorFlow);
the sharding job writes with its encoder, and training and the serving signature
parse and decode with `parse_example` / `decode_image` from here, so a served
image is preprocessed exactly as a training image was. The keys follow the
conventions of TensorFlow's own model code (Model Garden, the object detection
API), so the shards are readable by tools that expect them.
"""

from __future__ import annotations

import base64

import tensorflow as tf

from shardspec.example import (  # noqa: F401  (the contract, re-exported for training code)
    FEATURE_KINDS,
    IMAGE_ENCODED,
    IMAGE_FORMAT,
    IMAGE_HEIGHT,
    IMAGE_ID,
    IMAGE_SHA256,
    IMAGE_WIDTH,
    LABEL,
    LABEL_TEXT,
    MAX_PIXELS,
    OPTIONAL_DEFAULTS,
    SCHEMA_VERSION,
    TRAINING_KEYS,
)

_DTYPES = {"bytes": tf.string, "int64": tf.int64}
FEATURE_SPEC = {
    key: tf.io.FixedLenFeature([], _DTYPES[kind], default_value=OPTIONAL_DEFAULTS.get(key))
    for key, kind in FEATURE_KINDS.items()
}


def parse_example(
    serialized: tf.Tensor, keys: tuple[str, ...] | None = None
) -> dict[str, tf.Tensor]:
    """Parse one serialised Example (a scalar string tensor): all features, or `keys`."""
    spec = FEATURE_SPEC if keys is None else {key: FEATURE_SPEC[key] for key in keys}
    return tf.io.parse_single_example(serialized, spec)


def parse_examples(
    serialized: tf.Tensor, keys: tuple[str, ...] | None = None
) -> dict[str, tf.Tensor]:
    """Parse a batch of serialised Examples (a string vector) in one op."""
    spec = FEATURE_SPEC if keys is None else {key: FEATURE_SPEC[key] for key in keys}
    return tf.io.parse_example(serialized, spec)


JPEG_SCALES = (1, 2, 4, 8)  # the DCT scalings libjpeg decodes at directly
# An 8x8 JPEG, fed to the JPEG-only ops in place of non-JPEG input. Those ops sit in the JPEG
# branch of a tf.cond, yet inside tf.data the suite once saw ExtractJpegShape run on PNG bytes
# ("Not a JPEG file: starts with 0x89 0x50"): an optimised graph need not keep a branch's
# ops behind its predicate. Guarding their input makes any such run harmless and cheap.
_PLACEHOLDER_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQEBLAEsAAD/2wBDAFA3PEY8MlBGQUZaVVBfeMiCeG5uePWvuZHI//////////////////"
    "//////////////////////////////////2wBDAVVaWnhpeOuCguv//////////////////////////////////"
    "///////////////////////////////////////wAARCAAIAAgDASIAAhEBAxEB/8QAFQABAQAAAAAAAAAAAAAA"
    "AAAAAAT/xAAUEAEAAAAAAAAAAAAAAAAAAAAA/8QAFAEBAAAAAAAAAAAAAAAAAAAAAP/EABQRAQAAAAAAAAAAAAAA"
    "AAAAAAD/2gAMAwEAAhEDEQA/AIgAf//Z"
)


def _jpeg_only(encoded: tf.Tensor) -> tf.Tensor:
    return tf.where(tf.io.is_jpeg(encoded), encoded, tf.constant(_PLACEHOLDER_JPEG))


def _decode_jpeg_near(encoded: tf.Tensor, image_size: int) -> tf.Tensor:
    """Decode a JPEG at the smallest DCT scale that still covers `image_size`.

    libjpeg can decode at 1/2, 1/4 or 1/8 of full size for a fraction of the
    work (it skips most of the inverse DCT); the header gives the size without
    decoding. A 400 px photo for a 64 px model decodes at 1/4, then the resize
    works on a small image.
    """
    encoded = _jpeg_only(encoded)
    shape = tf.image.extract_jpeg_shape(encoded)
    shortest = tf.minimum(shape[0], shape[1])
    scale = tf.add_n([tf.cast(shortest >= image_size * s, tf.int32) for s in JPEG_SCALES[1:]])
    return tf.switch_case(
        scale,
        [lambda s=s: tf.io.decode_jpeg(encoded, channels=3, ratio=s) for s in JPEG_SCALES],
    )


def _header_uint(encoded: tf.Tensor, offset: int, size: int, little_endian: bool) -> tf.Tensor:
    raw = tf.io.decode_raw(tf.strings.substr(encoded, offset, size), tf.uint8)
    raw = tf.cast(tf.pad(raw, [[0, size - tf.shape(raw)[0]]]), tf.int64)  # short input: 0
    weights = [256**i for i in range(size)]
    return tf.reduce_sum(raw * tf.constant(weights if little_endian else weights[::-1], tf.int64))


def gif_largest_pixels(encoded: tf.Tensor) -> tf.Tensor:
    """The largest of a GIF's logical screen and its frames, in pixels (int64).

    The screen alone is not enough: a 1x1 screen may hold a 20000x20000 frame, which
    the decoder allocates. Walks the block structure as beam_jobs/images.py does
    (same rule in the sharding job): extensions and image data are sub-block chains;
    an image descriptor holds the frame's size. One loop step per block or sub-block.
    """
    raw = tf.cast(tf.io.decode_raw(encoded, tf.uint8), tf.int64)
    n = tf.size(raw, out_type=tf.int64)

    def at(i):
        i = tf.cast(i, tf.int64)
        inside = tf.clip_by_value(i, tf.constant(0, tf.int64), tf.maximum(n - 1, 0))
        return tf.where(i < n, tf.gather(raw, inside), tf.constant(0, tf.int64))

    def u16(i):
        return at(i) + 256 * at(i + 1)

    def colour_table(flags):
        return tf.where(
            flags >= 128, 3 * tf.bitwise.left_shift(tf.constant(2, tf.int64), flags % 8), 0
        )

    def keep_going(pos, in_sub_blocks, largest, done):
        return tf.logical_and(tf.logical_not(done), pos < n)

    def step(pos, in_sub_blocks, largest, done):
        byte = at(pos)
        is_extension, is_image = tf.equal(byte, 0x21), tf.equal(byte, 0x2C)
        top_pos = tf.where(is_extension, pos + 2, pos + 10 + colour_table(at(pos + 9)) + 1)
        top_largest = tf.where(is_image, tf.maximum(largest, u16(pos + 5) * u16(pos + 7)), largest)
        block_ends = tf.logical_not(tf.logical_or(is_extension, is_image))  # trailer or junk
        return (
            tf.where(in_sub_blocks, pos + byte + 1, top_pos),
            tf.where(in_sub_blocks, byte != 0, tf.logical_not(block_ends)),
            tf.where(in_sub_blocks, largest, top_largest),
            tf.logical_and(tf.logical_not(in_sub_blocks), block_ends),
        )

    start = tf.constant(13, tf.int64) + colour_table(at(10))
    _, _, largest, _ = tf.while_loop(
        keep_going,
        step,
        (start, tf.constant(False), u16(6) * u16(8), tf.constant(False)),
        maximum_iterations=tf.cast(n, tf.int32) + 1,
    )
    return largest


def header_pixels(encoded: tf.Tensor) -> tf.Tensor:
    """Pixels the header claims (int64), without decoding; -1 unless JPEG/PNG/GIF/BMP."""

    def u(offset: int, size: int, little_endian: bool) -> tf.Tensor:
        return _header_uint(encoded, offset, size, little_endian)

    def jpeg():
        shape = tf.cast(tf.image.extract_jpeg_shape(_jpeg_only(encoded)), tf.int64)
        return shape[0] * shape[1]

    def bmp():
        height = u(22, 4, True)
        height = tf.where(height >= 2**31, 2**32 - height, height)  # negative: top-down rows
        return u(18, 4, True) * height

    def starts(magic: bytes) -> tf.Tensor:
        return tf.equal(tf.strings.substr(encoded, 0, len(magic)), magic)

    return tf.case(
        [
            (tf.io.is_jpeg(encoded), jpeg),
            (starts(b"\x89PNG"), lambda: u(16, 4, False) * u(20, 4, False)),  # IHDR
            (starts(b"GIF"), lambda: gif_largest_pixels(encoded)),
            (starts(b"BM"), bmp),
        ],
        default=lambda: tf.constant(-1, tf.int64),
        exclusive=False,
    )


def check_header(
    encoded: tf.Tensor, max_pixels: int = MAX_PIXELS, index: tf.Tensor | None = None
) -> tf.Tensor:
    """The pixels the header claims, after refusing (InvalidArgumentError) anything that
    is not a JPEG/PNG/GIF/BMP or claims more than `max_pixels`; nothing is decoded. With
    `index` (the element's position in a served batch) the message names it: `images[3]: ...`.
    """
    pixels = header_pixels(encoded)

    def refusal(reason: str) -> tf.Tensor:
        if index is None:
            return tf.constant(reason)
        return tf.strings.format("images[{}]: " + reason, [index])

    checks = [
        tf.debugging.Assert(
            pixels >= 0, [refusal("not a JPEG, PNG, GIF or BMP image (or a corrupt header)")]
        ),
        tf.debugging.Assert(
            pixels <= max_pixels, [refusal(f"image header claims more than {max_pixels} pixels")]
        ),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(pixels)


def decode_image(
    encoded: tf.Tensor,
    image_size: int,
    max_pixels: int = MAX_PIXELS,
    index: tf.Tensor | None = None,
) -> tf.Tensor:
    """Encoded JPEG/PNG/GIF/BMP bytes -> float32 [image_size, image_size, 3] in [0, 1].

    Used by the training input pipeline and by the exported serving signature,
    so that a served image is preprocessed exactly as a training image was.
    `expand_animations=False` keeps the output rank fixed for GIFs as well.
    `check_header` refuses anything else before a byte is decoded.
    """
    with tf.control_dependencies([check_header(encoded, max_pixels, index)]):
        encoded = tf.identity(encoded)
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
