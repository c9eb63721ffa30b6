"""Resuming mid-epoch continues the input exactly where the checkpoint left it.

The trainer runs for real (restore, checkpoints, epochs, evaluation), in this
process, with its step function replaced by one that records which images each
step received. A run that crashes mid-epoch and is resumed must have fed every
step the same images as an uninterrupted run: nothing seen twice, nothing skipped.
"""

import contextlib
import hashlib
import json

import pytest
import tensorflow as tf

from training import train
from training.config import DataConfig, TrainConfig
from training.distribute import ClusterInfo
from training.shards import ShardSet
from training.task import ImageTask

pytestmark = pytest.mark.slow  # training runs


class Crash(Exception):
    pass


def _recording_steps(seen: dict[int, list[str]], crash_after: int | None):
    def steps_fn(task: ImageTask):
        def train_steps(iterator, num_steps):
            for _ in range(int(num_steps)):
                images, _ = next(iterator)
                step = int(task.step.numpy())
                seen[step] = sorted(
                    hashlib.sha1(image.tobytes()).hexdigest() for image in images.numpy()
                )
                task.step.assign_add(1)
                if step + 1 == crash_after:
                    raise Crash

        return train_steps

    return steps_fn


def _run(config: TrainConfig, monkeypatch, seen: dict, crash_after: int | None = None) -> int:
    monkeypatch.setattr(ImageTask, "train_steps_fn", _recording_steps(seen, crash_after))
    trainer = train.Trainer(
        config,
        ClusterInfo("worker", 0, 1),
        tf.distribute.get_strategy(),
        ShardSet.open(config.data),
    )
    with contextlib.suppress(Crash):
        trainer.run()
    return trainer.resumed_from_step


@pytest.mark.parametrize("cache", ["", "memory"])
def test_a_run_resumed_mid_epoch_feeds_every_step_what_an_uninterrupted_run_did(
    trainable_shards, tmp_path, monkeypatch, cache
):
    def config(name: str) -> TrainConfig:
        return TrainConfig(
            data=trainable_shards,
            output=str(tmp_path / name),
            epochs=2,
            per_replica_batch_size=16,
            checkpoint_every=5,
            steps_per_call=1,
            # No augmentation: the images themselves identify the examples.
            input=DataConfig(augment=False, cache=cache),
        )

    per_epoch = ShardSet.open(trainable_shards).num_records("train") // 16  # about 22
    uninterrupted: dict[int, list[str]] = {}
    _run(config("whole"), monkeypatch, uninterrupted)
    assert sorted(uninterrupted) == list(range(2 * per_epoch))

    crash_after = per_epoch + 11  # in epoch 2, past a checkpoint (every 5 steps) that is too
    first: dict[int, list[str]] = {}
    _run(config("crashed"), monkeypatch, first, crash_after=crash_after)
    assert max(first) == crash_after - 1
    resumed: dict[int, list[str]] = {}
    restored = _run(config("crashed"), monkeypatch, resumed)
    assert restored == 5 * ((crash_after - 1) // 5) == min(resumed)
    assert per_epoch < restored < 2 * per_epoch  # mid-epoch

    # What trained the final model: the first run up to its checkpoint, then the resumed run.
    counted = {**{s: ids for s, ids in first.items() if s < restored}, **resumed}
    assert counted == uninterrupted
    # And the epochs still differ from each other (the order is reshuffled every epoch).
    epochs = [[uninterrupted[s] for s in range(e * per_epoch, (e + 1) * per_epoch)] for e in (0, 1)]
    assert epochs[0] != epochs[1]


def test_a_stop_asked_for_in_an_epochs_last_step_lets_that_epoch_finish(
    trainable_shards, tmp_path, monkeypatch
):
    """SIGTERM while an epoch's last steps run: the epoch is evaluated, recorded and
    checkpointed before the workers stop, so the resumed run does not skip its line."""
    config = TrainConfig(
        data=trainable_shards, output=str(tmp_path / "run"), epochs=2, per_replica_batch_size=16,
        checkpoint_every=1000, steps_per_call=1, input=DataConfig(augment=False),
    )  # fmt: skip
    per_epoch = ShardSet.open(trainable_shards).num_records("train") // 16

    def steps_fn(task: ImageTask):
        def train_steps(iterator, num_steps):
            for _ in range(int(num_steps)):
                next(iterator)
                task.step.assign_add(1)
                if int(task.step.numpy()) == per_epoch:
                    trainer.request_stop()  # as the SIGTERM handler does

        return train_steps

    monkeypatch.setattr(ImageTask, "train_steps_fn", steps_fn)
    strategy = tf.distribute.get_strategy()
    trainer = train.Trainer(
        config, ClusterInfo("worker", 0, 1), strategy, ShardSet.open(config.data)
    )
    with pytest.raises(train.Preempted) as stopped:
        trainer.run()
    assert stopped.value.step == per_epoch
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [e["epoch"] for e in metrics["epochs"]] == [1]
    assert tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")).endswith(
        f"ckpt-{per_epoch}"
    )
