"""Hostile and odd input to the sharding stage's image validation: convert or dead-letter.

Every input either comes out as bytes TensorFlow decodes to the recorded size,
or is rejected with one of the known reasons; nothing else (no other
exception, no crash) is allowed.
"""

import io
import json
import random
import struct
import subprocess
import sys

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import PngImagePlugin

from beam_jobs.images import ImageRejected, gif_largest_pixels, prepare_image
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
from PIL import PngImagePlugin

from beam_jobs.images import ImageRejected, gif_largest_pixels, prepare_image
from tests.reliability import hostile
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
reasons = {}
odd = {**hostile.odd_files(), "gif_frame_bomb.gif": hostile.gif_frame_bomb()}
for name in ("bomb.png", "bomb.jpg", "bomb.gif", "gif_frame_bomb.gif"):
    try:
        prepare_image(odd[name])
        reasons[name] = "accepted"
    except ImageRejected as rejected:
        reasons[name] = rejected.reason
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"reasons": reasons, "peak_growth_kb": after - before}))
"""


@pytest.mark.slow
def test_decompression_bombs_are_refused_from_the_header_with_bounded_memory():
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result["reasons"].values()) == {"too_many_pixels"}
    # Decoding any of them would take gigabytes; refusing them takes next to nothing.
    assert result["peak_growth_kb"] < 50_000


def _png_chunks(data: bytes):
    pos = 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        yield pos, length, data[pos + 4 : pos + 8]
        pos += 12 + length


def test_png_with_a_corrupt_chunk_crc_is_reencoded_not_stored_as_is():
    """Pillow decodes it; TensorFlow refuses it (the third "lenient vs strict" case)."""
    png = hostile.encode(hostile.noise(40, 30), "PNG")
    for start, length, kind in _png_chunks(png):
        if kind == b"IHDR":
            continue  # a broken IHDR is not an image at all (tested by the fuzzing)
        data = bytearray(png)
        data[start + 8 + length] ^= 0xFF  # the chunk's CRC
        image = _check(bytes(data))
        assert image.reencoded, kind


def test_mpo_from_a_phone_camera_is_stored_as_its_first_frame():
    first, second = hostile.noise(40, 30, seed=1), hostile.noise(40, 30, seed=2)
    buffer = io.BytesIO()
    first.save(buffer, format="MPO", save_all=True, append_images=[second])
    image = _check(buffer.getvalue())
    assert image.image_format == "jpeg" and (image.width, image.height) == (40, 30)
    assert image.encoded.count(b"\xff\xd8") == 1  # one JPEG, not the two-frame file


def test_png_with_large_metadata_is_accepted():
    info = PngImagePlugin.PngInfo()
    info.add_text("XML:com.adobe.xmp", "x" * (2 << 20))
    buffer = io.BytesIO()
    hostile.noise(20, 20).save(buffer, format="PNG", pnginfo=info)
    assert not isinstance(_check(buffer.getvalue()), str)


def test_gif_frame_larger_than_its_screen_is_refused_in_sharding():
    assert _check(hostile.gif_frame_bomb()) == "too_many_pixels"
    assert gif_largest_pixels(hostile.gif_frame_bomb()) == 20_000 * 20_000


def _fuzzed_corpus(count: int) -> dict[str, bytes]:
    """Valid JPEGs and PNGs with random bytes changed, cut, or a PNG chunk's CRC broken."""
    rng = random.Random(12)
    sources = [
        hostile.encode(hostile.noise(48, 36, seed=seed), fmt, **options)
        for seed, (fmt, options) in enumerate(
            [("JPEG", {}), ("JPEG", {"progressive": True}), ("PNG", {}), ("PNG", {"optimize": 1})]
        )
    ]
    corpus = {}
    for i in range(count):
        data = bytearray(sources[i % len(sources)])
        kind = i % 3
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(20, len(data))] = rng.randrange(256)
        elif kind == 1:
            data = data[: rng.randrange(len(data) // 2, len(data))]
        elif data.startswith(b"\x89PNG"):
            start, length, _ = rng.choice(list(_png_chunks(bytes(data)))[1:])
            data[start + 8 + length] ^= 0xFF
        suffix = "png" if data.startswith(b"\x89PNG") else "jpg"
        corpus[f"f{i:03d}.{suffix}"] = bytes(data)
    return corpus


@pytest.mark.parametrize(
    "mode",
    [
        ["--direct_running_mode=in_memory", "--direct_num_workers=1"],
        # Worker threads share one process: nothing in validation may depend on globals.
        ["--direct_running_mode=multi_threading", "--direct_num_workers=4"],
    ],
    ids=["one_thread", "four_threads"],
)
def test_every_record_the_job_stores_from_a_fuzzed_corpus_decodes_in_the_trainer(tmp_path, mode):
    """The class, not the instance: whatever the job stores, the trainer's own decoder
    (and the serving signature, which uses the same function) decodes."""
    from beam_jobs import shard_images
    from training import features

    for name, data in _fuzzed_corpus(120).items():
        path = tmp_path / "in" / "label" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    output = tmp_path / "out"
    args = ["--input", str(tmp_path / "in"), "--output", str(output), "--max-error-fraction", "1"]
    assert shard_images.run([*args, "--allow-one-class", *mode]) == 0  # one label folder
    decode = tf.function(lambda encoded: features.decode_image(encoded, 32))
    stored = 0
    for shard in sorted(output.glob("*.tfrecord")):
        for raw in tf.data.TFRecordDataset(str(shard)):
            example = features.parse_example(raw)
            decode(example[features.IMAGE_ENCODED])  # raises on anything TF cannot decode
            stored += 1
    metadata = json.loads((output / "metadata.json").read_text())
    assert stored == metadata["num_records"] > 20
    assert stored + metadata["num_errors"] == 120
