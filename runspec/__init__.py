"""The training run folder's contract, importable without TensorFlow.

A training run writes into one folder (`--output`): its parameters, per-epoch
metrics, checkpoints, TensorBoard logs, the exported model and, with
`--evaluate`, the held-out evaluation. `layout.py` names those files once;
`record.py` reads a folder back as a typed `RunRecord` (what was asked, how far
it got, whether it finished) with one rule for missing and broken files. The
trainer writes through these names and documents; orchestration (reuse,
plots, summary, evaluate, publish, the launchers' results) reads through them.
Like `shardspec`, it sits at the bottom of the import graph: standard library,
and fsspec inside the reader.
"""
