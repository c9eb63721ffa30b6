"""Hostile and odd image files, made in memory for the reliability tests."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

BOMB_SIDE = 40_000  # 1.6 G pixels claimed by a file of a few hundred bytes


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def noise(width: int, height: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "CMYK": 4, "L": 1}[mode]
    array = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
    return Image.fromarray(array.squeeze(-1) if channels == 1 else array, mode)


def bomb_png(width: int = BOMB_SIDE, height: int = BOMB_SIDE) -> bytes:
    """A real PNG (valid chunks and CRCs) whose IHDR claims width x height."""
    png = encode(Image.new("L", (1, 1)), "PNG")
    chunk = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return png[:8] + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk)) + png[33:]


def bomb_jpeg(width: int = BOMB_SIDE, height: int = BOMB_SIDE) -> bytes:
    """A small JPEG whose frame header (SOF0) claims width x height."""
    data = bytearray(encode(Image.new("RGB", (8, 8)), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def bomb_gif(width: int = 65_535, height: int = 65_535) -> bytes:
    data = bytearray(encode(Image.new("P", (1, 1)), "GIF"))
    data[6:10] = struct.pack("<HH", width, height)
    return bytes(data)


def gif_frame_bomb(width: int = 20_000, height: int = 20_000) -> bytes:
    """A 1x1 logical screen holding one frame that claims width x height (~50 bytes)."""
    data = bytearray(encode(Image.new("P", (1, 1)), "GIF"))
    descriptor = data.index(b"\x2c", 13)
    data[descriptor + 5 : descriptor + 9] = struct.pack("<HH", width, height)
    return bytes(data)


def odd_files() -> dict[str, bytes]:
    """Each a kind of file a real image folder holds; name -> bytes."""
    rgb = noise(40, 30)
    animated = io.BytesIO()
    frames = [noise(20, 20, seed=i).convert("P") for i in range(3)]
    frames[0].save(animated, format="GIF", save_all=True, append_images=frames[1:], duration=50)
    rotated = rgb.copy()
    exif = rotated.getexif()
    exif[0x0112] = 6  # rotate 90 clockwise to view
    sixteen = Image.fromarray(np.arange(40 * 30, dtype=np.uint16).reshape(30, 40) * 50, "I;16")
    return {
        "cmyk.jpg": encode(noise(40, 30, "CMYK"), "JPEG"),
        "progressive.jpg": encode(rgb, "JPEG", progressive=True),
        "exif_rotated.jpg": encode(rotated, "JPEG", exif=exif),
        "gray.png": encode(noise(40, 30, "L"), "PNG"),
        "sixteen_bit.png": encode(sixteen, "PNG"),
        "palette.png": encode(rgb.convert("P"), "PNG"),
        "rgba.png": encode(noise(40, 30, "RGBA"), "PNG"),
        "animated.gif": animated.getvalue(),
        "one_pixel.png": encode(Image.new("RGB", (1, 1), (255, 0, 0)), "PNG"),
        "one_pixel.jpg": encode(Image.new("RGB", (1, 1), (255, 0, 0)), "JPEG"),
        "bmp.bmp": encode(rgb, "BMP"),
        "webp.webp": encode(rgb, "WEBP"),
        "png_named.jpg": encode(rgb, "PNG"),
        "text.jpg": b"this is a text file, not a photo\n",
        "empty.jpg": b"",
        "truncated.jpg": encode(rgb, "JPEG")[:200],
        "truncated.png": encode(rgb, "PNG")[:100],
        "tiff.tif": encode(rgb, "TIFF"),
        "bomb.png": bomb_png(),
        "bomb.jpg": bomb_jpeg(),
        "bomb.gif": bomb_gif(),
    }
