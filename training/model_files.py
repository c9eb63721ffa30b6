"""The exported model's own files, named once: the exporter writes them with TensorFlow,
the publisher and the serving side read them without it."""

from __future__ import annotations

EXTRA_DIR = "assets.extra"  # TensorFlow Serving's place for files that travel with a model
LABELS_FILE = "labels.json"
METADATA_FILE = "training_metadata.json"
# In METADATA_FILE: sha256 over the weights (Trainer.weights_fingerprint). One checkpoint
# exported twice (a cleared `train` task re-exports a finished run) is one model.
WEIGHTS_FINGERPRINT = "weights_fingerprint"
# In a published model's home (<model_root>/<name>/): the one-line file naming the version
# served. The publisher moves it; the evaluator reads it to find the baseline.
LATEST = "LATEST"
