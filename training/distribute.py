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


def make_strategy(cluster: ClusterInfo, cpu_devices: int = 1) -> tf.distribute.Strategy:
    """MultiWorkerMirrored for a cluster, Mirrored over several local devices, else default.

    Must run before any other TensorFlow op: MultiWorkerMirroredStrategy configures the
    runtime's collectives at construction, and `cpu_devices` > 1 splits the CPU into
    that many logical devices, which only an uninitialised runtime accepts.
    """
    if cpu_devices > 1:
        split_cpu(cpu_devices)
    if cluster.multi_worker:
        communication = tf.distribute.experimental.CommunicationImplementation.AUTO
        options = tf.distribute.experimental.CommunicationOptions(implementation=communication)
        resolver = _trainers_only(cluster)
        if cpu_devices > 1:
            strategy = _multi_worker_on_cpu_devices(resolver, options, cpu_devices)
        else:
            strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=resolver, communication_options=options
            )
    elif len(devices := local_devices()) > 1:
        strategy = tf.distribute.MirroredStrategy(devices=devices)
    else:
        strategy = tf.distribute.get_strategy()
    log.info(
        "%s: %s with %d replica(s) in sync",
        cluster.name,
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
    )
    return strategy


def split_cpu(count: int) -> None:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    )


def local_devices() -> list[str]:
    """The devices a one-worker run trains a replica on: its GPUs, else its logical CPUs
    (one unless `split_cpu` made more)."""
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in gpus or tf.config.list_logical_devices("CPU")]


def _multi_worker_on_cpu_devices(resolver, options, count: int) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy with `count` CPU replicas a worker: the layout of
    multi-GPU workers, on machines without GPUs. TensorFlow gives a CPU worker one
    replica whatever its logical devices (CollectiveAllReduceExtended.
    _initialize_local_devices counts GPUs and TPUs only); this strategy's local devices
    are its CPUs instead, and everything else (collectives, input, checkpoints) is the
    strategy's own, as it is with GPUs."""
    from tensorflow.python.distribute import collective_all_reduce_strategy as collective

    class _Extended(collective.CollectiveAllReduceExtended):
        def _initialize_local_devices(self, cluster_resolver, worker_device):
            names = tuple(f"{worker_device}/device:CPU:{i}" for i in range(count))
            return names, "CPU"

    class MultiWorkerMirroredOnCpuDevices(collective.CollectiveAllReduceStrategy):
        def __init__(self):
            resolver_ = resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver()
            extended = _Extended(self, cluster_resolver=resolver_, communication_options=options)
            tf.distribute.Strategy.__init__(self, extended)

    return MultiWorkerMirroredOnCpuDevices()


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
