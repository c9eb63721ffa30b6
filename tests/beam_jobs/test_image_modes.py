"""Every mode x transparency kind converts to 8-bit RGB or grey, transparent pixels on
white, and TensorFlow decodes what is stored to the pixels Pillow produced."""

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from beam_jobs.images import BACKGROUND, _encode, flatten_to_rgb, prepare_image
from tests.reliability import image_modes
from tests.reliability.image_modes import CLEAR, GRID, OPAQUE, WHITE

FILES = image_modes.files()


def _rgb(image: Image.Image, pixel) -> tuple:
    plain = image.copy()
    plain.info.pop("transparency", None)  # Pillow's own convert trips over some entries
    return tuple(int(v) for v in np.asarray(plain.convert("RGB"))[pixel[1], pixel[0]])


@pytest.mark.parametrize("case", GRID, ids=lambda c: c.name)
def test_every_mode_and_transparency_kind_flattens_onto_white(case):
    flat = flatten_to_rgb(case.image)
    assert flat.mode in ("L", "RGB")
    assert "transparency" not in flat.info  # nothing left to trip the encoder
    assert BACKGROUND == 255
    if case.clear:
        assert _rgb(flat, CLEAR) == WHITE
    else:  # an entry that means nothing for the mode makes nothing clear (CLEAR is dark)
        assert _rgb(flat, CLEAR) != WHITE
    assert np.abs(np.subtract(_rgb(flat, OPAQUE), case.opaque_rgb)).max() <= 1
    decoded = tf.io.decode_png(_encode(flat, "png"), channels=3).numpy()
    np.testing.assert_array_equal(decoded, np.asarray(flat.convert("RGB")))


def test_the_grid_covers_every_mode_and_kind():
    assert len(GRID) == 19 * 5
    assert {c.mode for c in GRID} >= {"1", "P", "PA", "La", "RGBa", "I;16B", "F", "LAB", "HSV"}


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_storable_mode_and_transparency_kind_is_stored_decodable(name):
    data, case = FILES[name]
    source = Image.open(io.BytesIO(data))
    transparent = "transparency" in source.info or source.mode in ("LA", "RGBA", "PA")
    image = prepare_image(data)
    decoded = tf.io.decode_image(image.encoded, channels=3, expand_animations=False).numpy()
    assert decoded.shape == (image.height, image.width, 3) == (3, 4, 3)
    if image.image_format == "png" and image.reencoded:  # TensorFlow reads what Pillow made
        np.testing.assert_array_equal(decoded, np.asarray(flatten_to_rgb(source).convert("RGB")))
    else:  # one stored JPEG, two decoders: their IDCTs round a sharp edge a few levels apart
        pillow = np.asarray(Image.open(io.BytesIO(image.encoded)).convert("RGB"))
        assert np.abs(decoded.astype(int) - pillow).max() <= 4
    if transparent and case.clear:
        assert tuple(decoded[CLEAR[1], CLEAR[0]]) == WHITE
    if not name.endswith(".jpg"):
        assert np.abs(decoded[OPAQUE[1], OPAQUE[0]].astype(int) - case.opaque_rgb).max() <= 1


def test_a_one_bit_png_with_a_transparent_colour_is_stored_not_a_crash():
    """Pillow keeps an int `transparency` when converting mode 1 to RGB, and saving that
    as PNG raised ValueError: one such file failed a whole job."""
    image = Image.new("1", (8, 8), 1)
    image.putpixel((0, 0), 0)
    buffer = io.BytesIO()
    image.save(buffer, "PNG", transparency=0)
    stored = prepare_image(buffer.getvalue())
    decoded = tf.io.decode_png(stored.encoded, channels=3).numpy()
    assert (decoded == 255).all()  # black was the transparent colour: white on white
