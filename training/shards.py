"""Opening a shard directory written by the sharding job, with clear refusals.

The trainer trusts an output only when its `_SUCCESS` marker exists, its
`metadata.json` has the schema version this code reads, and every shard listed
there exists. Uses `tf.io.gfile`, which reads local paths and `gs://`.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass

import tensorflow as tf

from shardspec.example import SCHEMA_VERSION
from shardspec.layout import DEFAULT_COMPRESSION, METADATA, SUCCESS, tf_compression_type


class ShardError(ValueError):
    """The shard directory cannot be trained on; the message says why and where."""


def _check_location(directory: str, metadata: dict) -> None:
    """A reused output points at another run's shards: they must still be the same."""
    location = metadata["location"]
    try:
        with tf.io.gfile.GFile(posixpath.join(location, METADATA), "r") as handle:
            target = json.load(handle)
        complete = tf.io.gfile.exists(posixpath.join(location, SUCCESS))
    except (tf.errors.NotFoundError, json.JSONDecodeError):
        target, complete = {}, False
    if not complete or target.get("fingerprint") != metadata.get("fingerprint"):
        raise ShardError(
            f"{directory} reuses the shards in {location}, which were replaced or removed "
            "since; rerun the sharding job with --force-reshard"
        )


@dataclass(frozen=True)
class ShardSet:
    directory: str
    metadata: dict

    @classmethod
    def open(cls, directory: str) -> ShardSet:
        directory = directory.rstrip("/")
        if not tf.io.gfile.exists(directory):
            raise ShardError(f"shard directory does not exist: {directory}")
        if not tf.io.gfile.exists(posixpath.join(directory, SUCCESS)):
            raise ShardError(
                f"{directory} has no {SUCCESS} marker: the sharding job did not finish there "
                "(still running, failed or killed); rerun it"
            )
        try:
            with tf.io.gfile.GFile(posixpath.join(directory, METADATA), "r") as handle:
                metadata = json.load(handle)
        except (tf.errors.NotFoundError, json.JSONDecodeError) as err:
            raise ShardError(f"cannot read {directory}/{METADATA}: {err}") from None
        version = metadata.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ShardError(
                f"{directory}/{METADATA} has schema_version {version!r}; this trainer reads "
                f"version {SCHEMA_VERSION}: reshard with the matching beam_jobs"
            )
        if metadata.get("location"):
            _check_location(directory, metadata)
        shard_set = cls(directory, metadata)
        # One stat per shard before training (no read): catches missing, truncated and
        # replaced files by name. Flipped bits are caught by the record CRCs while reading.
        missing, wrong_size = [], []
        for shard, path in shard_set._shards():
            try:
                size = tf.io.gfile.stat(path).length
            except tf.errors.NotFoundError:
                missing.append(path)
                continue
            if "num_bytes" in shard and size != shard["num_bytes"]:
                wrong_size.append(
                    f"{shard['file']} ({size} bytes, {METADATA} says {shard['num_bytes']})"
                )
        if missing:
            raise ShardError(f"shards listed in {METADATA} are missing: {', '.join(missing[:5])}")
        if wrong_size:
            raise ShardError(
                f"shards in {directory} were changed after the sharding job wrote them: "
                + ", ".join(wrong_size[:5])
                + "; rerun the sharding job"
            )
        return shard_set

    @property
    def shard_root(self) -> str:
        """Where the shard files are: here, or the folder a reused output points at."""
        return self.metadata.get("location") or self.directory

    def _shards(self):
        for split in self.metadata.get("splits", {}).values():
            for shard in split.get("shards", []):
                yield shard, posixpath.join(self.shard_root, shard["file"])

    def corrupt_files(self) -> list[str]:
        """Shards whose bytes differ from the sha256 in metadata.json (reads every shard)."""
        corrupt = []
        for shard, path in self._shards():
            digest = hashlib.sha256()
            with tf.io.gfile.GFile(path, "rb") as handle:
                while chunk := handle.read(1 << 22):
                    digest.update(chunk)
            if digest.hexdigest() != shard.get("sha256"):
                corrupt.append(shard["file"])
        return corrupt

    def undecodable_records(self, image_size: int, limit: int = 5) -> list[str]:
        """`shard: record id (reason)` for records the trainer's decoder refuses (reads
        every shard: for diagnosis after a failure, not for every run)."""
        from training import features  # the decoder training and serving use

        decode = tf.function(lambda encoded: features.decode_image(encoded, image_size))
        found = []
        for shard, path in self._shards():
            dataset = tf.data.TFRecordDataset(path, compression_type=self.compression_type)
            for raw in dataset:
                example = features.parse_example(raw, (features.IMAGE_ENCODED, features.IMAGE_ID))
                try:
                    decode(example[features.IMAGE_ENCODED])
                except tf.errors.InvalidArgumentError as err:
                    reason = err.message.strip().splitlines()[0][:160]
                    image_id = example[features.IMAGE_ID].numpy().decode(errors="replace")
                    found.append(f"{shard['file']}: {image_id!r} ({reason})")
                    if len(found) >= limit:
                        return found
        return found

    @property
    def label_names(self) -> list[str]:
        """Name of each class id; "" for ids a custom label map leaves unused."""
        names = [""] * self.num_classes
        for name, label_id in self.metadata["label_map"].items():
            names[label_id] = name
        return names

    @property
    def num_classes(self) -> int:
        return max(self.metadata["label_map"].values()) + 1

    @property
    def compression_type(self) -> str:
        return tf_compression_type(self.metadata.get("compression", DEFAULT_COMPRESSION))

    def files(self, split: str) -> list[str]:
        shards = self.metadata["splits"].get(split, {}).get("shards", [])
        return [posixpath.join(self.shard_root, shard["file"]) for shard in shards]

    def num_records(self, split: str) -> int:
        return int(self.metadata["splits"].get(split, {}).get("num_records", 0))
