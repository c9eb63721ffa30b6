"""Every image mode Pillow opens, with every kind of `transparency` entry, made in memory.

Each case is a 4x3 image whose pixel (0, 0) is the one a transparency entry (or an
alpha band) makes clear, and whose other pixels are opaque with a known colour;
`GRID` holds every mode x kind, `files()` every combination an accepted file format
can store. Transparent pixels must come out white (beam_jobs.images.BACKGROUND).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image

SIZE = (4, 3)
CLEAR = (0, 0)  # the pixel a transparency entry, when it applies, makes transparent
OPAQUE = (2, 1)  # a pixel no entry touches
WHITE = (255, 255, 255)

MODES = (
    "1", "L", "LA", "La", "P", "PA", "I", "I;16", "I;16L", "I;16B", "I;16N", "F",
    "RGB", "RGBA", "RGBa", "CMYK", "YCbCr", "LAB", "HSV",
)  # fmt: skip
KINDS = ("none", "int", "tuple", "bytes", "palette")

# Per mode: the fill (opaque everywhere but CLEAR), the value put at CLEAR, and the
# opaque fill's colour in 8-bit RGB, as the mode defines it.
_GREY16 = (40_000, 7, (156,) * 3)  # 16/32-bit grey: scaled by 1/256
_FILLS = {
    "1": (1, 0, WHITE),
    "L": (200, 7, (200,) * 3),
    "LA": ((200, 255), (7, 0), (200,) * 3),
    "La": ((200, 255), (0, 0), (200,) * 3),
    "P": (5, 2, (50, 150, 250)),
    "PA": ((5, 255), (2, 0), (50, 150, 250)),
    "I": _GREY16,
    "I;16": _GREY16,
    "I;16L": _GREY16,
    "I;16B": _GREY16,
    "I;16N": _GREY16,
    "F": (100.0, 7.0, (100,) * 3),
    "RGB": ((10, 200, 30), (1, 2, 3), (10, 200, 30)),
    "RGBA": ((10, 200, 30, 255), (1, 2, 3, 0), (10, 200, 30)),
    "RGBa": ((10, 200, 30, 255), (0, 0, 0, 0), (10, 200, 30)),
    "CMYK": ((0, 255, 0, 0), (1, 2, 3, 4), None),  # colour: Pillow's conversion
    "YCbCr": ((120, 90, 200), (1, 2, 3), None),
    "LAB": ((60, 140, 100), (1, 2, 3), None),
    "HSV": ((30, 200, 220), (1, 2, 3), None),
}
_ALPHA_BAND = {"LA", "La", "PA", "RGBA", "RGBa"}
_GREY = {"1", "L", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"}


def _palette(alpha: bool) -> list[int]:
    entries = [(i * 10 % 256, (i * 30 + 0) % 256, (i * 50) % 256) for i in range(256)]
    entries[5] = (50, 150, 250)
    if not alpha:
        return [c for rgb in entries for c in rgb]
    return [c for i, rgb in enumerate(entries) for c in (*rgb, 0 if i == 2 else 255)]


@dataclass(frozen=True)
class Case:
    mode: str
    kind: str
    image: Image.Image
    clear: bool  # whether pixel CLEAR must come out transparent (white)
    opaque_rgb: tuple[int, int, int]  # what pixel OPAQUE must come out as

    @property
    def name(self) -> str:
        return f"{self.mode.replace(';', '_')}-{self.kind}"


def case(mode: str, kind: str) -> Case:
    fill, clear_value, opaque_rgb = _FILLS[mode]
    image = Image.new(mode, SIZE, fill)
    if mode in ("P", "PA"):
        image.putpalette(_palette(alpha=kind == "palette"), "RGBA" if kind == "palette" else "RGB")
    image.putpixel(CLEAR, clear_value)
    if opaque_rgb is None:
        opaque_rgb = Image.new(mode, (1, 1), fill).convert("RGB").getpixel((0, 0))
    entry = {
        "none": None,
        "int": clear_value if mode in _GREY or mode == "P" else 7,
        "tuple": clear_value if mode == "RGB" else (1, 2, 3),
        "bytes": b"\xff\xff\x00" if mode == "P" else b"\x00\x01",
        "palette": None,
    }[kind]
    if entry is not None:
        image.info["transparency"] = entry
    clear = (
        mode in _ALPHA_BAND
        or (mode == "P" and kind in ("int", "bytes", "palette"))
        or (mode in _GREY and kind == "int")
        or (mode == "RGB" and kind == "tuple")
    )
    return Case(mode, kind, image, clear, tuple(opaque_rgb))


GRID = [case(mode, kind) for mode in MODES for kind in KINDS]

# What each accepted format can store of the grid, and how it is saved.
_SAVED = {
    "PNG": {"1", "L", "LA", "P", "RGB", "RGBA", "I;16", "I"},
    "GIF": {"P", "L"},
    "BMP": {"1", "L", "P", "RGB", "RGBA"},
    "WEBP": {"RGB", "RGBA"},
    "JPEG": {"L", "RGB", "CMYK"},
}
_EXTENSION = {"PNG": "png", "GIF": "gif", "BMP": "bmp", "WEBP": "webp", "JPEG": "jpg"}


def files() -> dict[str, tuple[bytes, Case]]:
    """name -> (file bytes, its case), for every case a format stores (as the format
    stores it: GIF and PNG keep `transparency`, BMP and JPEG drop it)."""
    made = {}
    for item in GRID:
        for fmt, modes in _SAVED.items():
            if item.mode not in modes:
                continue
            options = {"lossless": True} if fmt == "WEBP" else {}
            if fmt == "JPEG":
                options["quality"] = 100
            buffer = io.BytesIO()
            try:
                item.image.save(buffer, format=fmt, **options)
            except (OSError, ValueError, TypeError, KeyError):
                continue  # an entry this format cannot write (a tuple on a palette, ...)
            made[f"{item.name}.{_EXTENSION[fmt]}"] = (buffer.getvalue(), item)
    return made
