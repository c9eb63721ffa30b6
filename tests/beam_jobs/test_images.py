import io

import pytest
from PIL import Image

from beam_jobs.images import ImageRejected, prepare_image


def _encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


def _rgb(width=40, height=30):
    return Image.new("RGB", (width, height), (200, 30, 90))


def _rejected(data: bytes, **kwargs) -> str:
    with pytest.raises(ImageRejected) as info:
        prepare_image(data, **kwargs)
    return info.value.reason


def test_jpeg_is_kept_byte_identical():
    data = _encode(_rgb(), "JPEG")
    image = prepare_image(data)
    assert image.encoded == data
    assert (image.image_format, image.width, image.height) == ("jpeg", 40, 30)
    assert not image.reencoded


def test_grayscale_png_is_kept_byte_identical():
    data = _encode(Image.new("L", (17, 9), 120), "PNG")
    image = prepare_image(data)
    assert image.encoded == data
    assert (image.image_format, image.width, image.height) == ("png", 17, 9)


def test_max_side_shrinks_longest_side_and_keeps_aspect():
    data = _encode(_rgb(200, 100), "JPEG")
    image = prepare_image(data, max_side=50)
    assert (image.width, image.height) == (50, 25)
    assert image.reencoded and image.image_format == "jpeg"
    assert Image.open(io.BytesIO(image.encoded)).size == (50, 25)


def test_max_side_larger_than_image_keeps_bytes():
    data = _encode(_rgb(20, 10), "PNG")
    assert prepare_image(data, max_side=50).encoded == data


def test_rgba_png_is_flattened_to_rgb():
    data = _encode(Image.new("RGBA", (8, 8), (10, 20, 30, 0)), "PNG")
    image = prepare_image(data)
    decoded = Image.open(io.BytesIO(image.encoded))
    assert decoded.mode == "RGB" and image.reencoded
    assert decoded.getpixel((0, 0)) == (255, 255, 255)  # transparent -> white background


def test_gif_is_converted_to_png():
    data = _encode(Image.new("P", (12, 6), 3), "GIF")
    image = prepare_image(data)
    assert image.image_format == "png"
    assert Image.open(io.BytesIO(image.encoded)).format == "PNG"


def test_exif_rotation_is_applied():
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    data = _encode(_rgb(40, 20), "JPEG", exif=exif.tobytes())
    image = prepare_image(data)
    assert (image.width, image.height) == (20, 40)
    assert image.reencoded


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty_file"),
        (b"hello, I am a text file named cat.jpg\n", "not_an_image"),
        (bytes(range(256)) * 8, "not_an_image"),
    ],
)
def test_non_images_are_rejected_with_reason(data, reason):
    assert _rejected(data) == reason


def test_truncated_jpeg_is_rejected():
    data = _encode(Image.effect_noise((120, 120), 60).convert("RGB"), "JPEG")
    assert _rejected(data[: len(data) // 2]) in {"truncated", "decode_failed"}


def test_pixel_limit_is_checked_from_the_header():
    data = _encode(_rgb(100, 100), "PNG")
    assert _rejected(data, max_pixels=9_999) == "too_many_pixels"
    assert prepare_image(data, max_pixels=10_000).width == 100


def test_unsupported_format_is_rejected():
    data = _encode(_rgb(), "TIFF")
    assert _rejected(data) == "unsupported_format"


def _photo_jpeg(**kwargs) -> bytes:
    """A JPEG large enough for libjpeg's reduced-scale decode (both sides >= 256)."""
    import matplotlib

    photo = Image.open(f"{matplotlib.get_data_path()}/sample_data/grace_hopper.jpg")
    return _encode(photo.convert("RGB"), "JPEG", quality=90, **kwargs)


@pytest.mark.parametrize("progressive", [False, True])
def test_large_jpeg_kept_as_is_has_its_full_size_and_the_full_decodes_hash(progressive):
    from beam_jobs import perceptual_hash as ph

    data = _photo_jpeg(progressive=progressive)
    image = prepare_image(data)
    full = Image.open(io.BytesIO(data))
    full.load()
    assert image.encoded == data and not image.reencoded
    assert (image.width, image.height) == full.size == (image.source_width, image.source_height)
    # Decoded at a quarter of its size in grey, hashed as the full decode hashes: as close
    # as a re-encode of the photo at JPEG quality 60 is (tests/beam_jobs/test_perceptual_hash.py).
    assert ph.distance(image.phash, ph.phash(full)) <= 2


@pytest.mark.parametrize("progressive", [False, True])
def test_a_damaged_jpeg_fails_as_its_full_decode_fails(progressive):
    """The reduced-scale decode of JPEGs kept as they are still reads every coefficient:
    cut and overwritten streams are rejected exactly when decoding them in full fails."""
    import random

    data, rng = _photo_jpeg(progressive=progressive), random.Random(7)
    eoi = b"\xff\xd9"  # cut streams that still end in the end marker take the reduced path
    damaged = [data[:n] + eoi for n in (len(data) // 3, len(data) // 2, len(data) - 30)]
    for _ in range(30):
        copy = bytearray(data)
        at = rng.randrange(1000, len(copy) - 100)
        copy[at : at + 40] = rng.randbytes(40)
        damaged.append(bytes(copy))
    failures = 0
    for variant in damaged:
        try:
            Image.open(io.BytesIO(variant)).load()
            full_decode_fails = False
        except Exception:
            full_decode_fails = True
        try:
            prepare_image(variant)
            rejected = False
        except ImageRejected:
            rejected = True
        assert rejected == full_decode_fails
        failures += full_decode_fails
    assert failures  # the damage reached the decoder, not only the header checks
