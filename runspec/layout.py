"""The names of everything a training run writes into its folder.

<run>/config.json          the effective parameters, written when the run starts
<run>/metrics.json         per-epoch metrics, the step resumed from, the input diagnosis
<run>/checkpoints/         the chief's checkpoints (a rerun of the same run resumes them)
<run>/tensorboard/         scalars for TensorBoard
<run>/model/               the exported SavedModel (serving raw image bytes)
<run>/evaluation.json      the held-out evaluation (`--evaluate`, remote launchers)
<run>/_worker_tmp/         other workers' throw-away copies, removed when they finish

A pipeline run's folder (orchestration/runs.py) keeps its evaluation and plots beside
its `train/` run folder under the same names.
"""

from __future__ import annotations

CONFIG = "config.json"
METRICS = "metrics.json"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"
MODEL = "model"
SAVED_MODEL = "saved_model.pb"  # inside MODEL: present once the export finished
EVALUATION = "evaluation.json"
WORKER_TMP = "_worker_tmp"
CURVES = "training_curves.png"
CONFUSION = "confusion_matrix.png"

# Everything a run writes into --output; a run replaces or appends to these by name.
RUN_FILES = (CONFIG, CHECKPOINTS, MODEL, TENSORBOARD, METRICS, EVALUATION, WORKER_TMP)
