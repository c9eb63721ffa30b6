"""--init-from: a run starts from an earlier model's weights, the ImageNet backbones or a
backbone weights file, or says in one line why it cannot."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from orchestration.publish import publish_model
from training import warm_start
from training.model import build_model
from training.model_files import EXTRA_DIR, LABELS_FILE
from training.warm_start import WarmStartError

pytestmark = pytest.mark.slow  # trains a model

LABELS = ["circle", "cross", "square", "triangle"]


def _train(*args, workers=1):
    return subprocess.run(
        [sys.executable, "-m", "training.launch", "--num-workers", str(workers), *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )


@pytest.fixture(scope="module")
def cold(trainable_shards, tmp_path_factory):
    """A trained run's train folder (small_cnn, 64 px, 3 epochs)."""
    output = tmp_path_factory.mktemp("cold") / "train"
    proc = _train("--data", trainable_shards, "--output", str(output), "--epochs", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return output


def _saved(model_dir) -> list[np.ndarray]:
    loaded = tf.saved_model.load(str(model_dir))
    return [v.numpy() for v in loaded.variables if "seed_generator" not in v.name]


def _ours(model) -> list[np.ndarray]:
    return [v.numpy() for v in model.variables if "seed_generator" not in v.path]


def test_every_weight_comes_from_a_model_of_the_same_classes(cold, tmp_path):
    root = str(tmp_path / "models")
    publish_model(str(cold / "model"), root, "m", run_id="r1")
    for value in (str(cold / "model"), str(cold), f"{root}/m"):  # model, run, LATEST
        source = warm_start.resolve(value, architecture="small_cnn", image_size=64)
        model = build_model("small_cnn", 64, 4)
        said = warm_start.load(
            model, source, architecture="small_cnn", image_size=64, labels=LABELS
        )
        assert said.startswith("every weight from ")
        for mine, theirs in zip(_ours(model), _saved(cold / "model"), strict=True):
            np.testing.assert_array_equal(mine, theirs)
    assert warm_start.resolve(f"{root}/m", architecture="small_cnn", image_size=64).version == 1


def test_other_classes_start_a_fresh_head_and_keep_the_rest(cold, tmp_path, caplog):
    relabelled = shutil.copytree(cold / "model", tmp_path / "model")
    (relabelled / EXTRA_DIR / LABELS_FILE).write_text(json.dumps(["a", "b", "c", "d"]))
    source = warm_start.resolve(str(relabelled), architecture="small_cnn", image_size=64)
    model = build_model("small_cnn", 64, 4)
    fresh_head = [v.numpy() for v in model.variables if v.path.startswith("logits/")]
    said = warm_start.load(model, source, architecture="small_cnn", image_size=64, labels=LABELS)
    assert said.startswith("every weight but the classifier head")
    assert "its classifier head starts fresh" in caplog.text
    body = [v for v in model.variables if not v.path.startswith(("logits/", "seed_generator"))]
    saved = _saved(relabelled)
    for mine, theirs in zip(body, saved[: len(body)], strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs)
    head = [v.numpy() for v in model.variables if v.path.startswith("logits/")]
    for now, before in zip(head, fresh_head, strict=True):
        np.testing.assert_array_equal(now, before)


@pytest.mark.parametrize(
    ("value", "architecture", "size", "message"),
    [
        (
            "{cold}/model",
            "small_cnn",
            96,
            "that model is small_cnn at 64 px, this run small_cnn at 96 px",
        ),
        ("{tmp}/nothing", "small_cnn", 64, "not a model folder, a published model's home"),
        ("imagenet", "small_cnn", 64, "there are no ImageNet weights for small_cnn"),
        ("{tmp}/b.weights.h5", "mobilenet_v3_small", 64, "no such weights file"),
    ],
)
def test_a_source_that_cannot_start_this_run_is_one_line(
    cold, tmp_path, value, architecture, size, message
):
    value = value.format(cold=cold, tmp=tmp_path)
    with pytest.raises(WarmStartError, match=f"^--init-from {value}: {message}"):
        warm_start.resolve(value, architecture=architecture, image_size=size)


def test_a_backbone_weights_file_loads_into_the_backbone(tmp_path):
    pretrained = keras.applications.MobileNetV3Small(
        input_shape=(32, 32, 3), include_top=False, weights=None, pooling="avg",
        include_preprocessing=False,
    )  # fmt: skip
    for variable in pretrained.weights:
        variable.assign(np.random.default_rng(0).normal(size=variable.shape).astype("float32"))
    path = str(tmp_path / "backbone.weights.h5")
    pretrained.save_weights(path)
    model = build_model("mobilenet_v3_small", 32, 4)
    source = warm_start.resolve(path, architecture="mobilenet_v3_small", image_size=32)
    said = warm_start.load(
        model, source, architecture="mobilenet_v3_small", image_size=32, labels=LABELS
    )
    assert said == f"backbone weights from {path}"
    backbone = next(layer for layer in model.layers if isinstance(layer, keras.Model))
    for mine, theirs in zip(backbone.get_weights(), pretrained.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_imagenet_without_network_is_one_line_naming_the_alternatives(monkeypatch):
    """Keras downloads the file and checks its hash: a test cannot fake it offline, so
    the download fails here as it does without network (Keras' own message)."""

    def unreachable(**kwargs):
        raise Exception(
            "URL fetch failure on https://storage.googleapis.com/...: None -- [Errno 101] "
            "Network is unreachable"
        )

    monkeypatch.setitem(warm_start._PRETRAINED, "mobilenet_v3_small", (unreachable, {}))
    model = build_model("mobilenet_v3_small", 32, 4)
    source = warm_start.resolve("imagenet", architecture="mobilenet_v3_small", image_size=32)
    with pytest.raises(WarmStartError) as raised:
        warm_start.load(
            model, source, architecture="mobilenet_v3_small", image_size=32, labels=LABELS
        )
    (line,) = str(raised.value).splitlines()
    assert line.startswith("--init-from imagenet: Keras could not get the ImageNet weights")
    assert "Network is unreachable" in line and "--init-from PATH" in line


def test_the_trainer_warm_starts_its_first_start_only_and_records_the_source(
    cold, trainable_shards, tmp_path
):
    output = tmp_path / "warm"
    args = ["--data", trainable_shards, "--output", str(output), "--epochs", "1"]
    proc = _train(*args, "--init-from", str(cold / "model"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"warm start: every weight from {cold / 'model'}" in proc.stderr + proc.stdout
    config = json.loads((output / "config.json").read_text())
    assert config["init_from"] == str(cold / "model") and config["init_source"]
    # Another init source is another recipe: the run's checkpoints are not resumed under it.
    proc = _train(*args, "--epochs", "2", "--init-from", "")
    assert proc.returncode == 2
    assert "init_from" in proc.stderr.strip().splitlines()[-1]
    proc = _train(*args, "--init-from", str(tmp_path / "nothing"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].strip().startswith("error: --init-from ")


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"freeze_epochs": 1}, "--freeze-epochs needs --init-from"),
        ({"freeze_epochs": 4, "epochs": 3, "init_from": "imagenet"}, "more than --epochs 3"),
    ],
)
def test_freeze_epochs_without_a_source_or_past_the_run_is_refused(tmp_path, settings, says):
    from training.config import ConfigError, TrainConfig

    with pytest.raises(ConfigError, match=says):
        TrainConfig(data=str(tmp_path / "shards"), output=str(tmp_path / "run"), **settings)


def test_the_fine_tuning_phase_runs_at_a_share_of_the_schedules_rate():
    from training.config import FINE_TUNE_LR_FACTOR
    from training.task import FineTuneSchedule

    base = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=100)
    phased = FineTuneSchedule(base, 40, FINE_TUNE_LR_FACTOR)
    for step in (0, 39):
        assert float(phased(step)) == pytest.approx(float(base(step)))
    for step in (40, 99):
        assert float(phased(step)) == pytest.approx(FINE_TUNE_LR_FACTOR * float(base(step)))


def test_freeze_epochs_trains_the_head_alone_then_every_layer(
    cold, trainable_shards, tmp_path, monkeypatch
):
    """Epoch 1 changes the head only (BatchNorm's moving statistics included: frozen
    layers run in inference mode); epoch 2 fine-tunes the backbone too."""
    from training.config import TrainConfig
    from training.distribute import ClusterInfo
    from training.shards import ShardSet
    from training.trainer import Trainer

    after_epoch = []
    train_epoch = Trainer._train_epoch

    def recording(self, *args, **kwargs):
        metrics = train_epoch(self, *args, **kwargs)
        after_epoch.append(
            {v.path: v.numpy() for v in self.task.model.variables if "seed_generator" not in v.path}
        )
        return metrics

    monkeypatch.setattr(Trainer, "_train_epoch", recording)
    config = TrainConfig(
        data=trainable_shards,
        output=str(tmp_path / "run"),
        epochs=2,
        freeze_epochs=1,
        init_from=str(cold / "model"),
    )
    trainer = Trainer(
        config,
        ClusterInfo("worker", 0, 1),
        tf.distribute.get_strategy(),
        ShardSet.open(config.data),
    )
    trainer.run()
    paths = list(after_epoch[0])
    saved = dict(zip(paths, _saved(cold / "model"), strict=True))
    head = [p for p in paths if p.startswith("logits/")]
    body = [p for p in paths if p not in head]
    assert head and any("moving_mean" in p for p in body)
    for path in body:
        np.testing.assert_array_equal(after_epoch[0][path], saved[path], err_msg=path)
    assert all(not np.array_equal(after_epoch[0][p], saved[p]) for p in head)
    assert all(not np.array_equal(after_epoch[1][p], saved[p]) for p in body if "kernel" in p)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["freeze_epochs"] == 1
