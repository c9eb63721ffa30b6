"""Generate the built-in sample dataset: real JPEG/PNG files in <label>/<name> layout.

    python -m beam_jobs.sample_data OUT [--images-per-class N] [--seed S]

Four classes of filled shapes (circle, square, triangle, cross) with random
colour, size, position and rotation over a noisy background of random colour,
at varied image sizes. The classes differ only in shape, so a model has to
learn shape, not colour, yet a small CNN learns it in a few CPU epochs. The
same seed always writes the same files; no download is needed anywhere.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import random
import sys

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ("circle", "cross", "square", "triangle")
PNG_EVERY = 4  # every 4th image is a PNG, the rest JPEG


def _contrasting_colours(rng: random.Random) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """A light background and a darker shape, each of random hue."""
    background = tuple(rng.randrange(120, 256) for _ in range(3))
    shape = tuple(rng.randrange(0, 100) for _ in range(3))
    return background, shape


def _polygon(cx: float, cy: float, radius: float, angle: float, points: list[tuple[float, float]]):
    cos, sin = math.cos(angle), math.sin(angle)
    return [
        (cx + radius * (x * cos - y * sin), cy + radius * (x * sin + y * cos)) for x, y in points
    ]


_SQUARE = [(-0.75, -0.75), (0.75, -0.75), (0.75, 0.75), (-0.75, 0.75)]
_TRIANGLE = [(0.0, -1.0), (0.866, 0.5), (-0.866, 0.5)]
_CROSS = [
    (-0.3, -1), (0.3, -1), (0.3, -0.3), (1, -0.3), (1, 0.3), (0.3, 0.3),
    (0.3, 1), (-0.3, 1), (-0.3, 0.3), (-1, 0.3), (-1, -0.3), (-0.3, -0.3),
]  # fmt: skip


def draw_sample(label: str, rng: random.Random, min_size: int, max_size: int) -> Image.Image:
    """One RGB image of `label`'s shape; all randomness comes from `rng`."""
    width, height = rng.randint(min_size, max_size), rng.randint(min_size, max_size)
    background, colour = _contrasting_colours(rng)
    noise = np.random.default_rng(rng.getrandbits(32)).normal(0, 10, (height, width, 3))
    pixels = np.clip(np.asarray(background, dtype=np.float32) + noise, 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(image)
    side = min(width, height)
    radius = rng.uniform(0.28, 0.45) * side
    cx = rng.uniform(radius, width - radius)
    cy = rng.uniform(radius, height - radius)
    angle = rng.uniform(0, 2 * math.pi)
    if label == "circle":
        draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], fill=colour)
    elif label == "square":
        draw.polygon(_polygon(cx, cy, radius, angle, _SQUARE), fill=colour)
    elif label == "triangle":
        draw.polygon(_polygon(cx, cy, radius, angle, _TRIANGLE), fill=colour)
    elif label == "cross":
        draw.polygon(_polygon(cx, cy, radius, angle, _CROSS), fill=colour)
    else:
        raise ValueError(f"unknown class {label!r}; known: {CLASSES}")
    return image


def generate(
    out_dir: str,
    images_per_class: int,
    *,
    seed: int = 0,
    min_size: int = 48,
    max_size: int = 128,
    jpeg_quality: int = 90,
) -> list[str]:
    """Write the dataset under `out_dir` and return the written paths (sorted)."""
    paths = []
    for label in CLASSES:
        os.makedirs(os.path.join(out_dir, label), exist_ok=True)
        # One stream per class: adding a class or images never changes the others.
        rng = random.Random(f"{seed}:{label}")
        for index in range(images_per_class):
            image = draw_sample(label, rng, min_size, max_size)
            is_png = index % PNG_EVERY == PNG_EVERY - 1
            name = f"{label}_{index:05d}.{'png' if is_png else 'jpg'}"
            buffer = io.BytesIO()
            if is_png:
                image.save(buffer, format="PNG")
            else:
                image.save(buffer, format="JPEG", quality=jpeg_quality)
            path = os.path.join(out_dir, label, name)
            with open(path, "wb") as handle:
                handle.write(buffer.getvalue())
            paths.append(path)
    return sorted(paths)


def write_corrupt_files(out_dir: str, *, seed: int = 0) -> dict[str, str]:
    """Add one file of each kind the sharding job must dead-letter.

    Returns {path: expected rejection reason}. For demos and tests."""
    rng = random.Random(f"{seed}:corrupt")
    good = io.BytesIO()
    draw_sample("circle", rng, 64, 64).save(good, format="JPEG")
    label_dir = os.path.join(out_dir, CLASSES[0])
    os.makedirs(label_dir, exist_ok=True)
    cases = {
        "corrupt_empty.jpg": (b"", "empty_file"),
        "corrupt_text.jpg": (b"this is not an image\n", "not_an_image"),
        "corrupt_truncated.jpg": (good.getvalue()[: len(good.getvalue()) // 3], "truncated"),
        "corrupt_random.png": (rng.randbytes(2048), "not_an_image"),
    }
    expected = {}
    for name, (data, reason) in cases.items():
        path = os.path.join(label_dir, name)
        with open(path, "wb") as handle:
            handle.write(data)
        expected[path] = reason
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m beam_jobs.sample_data",
        description="Write the built-in sample image dataset (JPEG and PNG, <label>/<file>).",
    )
    parser.add_argument("out", help="Folder to write into (created if missing).")
    parser.add_argument(
        "--images-per-class",
        type=int,
        default=150,
        metavar="N",
        help="Images per class (default 150; 4 classes).",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="Random seed (default 0).")
    parser.add_argument(
        "--min-size", type=int, default=48, metavar="PX", help="Smallest side in px (default 48)."
    )
    parser.add_argument(
        "--max-size", type=int, default=128, metavar="PX", help="Largest side in px (default 128)."
    )
    parser.add_argument(
        "--with-corrupt",
        action="store_true",
        help="Also write a few corrupt files that the sharding job must reject.",
    )
    args = parser.parse_args(argv)
    if args.images_per_class < 1:
        parser.error("--images-per-class must be >= 1")
    if not 8 <= args.min_size <= args.max_size:
        parser.error("need 8 <= --min-size <= --max-size")
    paths = generate(
        args.out,
        args.images_per_class,
        seed=args.seed,
        min_size=args.min_size,
        max_size=args.max_size,
    )
    corrupt = write_corrupt_files(args.out, seed=args.seed) if args.with_corrupt else {}
    print(
        f"wrote {len(paths)} images in {len(CLASSES)} classes"
        f"{f' and {len(corrupt)} corrupt files' if corrupt else ''} to {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
