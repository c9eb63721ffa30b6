"""The sharding stage: raw images -> validated, deterministic TFRecord shards (Apache Beam).

Owns listing and planning the input, validating and re-encoding images, the
Beam pipeline and its local-runner choice, the output folder's atomic
publication, and the CLI `python -m beam_jobs.shard_images`. May import
`shardspec` and `stageconfig`; never TensorFlow (every Beam worker would pay its
import), Airflow, `training` or `orchestration`.
"""
