"""The TensorFlow-free Example encoder against TensorFlow's own serialiser and parser."""

import subprocess
import sys

import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from shardspec import example as spec
from training import features


def _tf_example(values: dict) -> bytes:
    def feature(value):
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    example = tf.train.Example(
        features=tf.train.Features(feature={k: feature(v) for k, v in values.items()})
    )
    return example.SerializeToString(deterministic=True)


record_values = st.fixed_dictionaries(
    {
        "encoded": st.binary(max_size=3000),
        "image_format": st.sampled_from(spec.STORED_FORMATS),
        "height": st.integers(0, 2**40),
        "width": st.integers(0, 2**40),
        "image_id": st.text(max_size=40),
        "sha256": st.text("0123456789abcdef", min_size=64, max_size=64),
        "label": st.integers(-(2**63), 2**63 - 1),
        "label_text": st.text(max_size=30),
        "phash": st.integers(0, 2**64 - 1),
    }
)


@settings(max_examples=300, deadline=None)
@given(record_values)
def test_encode_example_is_byte_identical_to_tensorflow(values):
    expected = _tf_example(
        {
            spec.IMAGE_ENCODED: values["encoded"],
            spec.IMAGE_FORMAT: values["image_format"].encode(),
            spec.IMAGE_HEIGHT: values["height"],
            spec.IMAGE_WIDTH: values["width"],
            spec.IMAGE_ID: values["image_id"].encode(),
            spec.IMAGE_SHA256: values["sha256"].encode(),
            spec.LABEL: values["label"],
            spec.LABEL_TEXT: values["label_text"].encode(),
            # Unsigned 64 bits in an int64 feature: the same bits, read back signed.
            spec.IMAGE_PHASH: values["phash"] - (values["phash"] >= 2**63) * 2**64,
        }
    )
    assert spec.encode_example(**values) == expected


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=20),
        st.one_of(st.binary(max_size=300), st.integers(-(2**63), 2**63 - 1)),
        max_size=6,
    )
)
def test_any_feature_map_serialises_like_tensorflow(values):
    # Map entries in key order, as TensorFlow's deterministic serialisation writes them.
    assert spec.serialize_features(values) == _tf_example(values)


def test_schema_keys_are_prefix_free():
    # Then every protobuf implementation orders them alike (see _map_order).
    keys = list(spec.FEATURE_KINDS)
    assert not [(a, b) for a in keys for b in keys if a != b and b.startswith(a)]


def test_tensorflow_parses_what_the_encoder_writes():
    serialized = spec.encode_example(
        encoded=b"\xff\xd8 not really a jpeg",
        image_format="jpeg",
        height=12,
        width=30,
        image_id="cat/ä ✓.jpg",
        sha256="ab" * 32,
        label=3,
        label_text="big cat",
    )
    parsed = features.parse_example(tf.constant(serialized))
    assert parsed[spec.IMAGE_ENCODED].numpy() == b"\xff\xd8 not really a jpeg"
    assert parsed[spec.IMAGE_HEIGHT].numpy() == 12
    assert parsed[spec.IMAGE_WIDTH].numpy() == 30
    assert parsed[spec.IMAGE_ID].numpy().decode() == "cat/ä ✓.jpg"
    assert parsed[spec.LABEL].numpy() == 3


def test_refuses_formats_the_trainer_does_not_decode():
    with pytest.raises(ValueError, match="image_format"):
        spec.encode_example(
            encoded=b"",
            image_format="gif",
            height=1,
            width=1,
            image_id="x",
            sha256="",
            label=0,
            label_text="x",
        )


def test_bool_is_not_an_int64_feature():
    with pytest.raises(TypeError, match="bytes or int"):
        spec.serialize_features({"flag": True})


@pytest.mark.slow
def test_the_sharding_job_does_not_import_tensorflow():
    # TensorFlow's import costs each Beam process ~9 s and ~500 MB: keep it out of them.
    code = (
        "import sys; import beam_jobs.shard_images, beam_jobs.transforms, beam_jobs.validate;"
        "print('tensorflow' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
