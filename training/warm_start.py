"""Starting a run from what an earlier model learned (`--init-from`).

A scheduled run retrains on a folder that grew a little since yesterday: starting from
the served model's weights instead of random ones gets it to the same accuracy in a
fraction of the epochs. The source is one of

- a model this project exported: a run's `model/` (or the run's train folder), a
  published version, or a published model's home, whose `LATEST` names the version
  (`latest` in the DAG). Every weight is loaded when architecture and image size match;
  the classifier head too when the label maps match, else it starts fresh (warned);
- `imagenet`: Keras' pretrained weights for the backbones that have them (downloaded
  into Keras' cache on first use), or a local Keras weights file (`.weights.h5`) of the
  backbone: the machine-without-network path.

Only a run's first start warm-starts: a resumed run restores its own checkpoints.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass

import keras
import tensorflow as tf

from runspec.layout import MODEL, SAVED_MODEL
from training.config import ConfigError
from training.evaluate import model_file, resolve_baseline
from training.model import HEAD
from training.model_files import LABELS_FILE, METADATA_FILE

log = logging.getLogger("training.train")

IMAGENET = "imagenet"
# Keras applications constructors of the backbones in training/model.py.
_PRETRAINED = {
    "mobilenet_v3_small": (keras.applications.MobileNetV3Small, {"include_preprocessing": False}),
    "resnet50": (keras.applications.ResNet50, {}),
}


class WarmStartError(ConfigError):
    """The init source cannot start this run: one line, exit 2."""


@dataclass(frozen=True)
class InitSource:
    kind: str  # "model", "imagenet" or "weights"
    path: str = ""
    version: int | None = None

    def describe(self) -> str:
        if self.kind == IMAGENET:
            return "ImageNet weights (Keras applications)"
        if self.version is not None:
            return f"published version {self.version} ({self.path})"
        return self.path


def resolve(value: str, *, architecture: str, image_size: int) -> InitSource | None:
    """What `--init-from value` names, checked before any training (WarmStartError)."""
    if not value:
        return None
    flag = f"--init-from {value}"
    if value == IMAGENET:
        if architecture not in _PRETRAINED:
            raise WarmStartError(
                f"{flag}: there are no ImageNet weights for {architecture} (only for "
                f"{', '.join(_PRETRAINED)}); give a model to start from instead"
            )
        return InitSource(IMAGENET)
    if value.endswith(".h5"):
        if architecture not in _PRETRAINED:
            raise WarmStartError(
                f"{flag}: a backbone weights file needs {' or '.join(_PRETRAINED)}"
            )
        if not tf.io.gfile.exists(value):
            raise WarmStartError(f"{flag}: no such weights file")
        return InitSource("weights", value)
    found = resolve_baseline(value)
    if found is None and tf.io.gfile.exists(posixpath.join(value, MODEL, SAVED_MODEL)):
        found = (posixpath.join(value, MODEL), None)  # a run's train folder
    if found is None:
        raise WarmStartError(
            f"{flag}: not a model folder, a published model's home (with LATEST), a run's "
            "train folder, a .weights.h5 file or imagenet"
        )
    path, version = found
    metadata = model_file(path, METADATA_FILE) or {}
    trained = metadata.get("config") or {}
    theirs = (trained.get("architecture"), trained.get("image_size"))
    if theirs != (architecture, image_size):
        raise WarmStartError(
            f"{flag}: that model is {theirs[0]} at {theirs[1]} px, this run {architecture} at "
            f"{image_size} px: its weights do not fit (start from a model of the same recipe)"
        )
    return InitSource("model", path, version)


def _backbone(model: keras.Model) -> keras.Model:
    return next(layer for layer in model.layers if isinstance(layer, keras.Model))


def load(
    model: keras.Model, source: InitSource, *, architecture: str, image_size: int, labels: list
) -> str:
    """Set `model`'s weights from `source` (call on every worker: each loads the same);
    -> what was loaded, for the log and the run's config."""
    if source.kind == "model":
        return _from_model(model, source, labels)
    backbone = _backbone(model)
    if source.kind == "weights":
        try:
            backbone.load_weights(source.path)
        except (ValueError, OSError) as err:
            raise WarmStartError(
                f"--init-from {source.path}: not weights of the {architecture} backbone "
                f"({str(err).splitlines()[0][:200]})"
            ) from None
        return f"backbone weights from {source.path}"
    build, options = _PRETRAINED[architecture]
    try:
        pretrained = build(
            input_shape=(image_size, image_size, 3),
            include_top=False,
            weights=IMAGENET,
            pooling="avg",
            **options,
        )
    except Exception as err:  # the download: no network, a proxy, a refused certificate
        raise WarmStartError(
            f"--init-from imagenet: Keras could not get the ImageNet weights of {architecture} "
            f"({type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}); "
            "on a machine without network, download them into ~/.keras/models/ or give "
            "--init-from PATH (a .weights.h5 file of the backbone, or a model)"
        ) from None
    backbone.set_weights(pretrained.get_weights())
    return "ImageNet backbone weights (Keras applications)"


def _from_model(model: keras.Model, source: InitSource, labels: list) -> str:
    loaded = tf.saved_model.load(source.path)
    theirs = [v for v in loaded.variables if "seed_generator" not in v.name]
    ours = [v for v in model.variables if "seed_generator" not in v.path]
    if [tuple(v.shape) for v in theirs if not v.name.startswith(f"{HEAD}/")] != [
        tuple(v.shape) for v in ours if not v.path.startswith(f"{HEAD}/")
    ]:
        raise WarmStartError(
            f"--init-from {source.path}: its layers do not match this model's (another "
            "version of the architecture?)"
        )
    their_labels = model_file(source.path, LABELS_FILE)
    keep_head = their_labels == list(labels)
    for mine, saved in zip(ours, theirs, strict=True):
        if mine.path.startswith(f"{HEAD}/") and not keep_head:
            continue
        mine.assign(saved)
    if keep_head:
        return f"every weight from {source.describe()}"
    log.warning(
        "warm start: the classes of %s (%s) are not this run's (%s): its classifier head "
        "starts fresh, the rest is loaded",
        source.describe(),
        ", ".join(their_labels or ["unknown"]),
        ", ".join(labels),
    )
    return f"every weight but the classifier head from {source.describe()} (other classes)"
