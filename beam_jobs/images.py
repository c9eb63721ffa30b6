"""Validation and normalisation of one raw image file, independent of Beam.

Every file either comes out as bytes the trainer can decode (JPEG or PNG, 8-bit
RGB or grayscale, upright) or is rejected with a short, precise reason that ends
up in the dead-letter output.

Pillow is more lenient than TensorFlow's decoders (it decodes a PNG with a bad
chunk CRC, a PNG cut after its last IDAT, a JPEG without its end marker), and
the Beam workers must not import TensorFlow to ask it. So the original bytes are
stored only when they are proven by checks at least as strict as TensorFlow's:
the stream ends where its format says it ends, every PNG chunk's CRC is right
(`verify()`), the full decode succeeded, and the file is a single JPEG or PNG.
Anything not proven is re-encoded from the pixels Pillow decoded. A record is
therefore byte-identical to its source unless something had to change (resize,
format, colour mode, EXIF rotation, or a failed strict check).
"""

from __future__ import annotations

import hashlib
import io
import struct
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, PngImagePlugin, UnidentifiedImageError

from beam_jobs.perceptual_hash import phash
from shardspec.example import MAX_PIXELS

# Set once for the process, not per call: `warnings.catch_warnings` swaps the global filter
# list and is not safe on the local runner's worker threads. Pillow warns (instead of
# raising) between 1x and 2x its own pixel limit, and about odd chunks while verifying; our
# explicit checks decide, by exceptions, and the warnings would only be noise in the logs.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
warnings.filterwarnings("ignore", module=r"PIL(\.|$)")

# Formats accepted as input. JPEG and PNG are stored as they are; the others are
# converted to PNG (lossless) because the trainer's decoder is only fed JPEG/PNG.
# MPO (what many phone cameras write: a JPEG followed by more JPEG frames) is stored as
# its first frame, re-encoded.
ACCEPTED_FORMATS = {
    "JPEG": "jpeg",
    "MPO": "jpeg",
    "PNG": "png",
    "GIF": "png",
    "BMP": "png",
    "WEBP": "png",
}
# Formats whose original bytes may be stored when every strict check passes.
STORED_AS_IS = ("JPEG", "PNG")
# Modes TensorFlow's decoders read directly into uint8 with channels=3.
PASSTHROUGH_MODES = {"RGB", "L"}
JPEG_REENCODE_QUALITY = 95
# Pillow refuses a PNG whose text chunks exceed 1 MB (MAX_TEXT_CHUNK), a guard against
# zTXt decompression bombs; metadata is not pixels, and a valid photo may carry a large
# XMP or ICC text. Raised, still bounded: a chunk at most 64 MB decompressed, 128 MB in all.
PngImagePlugin.MAX_TEXT_CHUNK = 64 << 20
PngImagePlugin.MAX_TEXT_MEMORY = 128 << 20
EXIF_ORIENTATION = 0x0112
# A JPEG stored as it is needs its pixels only for the checks and the perceptual hash, so
# libjpeg decodes it in grey at 1/2, 1/4 or 1/8 scale (DCT scaling), keeping at least this
# many pixels a side. Every coefficient is still entropy-decoded: truncated and corrupt
# streams fail as at full size (800 cut and overwritten files, baseline and progressive,
# gave the same outcome both ways), and the hash's 32x32 box average moves as little as a
# re-encode moves it (tests/beam_jobs/test_images.py). It saves the hash's pass over the
# full-size pixels, which cost ~45 % of the decode (docs/benchmarks.md, issue #27).
REDUCED_DECODE_SIDE = 128
# Transparent pixels are composited onto this, in every mode (alpha band, palette alpha,
# a tRNS colour): TensorFlow's decoders drop alpha with channels=3, which would show
# whatever colour a transparent pixel happens to hold.
BACKGROUND = 255
# The reason for an input whose preparation raised something no check foresaw (a Pillow
# bug, an odd mode, memory): the input is dead-lettered, the job goes on.
INTERNAL_ERROR = "internal_error"


class ImageRejected(ValueError):
    """A file that cannot become a training record; `reason` is a stable short code."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def internal_error(step: str, err: BaseException) -> ImageRejected:
    """The rejection for an unforeseen exception while `step` ran on one input."""
    message = str(err).splitlines()[0][:300] if str(err) else ""
    return ImageRejected(INTERNAL_ERROR, f"{step}: {type(err).__name__}: {message}".rstrip(": "))


@contextmanager
def step(name: str) -> Iterator[None]:
    """Turn anything but ImageRejected raised inside into `internal_error` naming `name`.

    The promise is per input: whatever one file makes Pillow (or our own code) raise,
    memory errors included, costs that file, never the bundle it is in."""
    try:
        yield
    except ImageRejected:
        raise
    except Exception as err:
        raise internal_error(name, err) from err


@dataclass(frozen=True)
class PreparedImage:
    encoded: bytes
    image_format: str  # "jpeg" or "png"
    height: int
    width: int
    sha256: str
    reencoded: bool
    # What the data statistics and the near-duplicate search need, measured while the
    # image is decoded anyway: its size and format as read, and the stored pixels' pHash.
    source_width: int = 0
    source_height: int = 0
    source_format: str = ""
    phash: int = 0


def prepare_image(data: bytes, *, max_side: int = 0, max_pixels: int = MAX_PIXELS) -> PreparedImage:
    """Validate `data` as an image and return what should be stored for it.

    Raises ImageRejected, and nothing else: for empty, non-image, truncated or oversized
    input with its reason, and as `internal_error` (naming the step) for anything else.
    `max_side` > 0 shrinks the image so its longest side is at most that.
    """
    if not data:
        raise ImageRejected("empty_file")
    steps = _Steps()
    try:
        return _prepare(data, max_side, max_pixels, steps)
    except ImageRejected:
        raise
    except Exception as err:  # one `try` per image, not one per step: this is the hot path
        raise internal_error(steps.current, err) from err


class _Steps:
    current = "probe"


def _prepare(data: bytes, max_side: int, max_pixels: int, steps: _Steps) -> PreparedImage:
    image, source_format = _open(data, max_pixels)
    source_width, source_height = image.size
    steps.current = "decode"
    kept = source_format == "JPEG" and _jpeg_kept_as_is(image, data, max_side)
    if kept:  # its pixels are only checked and hashed: decode at a reduced scale
        image.draft("L", (REDUCED_DECODE_SIDE, REDUCED_DECODE_SIDE))
    try:
        image.load()  # every byte decoded: catches truncated and corrupt data
    except Exception as err:
        raise _decode_error(err) from None
    target_format = ACCEPTED_FORMATS[source_format]
    image, changed = (
        (image, False) if kept else _normalise(image, data, source_format, max_side, steps)
    )

    steps.current = "encode"
    encoded = _encode(image, target_format) if changed else data
    steps.current = "phash"
    perceptual = phash(image)
    height, width = (image.height, image.width) if changed else (source_height, source_width)
    return PreparedImage(
        encoded=encoded,
        image_format=target_format,
        height=height,
        width=width,
        sha256=hashlib.sha256(encoded).hexdigest(),
        reencoded=changed,
        source_width=source_width,
        source_height=source_height,
        source_format=source_format.lower(),
        phash=perceptual,
    )


def _open(data: bytes, max_pixels: int) -> tuple[Image.Image, str]:
    """The lazily opened image and its format, once its header passes every check."""
    try:
        image = Image.open(io.BytesIO(data))  # the pixel check below decides, not Pillow
    except UnidentifiedImageError:
        raise ImageRejected("not_an_image", "no known image header") from None
    except Image.DecompressionBombError as err:
        raise ImageRejected("too_many_pixels", str(err)) from None
    except Exception as err:
        raise _decode_error(err) from None

    source_format = image.format or ""
    if source_format not in ACCEPTED_FORMATS:
        raise ImageRejected("unsupported_format", source_format or "unknown")
    width, height = image.size
    if width < 1 or height < 1:
        raise ImageRejected("empty_image", f"{width}x{height}")
    # A GIF's frames may be larger than its logical screen (image.size): a 1x1 screen
    # can announce a 20000x20000 frame. Serving applies the same rule (training/features).
    largest = gif_largest_pixels(data) if source_format == "GIF" else width * height
    if max(largest, width * height) > max_pixels:
        raise ImageRejected(
            "too_many_pixels",
            f"{width}x{height} (largest frame {largest} pixels) exceeds the limit of "
            f"{max_pixels} pixels",
        )
    return image, source_format


def _normalise(
    image: Image.Image, data: bytes, source_format: str, max_side: int, steps: _Steps
) -> tuple[Image.Image, bool]:
    """The decoded image as it must be stored, and whether that differs from `data`."""
    changed = False
    steps.current = "orient"
    if _exif_orientation(image) != 1:
        # Store upright pixels: TensorFlow's decoders ignore EXIF orientation.
        image, changed = ImageOps.exif_transpose(image), True

    steps.current = "convert"
    if image.mode not in PASSTHROUGH_MODES or "transparency" in image.info:
        image, changed = flatten_to_rgb(image), True

    steps.current = "resize"
    if max_side and max(image.size) > max_side:
        scale = max_side / max(image.size)
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image, changed = image.resize(size, Image.Resampling.LANCZOS), True

    steps.current = "check"
    if not changed and not _proven(data, source_format):
        changed = True  # store what Pillow decoded, re-encoded
    return image, changed


def _jpeg_kept_as_is(image: Image.Image, data: bytes, max_side: int) -> bool:
    """What the steps after the decode will decide for a JPEG, read from its header: nothing
    to rotate, convert or shrink, and its bytes proven. (Only for JPEG: a PNG's EXIF may
    follow its pixels, and Pillow decodes them to find it.)"""
    return (
        image.mode in PASSTHROUGH_MODES
        and "transparency" not in image.info
        and not (max_side and max(image.size) > max_side)
        and _exif_orientation(image) == 1
        and _proven(data, "JPEG")
    )


def _exif_orientation(image: Image.Image) -> int:
    """The EXIF orientation tag, 1 (as stored) when there is none or the EXIF block is
    unreadable: a broken block is metadata, and the pixels are still good (TensorFlow
    never reads EXIF), so it costs the rotation, not the image."""
    try:
        return int(image.getexif().get(EXIF_ORIENTATION, 1))
    except (SyntaxError, ValueError, TypeError, OSError, struct.error):
        return 1


def _proven(data: bytes, source_format: str) -> bool:
    """The original bytes pass checks at least as strict as TensorFlow's decoders."""
    if source_format not in STORED_AS_IS or not _properly_terminated(data, source_format):
        return False
    if source_format == "PNG":
        try:
            Image.open(io.BytesIO(data)).verify()  # every chunk's CRC, through IEND
        except Exception:
            return False
    return True


def gif_largest_pixels(data: bytes) -> int:
    """The largest of a GIF's logical screen and its frames, in pixels, from the block
    structure alone (no decoding). Stops at the trailer or at the first broken block."""
    if len(data) < 13:
        return 0
    width, height, flags = struct.unpack_from("<HHB", data, 6)
    largest = width * height
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)  # global colour table
    while pos < len(data):
        block = data[pos]
        if block == 0x21:  # extension: label byte, then sub-blocks
            pos += 2
        elif block == 0x2C and pos + 10 <= len(data):  # image descriptor
            frame_width, frame_height, frame_flags = struct.unpack_from("<HHB", data, pos + 5)
            largest = max(largest, frame_width * frame_height)
            local_table = 3 << ((frame_flags & 7) + 1) if frame_flags & 0x80 else 0
            pos += 10 + local_table + 1  # + LZW minimum code size, then sub-blocks
        else:  # trailer (0x3B) or not a block
            return largest
        while pos < len(data) and data[pos]:
            pos += data[pos] + 1
        pos += 1
    return largest


def _properly_terminated(data: bytes, source_format: str) -> bool:
    if source_format == "PNG":
        return _png_chunks_end_at_iend(data)
    return b"\xff\xd9" in data[-4096:]  # JPEG EOI; some cameras append trailers after it


def _png_chunks_end_at_iend(data: bytes) -> bool:
    """Every chunk, walked from the signature, has a right CRC, and the first IEND ends
    the file. Pillow's verify() lets a broken IEND CRC pass (found by fuzzing: an IEND
    whose CRC a copied range overwrote, a whole IEND later in the file), and libpng, under
    TensorFlow, refuses it; bytes after IEND are not proven either."""
    pos = 8
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        end = pos + 12 + length
        if end > len(data):
            return False
        kind = data[pos + 4 : pos + 8]
        (crc,) = struct.unpack_from(">I", data, end - 4)
        if zlib.crc32(data[pos + 4 : end - 4]) != crc:
            return False
        if kind == b"IEND":
            return end == len(data)
        pos = end
    return False


def _decode_error(err: Exception) -> ImageRejected:
    detail = f"{type(err).__name__}: {err}"
    if "truncated" in str(err).lower():
        return ImageRejected("truncated", detail)
    return ImageRejected("decode_failed", detail)


# Modes whose one band is a grey level, and how to bring it to 8 bits: 16-bit samples
# are scaled (not clipped), as is 32-bit "I" (what 16-bit PNGs opened as in older
# Pillows); "F" is clipped to 0..255, as Pillow's own conversion does.
_GREY_SCALE = {
    "1": None,
    "L": None,
    "I": 256,
    "I;16": 256,
    "I;16L": 256,
    "I;16B": 256,
    "I;16N": 256,
    "F": 1,
}
# Modes with an alpha band, and the straight-alpha mode each converts to.
_WITH_ALPHA = {"RGBA": "RGBA", "LA": "LA", "PA": "RGBA", "La": "LA", "RGBa": "RGBA"}


def flatten_to_rgb(image: Image.Image) -> Image.Image:
    """Any mode -> an 8-bit "L" or "RGB" image with no transparency left in it.

    Transparency in every form Pillow reports it (an alpha band, premultiplied or not;
    palette alpha, as bytes or one index; a tRNS grey level or RGB colour) becomes a
    composite onto white (BACKGROUND). A `transparency` entry that means nothing for the
    mode (a tuple on a palette, bytes on grey) is ignored, as decoders ignore it.
    """
    if image.mode in _WITH_ALPHA:  # one conversion to straight alpha serves both
        straight = image.convert(_WITH_ALPHA[image.mode])
        alpha = straight.getchannel("A")
        opaque = straight.convert("L" if straight.mode == "LA" else "RGB")
    else:
        alpha = _transparency_mask(image)
        opaque = _opaque_8bit(image)
    # A new image, so nothing of the source's info (its `transparency`) is saved with it.
    flat = Image.new(
        opaque.mode, opaque.size, BACKGROUND if opaque.mode == "L" else (BACKGROUND,) * 3
    )
    flat.paste(opaque, mask=alpha)
    return flat


def _opaque_8bit(image: Image.Image) -> Image.Image:
    """A mode without an alpha band as 8-bit grey or RGB, its transparency ignored."""
    if image.mode in _GREY_SCALE:
        return _grey_to_8bit(image)
    if "transparency" in image.info:  # P or RGB: the mask has it; Pillow would apply it
        plain = image.copy()
        del plain.info["transparency"]
        return plain.convert("RGB")
    return image.convert("RGB")  # P, RGB, CMYK, YCbCr, LAB, HSV


def _transparency_mask(image: Image.Image) -> Image.Image | None:
    """Opacity from a `transparency` entry or palette alpha, as an "L" mask (255 opaque);
    None when all is opaque. Modes with an alpha band are flatten_to_rgb's own case."""
    mode = image.mode
    transparency = image.info.get("transparency")
    if mode == "P":
        palette_alpha = image.palette is not None and image.palette.mode == "RGBA"
        if isinstance(transparency, int | bytes) or palette_alpha:
            return image.convert("RGBA").getchannel("A")
        return None
    if transparency is None:
        return None
    pixels = np.asarray(image)
    if mode in _GREY_SCALE and isinstance(transparency, int | float):
        clear = pixels == (bool(transparency) if mode == "1" else transparency)
    elif mode == "RGB" and isinstance(transparency, tuple) and len(transparency) == 3:
        clear = (pixels == np.asarray(transparency, dtype=pixels.dtype)).all(axis=-1)
    else:
        return None
    return Image.fromarray(np.where(clear, 0, 255).astype(np.uint8), "L")


def _grey_to_8bit(image: Image.Image) -> Image.Image:
    divisor = _GREY_SCALE[image.mode]
    if divisor is None:  # "1", "L"
        return image.convert("L")
    pixels = np.asarray(image).astype(np.float64) / divisor
    return Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8), "L")


def _encode(image: Image.Image, image_format: str) -> bytes:
    buffer = io.BytesIO()
    if image_format == "jpeg":
        image.save(buffer, format="JPEG", quality=JPEG_REENCODE_QUALITY)
    else:
        image.save(buffer, format="PNG")
    return buffer.getvalue()
