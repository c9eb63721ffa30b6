"""Hostile and odd input to the sharding stage's image validation: convert or dead-letter.

Every input either comes out as bytes TensorFlow decodes to the recorded size,
or is rejected with one of the known reasons; nothing else (no other
exception, no crash) is allowed.
"""

import json
import subprocess
import sys

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from beam_jobs.images import ImageRejected, prepare_image
from tests.reliability import hostile

REASONS = {
    "empty_file",
    "not_an_image",
    "unsupported_format",
    "too_many_pixels",
    "truncated",
    "decode_failed",
    "empty_image",
}
ODD = hostile.odd_files()
EXPECTED_REJECTIONS = {
    "text.jpg": "not_an_image",
    "empty.jpg": "empty_file",
    "truncated.jpg": "truncated",
    "truncated.png": "truncated",
    "tiff.tif": "unsupported_format",
    "bomb.png": "too_many_pixels",
    "bomb.jpg": "too_many_pixels",
    "bomb.gif": "too_many_pixels",
}


def _check(data: bytes):
    """Either a record TF decodes at its recorded size, or a known rejection reason."""
    try:
        image = prepare_image(data)
    except ImageRejected as rejected:
        assert rejected.reason in REASONS, rejected.reason
        return rejected.reason
    decoded = tf.io.decode_image(image.encoded, channels=3, expand_animations=False)
    assert decoded.shape == (image.height, image.width, 3)
    assert image.image_format in ("jpeg", "png")
    return image


@pytest.mark.parametrize("name", sorted(ODD))
def test_odd_files_are_converted_or_dead_lettered_precisely(name):
    outcome = _check(ODD[name])
    if name in EXPECTED_REJECTIONS:
        assert outcome == EXPECTED_REJECTIONS[name]
    else:
        assert not isinstance(outcome, str), f"{name} rejected as {outcome}"


def test_exif_orientation_is_applied_not_ignored():
    image = _check(ODD["exif_rotated.jpg"])
    assert (image.width, image.height) == (30, 40)  # stored 40x30, shown rotated


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_random_bytes_never_crash(data):
    _check(data)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(set(ODD) - {"empty.jpg"})),
    cut=st.floats(0, 1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=8),
)
@example(name="one_pixel.png", cut=0.75, flips=[])  # cut after IDAT: Pillow reads it, TF not
@example(name="one_pixel.png", cut=0.96875, flips=[])  # IEND without its CRC: the same
def test_truncated_and_bit_flipped_images_never_crash(name, cut, flips):
    data = bytearray(ODD[name][: max(1, int(len(ODD[name]) * cut))])
    for where, value in flips:
        data[min(len(data) - 1, int(where * len(data)))] = value
    _check(bytes(data))


PEAK_MEMORY_SCRIPT = """
import json, resource, sys
from beam_jobs.images import ImageRejected, prepare_image
from tests.reliability import hostile
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
reasons = {}
for name in ("bomb.png", "bomb.jpg", "bomb.gif"):
    try:
        prepare_image(hostile.odd_files()[name])
        reasons[name] = "accepted"
    except ImageRejected as rejected:
        reasons[name] = rejected.reason
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"reasons": reasons, "peak_growth_kb": after - before}))
"""


def test_decompression_bombs_are_refused_from_the_header_with_bounded_memory():
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result["reasons"].values()) == {"too_many_pixels"}
    # Decoding any of them would take gigabytes; refusing them takes next to nothing.
    assert result["peak_growth_kb"] < 50_000
