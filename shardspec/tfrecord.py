"""TFRecord shard files: framing, compression and naming.

The sharding job writes whole shards itself (instead of `WriteToTFRecord`) so
that it knows each shard's record count and checksum without reading the
output back, and so that the same records always give the same bytes. The
framing is TFRecord's documented one (length, masked CRC32C of the length,
data, masked CRC32C of the data); tests read the files back with TensorFlow.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterable

import google_crc32c

_MASK_DELTA = 0xA282EAD8


def _masked_crc32c(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return b"".join(
        (
            length,
            struct.pack("<I", _masked_crc32c(length)),
            data,
            struct.pack("<I", _masked_crc32c(data)),
        )
    )


def encode_shard(records: Iterable[bytes], compression: str) -> bytes:
    """All records of one shard as file bytes."""
    return compress_shard(b"".join(frame_record(record) for record in records), compression)


def compress_shard(body: bytes, compression: str) -> bytes:
    """Framed records (concatenated `frame_record`s) as file bytes. gzip with mtime=0
    keeps them reproducible."""
    if compression == "gzip":
        return gzip.compress(body, compresslevel=6, mtime=0)
    if compression == "none":
        return body
    raise ValueError(f"unknown compression {compression!r}")


class CorruptShardError(ValueError):
    """A shard whose framing or CRCs do not check out."""


def iter_records(data: bytes, compression: str):
    """Records of one shard file's bytes, verifying every length and data CRC."""
    if compression == "gzip":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise CorruptShardError(f"gzip stream is damaged: {err}") from None
    offset, index = 0, 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise CorruptShardError(f"record {index}: truncated header at byte {offset}")
        length_bytes = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        if length_crc != _masked_crc32c(length_bytes):
            raise CorruptShardError(f"record {index}: length CRC mismatch at byte {offset}")
        start, end = offset + 12, offset + 12 + length
        if end + 4 > len(data):
            raise CorruptShardError(f"record {index}: truncated data at byte {offset}")
        record = data[start:end]
        (data_crc,) = struct.unpack("<I", data[end : end + 4])
        if data_crc != _masked_crc32c(record):
            raise CorruptShardError(f"record {index}: data CRC mismatch at byte {offset}")
        yield record
        offset, index = end + 4, index + 1
