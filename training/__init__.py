"""The training stage: shards -> a trained, exported SavedModel (TensorFlow, Keras 3).

Owns the input pipeline, the models, the multi-worker loop with checkpoints,
the serving export, evaluation, and the CLIs `training.train` (one worker; it checks
its flags and a local shard folder before `training.trainer` loads TensorFlow),
`training.launch` (N local workers) and `training.data` (input speed). May
import `shardspec`, `runspec` and `stageconfig`; never Beam, Airflow, `beam_jobs` or
`orchestration`. `training/config.py` stays free of TensorFlow: the DAG reads it.

Importing the package changes nothing global. Only a CLI of it starting
(`python -m training.<cli>`: Python sets argv[0] to "-m" while it locates the
module, which is when this runs) quiets TensorFlow's start-up lines, before the
CLI's own module imports TensorFlow (training/quiet_tf.py).
"""

import sys

if sys.argv[:1] == ["-m"]:
    from training import quiet_tf

    quiet_tf.setup_cli()
