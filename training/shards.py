"""Opening a shard directory written by the sharding job, with clear refusals.

The checks are shardspec.folder's, the same the DAG's validate_shards applies;
this module runs them through `tf.io.gfile` (local paths and `gs://`) and adds
what needs TensorFlow: finding corrupt shards and undecodable records.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass

import tensorflow as tf

from shardspec.folder import CallableFiles, FolderMetadata, check_folder
from shardspec.layout import tf_compression_type


class ShardError(ValueError):
    """The shard directory cannot be trained on; the message says why and where."""


def _size(path: str) -> int:
    try:
        return tf.io.gfile.stat(path).length
    except tf.errors.NotFoundError:
        raise FileNotFoundError(path) from None


def _read_bytes(path: str) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


# The folder checks of shardspec.folder, through TensorFlow's filesystems (local, gs://).
GFILE = CallableFiles(exists=tf.io.gfile.exists, read_bytes=_read_bytes, size=_size)


@dataclass(frozen=True)
class ShardSet:
    directory: str
    folder: FolderMetadata

    @classmethod
    def open(cls, directory: str) -> ShardSet:
        """Refuses, naming every problem, what shardspec.folder.check_folder refuses: no
        `_SUCCESS`, another schema, a reused output whose target changed, a shard missing
        or of another size than the job wrote. Flipped bits inside a shard are caught by
        the record CRCs while reading."""
        directory = directory.rstrip("/")
        folder, problems = check_folder(directory, GFILE)
        if problems:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise ShardError(f"{directory}: " + "; ".join(problems[:5]) + more)
        return cls(directory, folder)

    @property
    def shard_root(self) -> str:
        """Where the shard files are: here, or the folder a reused output points at."""
        return self.folder.shard_root(self.directory)

    def _shards(self):
        for split in self.folder.splits.values():
            for shard in split.shards:
                yield shard, posixpath.join(self.shard_root, shard.file)

    def corrupt_files(self) -> list[str]:
        """Shards whose bytes differ from the sha256 in metadata.json (reads every shard)."""
        corrupt = []
        for shard, path in self._shards():
            digest = hashlib.sha256()
            with tf.io.gfile.GFile(path, "rb") as handle:
                while chunk := handle.read(1 << 22):
                    digest.update(chunk)
            if digest.hexdigest() != shard.sha256:
                corrupt.append(shard.file)
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
                    found.append(f"{shard.file}: {image_id!r} ({reason})")
                    if len(found) >= limit:
                        return found
        return found

    @property
    def label_names(self) -> list[str]:
        """Name of each class id; "" for ids a custom label map leaves unused."""
        names = [""] * self.num_classes
        for name, label_id in self.folder.label_map.items():
            names[label_id] = name
        return names

    @property
    def num_classes(self) -> int:
        return max(self.folder.label_map.values()) + 1

    @property
    def compression_type(self) -> str:
        return tf_compression_type(self.folder.compression)

    def files(self, split: str) -> list[str]:
        entry = self.folder.splits.get(split)
        return [posixpath.join(self.shard_root, s.file) for s in entry.shards] if entry else []

    def num_records(self, split: str) -> int:
        return self.folder.num_records(split)
