"""The record contract, importable without TensorFlow or Beam.

The feature keys, the schema version, the pixel limit both sides enforce, the
`tf.train.Example` wire format and TFRecord framing are defined here once. It
sits at the bottom of the import graph so that the Beam workers, the validator
and the benchmarks can use it without paying TensorFlow's import (about 9 s and
500 MB a process). `layout.py` names the folder's files (`_SUCCESS`,
`metadata.json`, shard names, compression); `folder.py` holds the typed
metadata (`FolderMetadata`) and the one folder check, which every reader runs
through its own file-system layer (`beam_jobs/validate.py` with Beam's,
`training/shards.py` with TensorFlow's). May import only the standard library
and google-crc32c.
"""
