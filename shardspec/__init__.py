"""The shard folder's contract, importable without TensorFlow or Beam.

Everything the sharding job writes and the trainer reads is defined here once:
feature keys, the schema version, the limits both sides enforce, the
`tf.train.Example` wire format and TFRecord framing. It sits at the bottom of
the import graph so that the Beam workers, the validator and the benchmarks
can use it without paying TensorFlow's import (about 9 s and 500 MB a process).
"""
