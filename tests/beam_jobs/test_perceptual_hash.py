"""The perceptual hash and the near-copy search (issue #27 point 3): edited copies of one
image are within the default distance; unrelated images are not; the banded search finds
exactly the pairs a comparison of all pairs finds."""

import io
import itertools
import random

import matplotlib
import numpy as np
import pytest
from PIL import Image, ImageEnhance

from beam_jobs import perceptual_hash as ph
from beam_jobs import sample_data

# A real photograph every install has (matplotlib is a dependency: the run's plots).
PHOTO = Image.open(f"{matplotlib.get_data_path()}/sample_data/grace_hopper.jpg").convert("RGB")


def _tiles(image: Image.Image, n: int) -> list[Image.Image]:
    """n x n distinct (non-overlapping) pieces of a photo: unrelated real-photo content."""
    w, h = image.size
    return [
        image.crop((c * w // n, r * h // n, (c + 1) * w // n, (r + 1) * h // n))
        for r in range(n)
        for c in range(n)
    ]


def edited_copies(image: Image.Image) -> dict[str, Image.Image]:
    """What a copy of an image that lands in a folder again usually is."""
    w, h = image.size
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=60)
    jitter = ImageEnhance.Brightness(image).enhance(1.2)
    jitter = ImageEnhance.Color(ImageEnhance.Contrast(jitter).enhance(0.85)).enhance(1.3)
    dx, dy = round(w * 0.02), round(h * 0.02)
    return {
        "resized": image.resize((w // 4, h // 4), Image.Resampling.BILINEAR),
        "jpeg_q60": Image.open(io.BytesIO(buffer.getvalue())),
        "cropped_2pct": image.crop((dx, dy, w - dx, h - dy)),
        "colour_jittered": jitter,
    }


@pytest.mark.parametrize("source", ["photo", "photo_tile", "sample_shape"])
def test_edited_copies_are_within_the_default_distance(source):
    image = {
        "photo": PHOTO,
        "photo_tile": _tiles(PHOTO, 2)[0],
        "sample_shape": sample_data.draw_sample("triangle", random.Random(3), 224, 320),
    }[source]
    original = ph.phash(image)
    distances = {
        kind: ph.distance(original, ph.phash(copy)) for kind, copy in edited_copies(image).items()
    }
    assert max(distances.values()) <= ph.DEFAULT_MAX_DISTANCE, distances


def test_unrelated_photo_content_is_far_apart():
    """64 distinct pieces of a photo: no pair within the default distance (measured: the
    closest pair is 18 bits apart)."""
    hashes = [ph.phash(tile) for tile in _tiles(PHOTO, 8)]
    closest = min(ph.distance(a, b) for a, b in itertools.combinations(hashes, 2))
    assert closest > ph.DEFAULT_MAX_DISTANCE


def test_sample_shapes_of_different_classes_are_rarely_near():
    """The synthetic sample set is the hash's worst case (flat shapes look alike at 32x32
    grey): measured 13 % of images with a neighbour within 6, all but a few pairs of the
    same class. Different classes must stay apart nearly always."""
    hashes = [
        (label, ph.phash(sample_data.draw_sample(label, random.Random(i), 48, 128)))
        for i in range(60)
        for label in sample_data.CLASSES
    ]
    pairs = list(itertools.combinations(hashes, 2))
    near = [(a, b) for a, b in pairs if ph.distance(a[1], b[1]) <= ph.DEFAULT_MAX_DISTANCE]
    across = [(a, b) for a, b in near if a[0] != b[0]]
    assert len(near) / len(pairs) < 0.01
    assert len(across) / len(pairs) < 0.001


def test_the_hash_is_64_bits_and_round_trips_through_int64():
    value = ph.phash(PHOTO)
    assert 0 <= value < 1 << 64
    assert ph.from_int64(ph.to_int64(value)) == value
    assert -(1 << 63) <= ph.to_int64(value) < 1 << 63


@pytest.mark.parametrize("max_distance", [0, 3, 6, 10])
def test_banded_search_finds_exactly_the_close_pairs(max_distance):
    rng = random.Random(max_distance)
    base = [rng.getrandbits(64) for _ in range(40)]
    # Copies of some hashes with a few bits flipped, at and around the distance.
    hashes = list(base)
    for value in base[:20]:
        flips = rng.sample(range(64), rng.randint(0, max_distance + 2))
        hashes.append(value ^ sum(1 << bit for bit in flips))
    expected = {
        (a, b)
        for a, b in itertools.combinations(sorted(set(hashes)), 2)
        if ph.distance(a, b) <= max_distance
    }
    buckets: dict = {}
    for value in set(hashes):
        for band in ph.bands(value, max_distance):
            buckets.setdefault(band, set()).add(value)
    found = []
    for (band_index, _), members in buckets.items():
        members = sorted(members)
        i, j = ph.close_pair_indices(np.array(members, dtype=np.uint64), max_distance, band_index)
        found += [(members[a], members[b]) for a, b in zip(i.tolist(), j.tolist(), strict=True)]
    assert sorted(found) == sorted(expected)  # each close pair once: from its first band


def test_bands_cover_every_bit_once():
    for max_distance in range(ph.MAX_DISTANCE_LIMIT + 1):
        ones = ph.bands((1 << 64) - 1, max_distance)
        assert len(ones) == max_distance + 1
        assert sum(value.bit_length() for _, value in ones) == 64


def test_components_label_each_node_with_its_components_smallest():
    edges = np.array([(1, 0), (2, 1), (7, 8), (0, 2), (5, 5)]).T
    assert ph.components(10, edges[0], edges[1]).tolist() == [0, 0, 0, 3, 4, 5, 6, 7, 7, 9]
    # A chain given from its far end (the worst order for spreading the smallest label),
    # and a random graph, against a plain union-find.
    rng = random.Random(5)
    chain = np.arange(1999, 0, -1)
    assert set(ph.components(2000, chain, chain - 1).tolist()) == {0}
    i, j = (np.array([rng.randrange(3000) for _ in range(2500)]) for _ in range(2))
    parent = list(range(3000))

    def root(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in zip(i.tolist(), j.tolist(), strict=True):
        parent[max(root(a), root(b))] = min(root(a), root(b))
    assert ph.components(3000, i, j).tolist() == [root(x) for x in range(3000)]


def test_band_edges_join_what_all_pairs_join():
    """Over all bands, the edges (equal hashes chained, close distinct hashes paired once)
    give the components that comparing every pair gives."""
    rng, max_distance = random.Random(11), 4
    base = [rng.getrandbits(64) for _ in range(300)]
    hashes = base + [v ^ (1 << rng.randrange(64)) for v in base[:60]] + base[:30]
    values = np.array(hashes, dtype=np.uint64)
    i, j = (
        np.concatenate(parts)
        for parts in zip(
            *(ph.band_edges(values, band, max_distance) for band in range(max_distance + 1)),
            strict=True,
        )
    )
    all_pairs = [
        (a, b)
        for a, b in itertools.combinations(range(len(hashes)), 2)
        if ph.distance(hashes[a], hashes[b]) <= max_distance
    ]
    expected = ph.components(len(hashes), *np.array(all_pairs).T)
    assert ph.components(len(hashes), i, j).tolist() == expected.tolist()
    assert len(i) < len(all_pairs) + len(hashes)  # chains and first bands: no pair twice
