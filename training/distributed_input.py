"""The trainer's input under its strategy: each split as per-replica batches, read
here or through a tf.data service, resumable at any step."""

from __future__ import annotations

import logging

import tensorflow as tf

from training.config import CLUSTER_INPUT_SERVICE, ConfigError, TrainConfig, parse_input_service
from training.data import build_dataset, synthetic_dataset
from training.distribute import ClusterInfo
from training.input_service import start_local, through_service
from training.shards import ShardSet

log = logging.getLogger("training.train")


class DistributedInput:
    def __init__(
        self,
        config: TrainConfig,
        cluster: ClusterInfo,
        strategy: tf.distribute.Strategy,
        shards: ShardSet,
    ):
        self.config, self.cluster, self.strategy, self.shards = config, cluster, strategy, shards
        # The local servers are kept referenced: they live as long as this object.
        self.service_address, self._local_service = self._input_service()

    def _input_service(self):
        """(dispatcher address or "", the local servers to keep alive or None)."""
        address, local_workers = parse_input_service(self.config.input_service)
        if address == CLUSTER_INPUT_SERVICE:
            address = self.cluster.input_service
            if not address:
                raise ConfigError("--input-service cluster: TF_CONFIG's cluster has no ps task")
        local = start_local(local_workers) if local_workers else None
        if local:
            address = local.address
        if address:
            log.info(
                "input: through the tf.data service at %s%s (DYNAMIC sharding: each record "
                "at most once per pass; the order is not deterministic, so a resumed run "
                "restarts its input)",
                address,
                f", {local_workers} worker(s) in this process" if local else "",
            )
        return address, local

    def distributed(self, split: str, training: bool, start_step: int = 0):
        """The split as the strategy's per-replica batches; training input begins at the
        batch an uninterrupted run would read at `start_step`."""
        config, shards, files = self.config, self.shards, self.shards.files(split)
        service = self.service_address

        def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
            if training and config.synthetic_input:
                return synthetic_dataset(
                    config.per_replica_batch_size, config.input.image_size, shards.num_classes
                )
            dataset = build_dataset(
                files,
                batch_size=config.per_replica_batch_size,
                training=training,
                compression_type=shards.compression_type,
                options=config.input,
                seed=config.seed,
                num_pipelines=context.num_input_pipelines,
                pipeline_id=context.input_pipeline_id,
                num_records=-(-shards.num_records(split) // context.num_input_pipelines),
                # Each step takes one batch per replica this pipeline feeds.
                skip_batches=0
                if training and service
                else start_step * context.num_replicas_in_sync // context.num_input_pipelines,
            )
            if training and service:
                return through_service(dataset, service)
            return dataset

        return self.strategy.distribute_datasets_from_function(dataset_fn)
