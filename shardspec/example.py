"""The image record: feature keys, limits, and a TensorFlow-free `tf.train.Example` codec.

The encoder writes the protobuf wire format of `tf.train.Example` directly
(`tensorflow/core/example/{example,feature}.proto`): a `Features` map from key
to `Feature`, each holding a one-element `BytesList` or packed `Int64List`.
Entries are written in sorted key order, which is what
`SerializeToString(deterministic=True)` does, so the bytes are identical to
TensorFlow's (tests/shardspec compares them). Keeping TensorFlow out of the
Beam workers is what lets a second worker pay off.
"""

from __future__ import annotations

from functools import cache

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
# The stored pixels' 64-bit pHash (beam_jobs.perceptual_hash) as a signed int64: what
# near-duplicate search groups by, readable later without decoding an image.
IMAGE_PHASH = "image/phash"

# Every key with its kind ("bytes" or "int64"); the TensorFlow parse spec is built from this.
FEATURE_KINDS = {
    IMAGE_ENCODED: "bytes",
    IMAGE_FORMAT: "bytes",
    IMAGE_HEIGHT: "int64",
    IMAGE_WIDTH: "int64",
    IMAGE_ID: "bytes",
    IMAGE_SHA256: "bytes",
    LABEL: "int64",
    LABEL_TEXT: "bytes",
    IMAGE_PHASH: "int64",
}
# Keys that shards written before them lack, with what a reader assumes then. Adding a
# key with a default keeps SCHEMA_VERSION: every older folder still reads.
OPTIONAL_DEFAULTS = {IMAGE_SHA256: "", IMAGE_PHASH: 0}

# What training reads of each record; parsing only these is measurably cheaper (bench/).
TRAINING_KEYS = (IMAGE_ENCODED, LABEL)

# Formats a record may carry; anything else is re-encoded by the writer.
STORED_FORMATS = ("jpeg", "png")

# No image may claim more pixels than this: the sharding job rejects such files and the
# serving signature refuses them, both from the header, before decoding (a few-KB PNG can
# claim 40000x40000 pixels, 4.8 GB decoded).
MAX_PIXELS = 50_000_000


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return bytes((value,))
    value &= 0xFFFFFFFFFFFFFFFF  # int64 wire form: negative numbers as 10-byte two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Tags of the length-delimited fields an Example is made of (field number << 3 | 2).
_LENGTH_DELIMITED = 2
_FIELD_1, _FIELD_2, _FIELD_3 = (_varint(n << 3 | _LENGTH_DELIMITED) for n in (1, 2, 3))


def _map_order(key: str) -> list[int]:
    """The order deterministic serialisation writes map keys in (protobuf's upb backend,
    which TensorFlow's Python uses): bytewise, and of two keys where one is a prefix of the
    other, the longer first. C++ protobuf puts the shorter first; the schema's keys are
    prefix-free (tested), so the records are the same bytes under both."""
    return [*key.encode(), 256]


@cache
def _ordered(keys: tuple[str, ...]) -> tuple[tuple[str, bytes], ...]:
    """The keys in map order, each with its map entry's key field."""
    return tuple(
        (k, _FIELD_1 + _varint(len(k.encode())) + k.encode()) for k in sorted(keys, key=_map_order)
    )


def serialize_features(values: dict[str, bytes | int]) -> bytes:
    """Any `{key: bytes | int}` as a serialised Example with one value per feature.

    Each feature is Features.feature = 1, a map entry {key = 1, value = 2: Feature}, and a
    Feature is bytes_list = 1 or int64_list = 3 around a list whose value = 1. The lengths
    are added up rather than each level wrapped in turn, so the image bytes are copied
    once, by the final join, not once per level of nesting."""
    parts, length = [], 0
    for key, entry_key in _ordered(tuple(values)):
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, bytes | int):
            raise TypeError(f"feature {key!r} must be bytes or int, got {type(value).__name__}")
        kind, payload = (
            (_FIELD_1, value) if isinstance(value, bytes) else (_FIELD_3, _varint(value))
        )
        list_head = _FIELD_1 + _varint(len(payload))
        feature_length = len(list_head) + len(payload)
        feature_head = kind + _varint(feature_length)
        value_head = _FIELD_2 + _varint(len(feature_head) + feature_length)
        entry_length = len(entry_key) + len(value_head) + len(feature_head) + feature_length
        head = b"".join(
            (_FIELD_1, _varint(entry_length), entry_key, value_head, feature_head, list_head)
        )
        parts += (head, payload)
        length += len(head) + len(payload)
    return b"".join((_FIELD_1, _varint(length), *parts))  # Example.features = 1


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
    phash: int = 0,
) -> bytes:
    """Serialise one image record. Keyword-only so a swapped height/width cannot slip by."""
    if image_format not in STORED_FORMATS:
        raise ValueError(f"image_format must be one of {STORED_FORMATS}, got {image_format!r}")
    return serialize_features(
        {
            IMAGE_ENCODED: encoded,
            IMAGE_FORMAT: image_format.encode(),
            IMAGE_HEIGHT: height,
            IMAGE_WIDTH: width,
            IMAGE_ID: image_id.encode("utf-8"),
            IMAGE_SHA256: sha256.encode(),
            LABEL: label,
            LABEL_TEXT: label_text.encode("utf-8"),
            IMAGE_PHASH: phash - (1 << 64) if phash >= 1 << 63 else phash,
        }
    )
