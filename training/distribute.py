"""Which process am I, and which distribution strategy fits the environment.

Reads the standard `TF_CONFIG` (set by our local launcher, Kubernetes
manifests, Vertex AI, or Kubeflow's TFJob). The chief is the task of type
"chief" where the cluster has one (Vertex AI names its first replica so),
otherwise worker 0. A `ps` task (Vertex AI's third worker pool) is not a
trainer here: it is where the tf.data service runs (`--input-service cluster`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

import tensorflow as tf

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterInfo:
    task_type: str
    task_index: int
    num_workers: int  # chief + workers: the processes that train
    has_chief: bool = False
    trainers: dict | None = None  # TF_CONFIG's chief and worker tasks
    input_service: str = ""  # TF_CONFIG's first `ps` task: the tf.data service dispatcher

    @property
    def is_chief(self) -> bool:
        if self.has_chief:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def multi_worker(self) -> bool:
        return self.num_workers > 1

    @property
    def name(self) -> str:
        return f"{self.task_type}-{self.task_index}"


def cluster_from_env(environ: dict | None = None) -> ClusterInfo:
    raw = (environ if environ is not None else os.environ).get("TF_CONFIG", "")
    if not raw:
        return ClusterInfo("worker", 0, 1)
    try:
        config = json.loads(raw)
        cluster = config.get("cluster", {})
        task = config.get("task", {})
        task_type, task_index = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"TF_CONFIG is not valid: {err}") from None
    trainers = {job: list(cluster[job]) for job in ("chief", "worker") if cluster.get(job)}
    num_workers = sum(len(tasks) for tasks in trainers.values())
    return ClusterInfo(
        task_type,
        task_index,
        max(1, num_workers),
        has_chief="chief" in trainers,
        trainers=trainers,
        input_service=(cluster.get("ps") or [""])[0],
    )


def make_strategy(cluster: ClusterInfo) -> tf.distribute.Strategy:
    """MultiWorkerMirrored for a cluster, Mirrored over several local GPUs, else default.

    Must run before any other TensorFlow op: MultiWorkerMirroredStrategy
    configures the runtime's collectives at construction.
    """
    if cluster.multi_worker:
        communication = tf.distribute.experimental.CommunicationImplementation.AUTO
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=_trainers_only(cluster),
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=communication
            ),
        )
    elif len(tf.config.list_physical_devices("GPU")) > 1:
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    log.info(
        "%s: %s with %d replica(s) in sync",
        cluster.name,
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
    )
    return strategy


def _trainers_only(cluster: ClusterInfo):
    """The cluster without its `ps` task, or None (the strategy reads TF_CONFIG) when it has none.

    MultiWorkerMirroredStrategy would make a `ps` task the leader of its
    coordination service (`multi_worker_util.coordination_leader`); ours is a
    tf.data dispatcher that speaks no such protocol, and the trainers would wait
    for it forever.
    """
    if not cluster.input_service:
        return None
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster.trainers),
        task_type=cluster.task_type,
        task_id=cluster.task_index,
        rpc_layer="grpc",
    )


class StopAgreement:
    """Whether any worker was told to stop, agreed by all: one scalar all-reduce, asked
    between calls into the training graph (every `steps_per_call` steps), so every
    worker stops at the same step; a worker stopping alone would hang the others'
    collectives. TF's PreemptionCheckpointHandler does this through the coordination
    service but does nothing on CPU machines on GCP, where our CPU workers run.

    Asked once more at the very end, it is also the barrier that keeps a worker from
    exiting while the chief still exports or evaluates (TensorFlow's coordination
    service would report the early one as crashed)."""

    def __init__(self, cluster: ClusterInfo, strategy: tf.distribute.Strategy):
        self.requested = False  # set from the SIGTERM handler
        if not cluster.multi_worker:
            self._sum = lambda flag: flag
            return

        @tf.function
        def sum_over_workers(flag):
            per_replica = strategy.run(tf.identity, args=(flag,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._sum = sum_over_workers

    def request(self) -> None:
        self.requested = True

    def any_worker_stopping(self) -> bool:
        """Every worker must call this at the same point of the run."""
        return float(self._sum(tf.constant(float(self.requested)))) > 0
