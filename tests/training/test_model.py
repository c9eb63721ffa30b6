import numpy as np
import pytest

from training.model import ARCHITECTURES, build_model


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_every_architecture_builds_offline_and_returns_logits(architecture):
    model = build_model(architecture, 32, 5)
    out = model(np.zeros((2, 32, 32, 3), np.float32), training=False)
    assert tuple(out.shape) == (2, 5)
    assert out.dtype.name == "float32"


def test_unknown_architecture_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of small_cnn"):
        build_model("vgg_huge", 32, 3)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_batch_norm_statistics_are_synchronised_across_replicas(architecture):
    import keras

    model = build_model(architecture, 32, 3)
    batch_norms = [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.BatchNormalization)
    ]
    assert batch_norms and all(layer.synchronized for layer in batch_norms)
