"""A 64-bit perceptual hash per image, and near-duplicate search without comparing all pairs.

The hash is pHash (the DCT hash of `imagehash.phash`, its usual reference): the image in
grey, area-averaged to 32x32, its 2-D DCT-II, the 8x8 lowest frequencies, one bit per
coefficient above their median. Resizing, re-encoding, small crops and colour jitter move
few bits; unrelated images differ in about half. It is written here over Pillow and NumPy
(what the workers already have) rather than taken from `imagehash`, which would add SciPy
and PyWavelets to every Beam worker for twenty lines.

Search: two hashes within Hamming distance `d` agree exactly on at least one of `d + 1`
disjoint bands of their bits (pigeonhole), so hashes are grouped by (band, value) and only
hashes sharing a bucket are compared: all pairs within `d` are found, and a bucket holds
about n / 2**(64 / (d + 1)) hashes rather than n.
"""

from __future__ import annotations

from functools import cache

# NumPy and Pillow are imported where used: beam_jobs.config (and through it the DAG's
# Params, at parse time) reads the constants below.

HASH_SIZE = 8  # 8x8 low frequencies: 64 bits
_SIDE = 32  # the grey image the DCT runs over (imagehash's highfreq_factor 4)
# Distances at or below this are one image. Measured (tests/beam_jobs/test_perceptual_hash.py
# holds the cases): copies resized to a quarter 0-4, re-encoded at JPEG quality 60 0-2,
# colour-jittered 0-2, cropped by 2 % a side 0-8 (a photo: 4), by 5 % up to 16 (not found);
# distinct photo tiles 18 and more apart. The synthetic sample shapes, flat colour on noise,
# look alike at 32x32 grey: 13 % of them have another within 6 (docs/stages.md).
DEFAULT_MAX_DISTANCE = 6
MAX_DISTANCE_LIMIT = 15  # 16 bands of 4 bits: past this every bucket is most of the data
# A group of copies is a few versions of one image. Past this many members the images are
# alike, not copies (flat synthetic shapes, documents, product shots on white chain into
# one component of thousands at 6 bits): such a group is reported as look-alikes, not
# listed image by image, not kept in one split, and not counted as leaks.
MAX_GROUP_SIZE = 64


@cache
def _dct_matrix(n: int):
    """Unnormalised DCT-II as a matrix (scipy.fftpack.dct's scale: 2 cos(...))."""
    import numpy as np

    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    return 2.0 * np.cos(np.pi * k * (2 * i + 1) / (2 * n))


def phash(image) -> int:
    """A PIL image's 64-bit pHash as an unsigned int (bit 63: the first coefficient).

    Grey, then an area average (box filter) down to 32x32: as good a low-pass before a DCT
    that keeps 8 of 32 frequencies as Lanczos, at half its cost on the job's hot path.
    Pillow's faster integer `reduce` first (reducing_gap) was measured and not taken: its
    pixel grid moves with a crop, and 2 %-cropped copies drifted up to 12 bits. Only the DCT
    rows that reach the 8x8 corner are computed."""
    import numpy as np
    from PIL import Image

    low_rows = _dct_matrix(_SIDE)[:HASH_SIZE]
    grey = image if image.mode == "L" else image.convert("L")
    small = grey.resize((_SIDE, _SIDE), Image.Resampling.BOX).tobytes()
    low = (
        low_rows @ np.frombuffer(small, dtype=np.uint8).reshape(_SIDE, _SIDE) @ low_rows.T
    ).ravel()
    half = HASH_SIZE * HASH_SIZE // 2
    middle = np.partition(low, (half - 1, half))[half - 1 : half + 1].mean()  # np.median, faster
    return int.from_bytes(np.packbits(low > middle).tobytes(), "big")


def to_int64(value: int) -> int:
    """An unsigned 64-bit hash as the signed int64 a TFRecord feature holds."""
    return value - (1 << 64) if value >= 1 << 63 else value


def from_int64(value: int) -> int:
    return value & ((1 << 64) - 1)


def distance(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def bands(value: int, max_distance: int) -> list[tuple[int, int]]:
    """(band index, band value) of `max_distance + 1` disjoint bands covering the bits."""
    count = max_distance + 1
    edges = [round(i * 64 / count) for i in range(count + 1)]
    return [
        (i, (value >> (64 - edges[i + 1])) & ((1 << (edges[i + 1] - edges[i])) - 1))
        for i in range(count)
    ]


def band_values(values, max_distance: int, index: int):
    """Band `index` of every hash in a uint64 array (what `bands` gives for one int)."""
    import numpy as np

    count = max_distance + 1
    low, high = round(index * 64 / count), round((index + 1) * 64 / count)
    return (values >> np.uint64(64 - high)) & np.uint64((1 << (high - low)) - 1)


def close_pair_indices(values, max_distance: int, band_index: int, earlier=None):
    """Index pairs (i < j) of `values` (a uint64 array: one bucket) within `max_distance`,
    as two arrays, vectorised. Only pairs that agree on no band before `band_index` (the
    band the bucket shares): every close pair is then found in exactly one bucket, its
    first. `earlier`: the values' bands before `band_index`, when the caller has them."""
    import numpy as np

    if earlier is None:
        earlier = [band_values(values, max_distance, k) for k in range(band_index)]
    found_i, found_j = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    n, block = len(values), 256  # rows a step: a 256 x n matrix, not n x n
    columns = np.arange(n)
    for start in range(0, n - 1, block):
        rows = slice(start, min(start + block, n - 1))
        near = np.bitwise_count(values[rows, None] ^ values[None, :]) <= max_distance
        near &= columns[None, :] > columns[rows, None]  # each pair once, i < j
        for band in earlier:
            near &= band[rows, None] != band[None, :]
        i, j = np.nonzero(near)
        found_i.append(i + start)
        found_j.append(j)
    return np.concatenate(found_i), np.concatenate(found_j)


def band_edges(values, band_index: int, max_distance: int):
    """One band's edges over all `values` (uint64), as index arrays (i, j): in band 0,
    equal hashes chained one to the next (they share every band: n - 1 edges, not n**2 / 2),
    and in every band, one representative of each hash paired with those of the close
    hashes whose first shared band this is. Buckets are the runs of one band value in a
    sort by (band value, hash); only buckets of two or more distinct hashes are compared."""
    import numpy as np

    band = band_values(values, max_distance, band_index)
    order = np.lexsort((values, band))
    ordered, ordered_band = values[order], band[order]
    found_i, found_j = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    repeated = ordered[1:] == ordered[:-1]  # equal hashes are neighbours in this order
    if band_index == 0:
        same = np.flatnonzero(repeated)
        found_i.append(order[same])
        found_j.append(order[same + 1])
    distinct = np.flatnonzero(np.r_[True, ~repeated])  # each hash's first position
    earlier = [band_values(ordered, max_distance, k) for k in range(band_index)]
    bucket_of = ordered_band[distinct]
    starts = np.flatnonzero(np.r_[True, bucket_of[1:] != bucket_of[:-1], True])
    for begin, end in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        if end - begin < 2:
            continue
        positions = distinct[begin:end]
        i, j = close_pair_indices(
            ordered[positions], max_distance, band_index, [e[positions] for e in earlier]
        )
        found_i.append(order[positions[i]])
        found_j.append(order[positions[j]])
    return np.concatenate(found_i), np.concatenate(found_j)


def components(count: int, i, j):
    """Connected components of `count` nodes joined by edges (i[k], j[k]): each node's label
    is the smallest node of its component. Vectorised (minimum labels hooked across edges,
    then pointer jumping), so a few hundred thousand edges take milliseconds, not a Python
    union-find's seconds."""
    import numpy as np

    labels = np.arange(count)
    while True:
        li, lj = labels[i], labels[j]
        if np.array_equal(li, lj):
            return labels
        low = np.minimum(li, lj)
        for nodes in (li, lj, i, j):  # hook the roots, then the nodes themselves
            np.minimum.at(labels, nodes, low)
        while not np.array_equal(jumped := labels[labels], labels):
            labels = jumped
