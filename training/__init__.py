"""The training stage: shards -> a trained, exported SavedModel (TensorFlow, Keras 3).

Owns the input pipeline, the models, the multi-worker loop with checkpoints,
the serving export, evaluation, and the CLIs `training.train` (one worker; it checks
its flags and a local shard folder before `training.trainer` loads TensorFlow),
`training.launch` (N local workers) and `training.data` (input speed). May
import `shardspec` and `stageconfig`; never Beam, Airflow, `beam_jobs` or
`orchestration`. `training/config.py` stays free of TensorFlow: the DAG reads it.
"""

import os

# TensorFlow's C++ start-up lines (oneDNN, CPU features, absl) are noise to a user of these
# CLIs: show warnings and errors only, unless TF_CPP_MIN_LOG_LEVEL says otherwise. Set here,
# before any module of the package imports TensorFlow; worker processes inherit it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# ... and the lines it writes to stderr before that setting applies (training/quiet_tf.py).
from training import quiet_tf

quiet_tf.install()
