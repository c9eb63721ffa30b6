"""The record contract, importable without TensorFlow or Beam.

The feature keys, the schema version, the pixel limit both sides enforce, the
`tf.train.Example` wire format and TFRecord framing are defined here once. It
sits at the bottom of the import graph so that the Beam workers, the validator
and the benchmarks can use it without paying TensorFlow's import (about 9 s and
500 MB a process). The folder's file names (`_SUCCESS`, `metadata.json`) and
its checker do not live here yet: `beam_jobs/output.py` and `training/shards.py`
each still name them.
"""
