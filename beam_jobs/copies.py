"""Finding the images stored more than once (FindCopies) and the look-alikes (FindNearCopies).

Both read hash lists: one element per chunk of images, `(holders file, pHashes, digests)`,
where the pHashes are int64 bytes, the digests each image's 32-byte sha256, and who holds
each image (key, label, split, sha256 hex) is written to the holders file in the staging
folder (`stage_hash_list`), where it is read back only for the images found to be copies.
On the local runner everything crossing a stage is buffered in the driver's memory: the
holders, 120 bytes an image, made that buffer grow with the data set (and they crossed
three stages), while 40 bytes an image of numbers is all the searches compare.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict

import apache_beam as beam
import numpy as np

from beam_jobs import fs, perceptual_hash
from beam_jobs.output import write_bytes

# Inside the staging folder; names starting with "_" are never published.
HASH_LISTS_DIR = "_hashes"
DIGEST_BYTES = 32
# Keys a row of look-alikes names (the first, in key order).
EXAMPLES = 10


def stage_hash_list(directory: str, name: str, hashes: list) -> tuple[str, bytes, bytes]:
    """A list of (pHash as int64, (key, label, split, sha256 hex)) -> its hash list element,
    the holders written to `{directory}/_hashes/{name}.json` (rewritten whole by a retry:
    the same images give the same bytes)."""
    path = fs.join(directory, HASH_LISTS_DIR, f"{name}.json")
    holders = [list(holder) for _, holder in hashes]
    write_bytes(path, json.dumps(holders).encode())  # ASCII: a non-UTF-8 key escaped
    values = np.array([value for value, _ in hashes], dtype=np.int64).tobytes()
    digests = b"".join(bytes.fromhex(holder[3]) for holder in holders)
    return path, values, digests


def read_holders(path: str) -> list[tuple]:
    with fs.open_read(path) as handle:
        return [tuple(holder) for holder in json.loads(handle.read())]


class StageHashLists(beam.PTransform):
    """Lists of (pHash as int64, (key, label, split, sha256 hex)) -> hash lists, each list's
    holders in a file of `directory` named by a digest of its keys (what a list that was
    not read by ReadImages, which stages its own, goes through)."""

    def __init__(self, directory: str):
        super().__init__()
        self.directory = directory

    def expand(self, lists):
        directory = self.directory

        def stage(hashes):
            if hashes:
                keys = "\0".join(holder[0] for _, holder in hashes)
                name = hashlib.sha256(keys.encode("utf-8", "surrogateescape")).hexdigest()[:24]
                yield stage_hash_list(directory, f"list-{name}", hashes)

        return lists | "Stage" >> beam.FlatMap(stage)


def _locate(lengths: list[int], indices):
    """Indices into the concatenation of lists of `lengths` -> (which list, position in
    it), as two arrays."""
    ends = np.cumsum(lengths)
    which = np.searchsorted(ends, indices, side="right")
    return which, indices - (ends - lengths)[which]


def _holders_of(element):
    """(holders file, [(group, position), ...]) -> (group, holder) for each: the file read
    once, where the group's members are wanted."""
    path, wanted = element
    holders = read_holders(path)
    for group, at in wanted:
        yield group, holders[at]


class FindCopies(beam.PTransform):
    """Hash lists -> one row per content stored more than once: its sha256 and every
    (key, label, split) holding it, sorted.

    Copies are kept (they are the user's data) but reported: the same image under two
    labels is a labelling conflict, and in two splits it is a test image the model trained
    on, which inflates every score measured on that split. Splits are assigned by path,
    so a copy at another path lands in any split.

    Digests are grouped in 16 buckets by their first 4 bits, each list sending one array
    per bucket (a shuffle's cost is per element); a bucket's repeated digests name the
    lists and positions holding them, and only those holders are read.
    """

    def expand(self, hash_lists):
        def by_bucket(hash_list):
            path, _, digests = hash_list
            rows = np.frombuffer(digests, dtype=np.uint8).reshape(-1, DIGEST_BYTES)
            bucket = rows[:, 0] >> 4
            for b in np.unique(bucket).tolist():
                at = np.flatnonzero(bucket == b)
                yield b, (path, at.astype(np.int32).tobytes(), rows[at].tobytes())

        def repeated(element):
            _, parts = element
            parts = list(parts)
            rows = np.concatenate(
                [np.frombuffer(d, dtype=np.uint8).reshape(-1, DIGEST_BYTES) for _, _, d in parts]
            )
            _, inverse, counts = np.unique(rows, axis=0, return_inverse=True, return_counts=True)
            copied = np.flatnonzero(counts[inverse.ravel()] > 1)
            if not len(copied):
                return
            part_of, _ = _locate([len(d) // DIGEST_BYTES for _, _, d in parts], copied)
            positions = np.concatenate([np.frombuffer(p, dtype=np.int32) for _, p, _ in parts])
            wanted: dict[str, list] = defaultdict(list)
            for n, p, at in zip(
                copied.tolist(), part_of.tolist(), positions[copied].tolist(), strict=True
            ):
                wanted[parts[p][0]].append((rows[n].tobytes().hex(), at))
            yield from wanted.items()

        def row(element):
            sha256, holders = element
            return {
                "kind": "exact",
                "sha256": sha256,
                "images": [
                    {"key": key, "label": label, "split": split}
                    for key, label, split, _ in sorted(holders)
                ],
            }

        return (
            hash_lists
            | "ByBucket" >> beam.FlatMap(by_bucket)
            | "GroupByBucket" >> beam.GroupByKey()
            | "Repeated" >> beam.FlatMap(repeated)
            | "Holders" >> beam.FlatMap(_holders_of)
            | "ByContent" >> beam.GroupByKey()
            | "Rows" >> beam.Map(row)
        )


class FindNearCopies(beam.PTransform):
    """Hash lists -> one row per group of images whose pHashes are within `max_distance`
    of each other (transitively), when the group holds two or more different contents
    (groups of one content are FindCopies' rows).

    No pair of all images is compared: each hash goes to `max_distance + 1` buckets, one
    per band of its bits (perceptual_hash.bands), and only hashes sharing a bucket are
    compared. A close pair is emitted once, from the first band the two agree on; images
    with the same hash are chained in their first band's bucket, so a bucket of ten
    thousand blank images gives ten thousand edges, not fifty million. Hashes travel as
    one array per list and band (the per-element cost of a Beam shuffle would otherwise
    exceed the hashing). Each band is bucketed in one place; the edges (one per
    near-copy, few) become groups in one place, as integers; then each holders file is
    read once, for the members wanted from it, where they are wanted (not a side input of
    every holder, which the one worker joining would hold whole: 1.2 GB at 10 million
    images).
    """

    def __init__(self, max_distance: int, *, keep_exact: bool = False):
        super().__init__()
        self.max_distance = max_distance
        self.keep_exact = keep_exact  # groups of one content too (--leak-free-splits)

    def expand(self, hash_lists):
        max_distance, keep_exact = self.max_distance, self.keep_exact

        def by_band(hash_list):
            path, values, _ = hash_list
            for index in range(max_distance + 1):
                yield index, (path, values)

        def edges(element):
            band_index, lists = element
            lists = list(lists)
            values = np.concatenate([np.frombuffer(v, dtype=np.int64) for _, v in lists]).view(
                np.uint64
            )
            i, j = perceptual_hash.band_edges(values, band_index, max_distance)
            # The images on an edge as (list, position), and the edges as indices into
            # them: a dense set of look-alikes gives hundreds of thousands of edges, so
            # they travel as one bytes object a band; holders are looked up once, at the end.
            members, pairs = np.unique(np.concatenate([i, j]), return_inverse=True)
            # Only a spanning forest of the band's edges travels on (each member to the
            # least member of its component here): the same groups, at most one edge a
            # member. At 200,000 look-alike thumbnails, 2.4 million edges become 0.6.
            pairs = pairs.reshape(2, -1)
            roots = perceptual_hash.components(len(members), pairs[0], pairs[1])
            child = np.flatnonzero(roots != np.arange(len(members)))
            pairs = np.stack([child, roots[child]])
            list_of, position = _locate([len(v) // 8 for _, v in lists], members)
            # Each member as (list, position) in int32 arrays, the lists named once: at
            # 200,000 look-alike images a name per member made each band's element 7 MB,
            # and on the local runner the driver buffers every band's at once.
            used, list_index = np.unique(list_of, return_inverse=True)
            yield (
                json.dumps([lists[p][0] for p in used.tolist()]).encode(),
                np.stack([list_index, position]).astype(np.int32).tobytes(),
                pairs.astype(np.int32).tobytes(),
            )

        def components(per_band):
            # Every band's edges -> the groups, as (holders file, [(group, position), ...])
            # for each list holding a member: only integers meet in this one place.
            ids: dict[tuple[str, int], int] = {}
            members, firsts, seconds = [], [], []
            for names_blob, members_blob, pairs_blob in per_band:
                names = json.loads(names_blob)
                where = np.frombuffer(members_blob, dtype=np.int32).reshape(2, -1)
                index = np.empty(where.shape[1], dtype=np.int64)
                for n, (p, at) in enumerate(where.T.tolist()):
                    member = (names[p], at)
                    if member not in ids:
                        ids[member] = len(members)
                        members.append(member)
                    index[n] = ids[member]
                pairs = np.frombuffer(pairs_blob, dtype=np.int32).reshape(2, -1)
                firsts.append(index[pairs[0]])
                seconds.append(index[pairs[1]])
            if not members:
                return
            labels = perceptual_hash.components(
                len(members), np.concatenate(firsts), np.concatenate(seconds)
            )
            alike = (np.bincount(labels) > perceptual_hash.MAX_GROUP_SIZE)[labels].tolist()
            wanted: dict[str, list] = defaultdict(list)
            for (path, at), group, large in zip(members, labels.tolist(), alike, strict=True):
                wanted[path].append((group, at, large))
            yield from wanted.items()

        def holders_wanted(element):
            # One list's holders, read once, for the members the groups want from it: one
            # element per group and list, not per image (a shuffle's cost is per element),
            # as (members here, their holders). A group of look-alikes is reported by its
            # count and first keys: it takes this list's first few only.
            path, wanted = element
            holders = read_holders(path)
            by_group: dict[int, list] = defaultdict(list)
            for group, at, _ in wanted:
                by_group[group].append(holders[at])
            large = {group for group, _, alike in wanted if alike}
            for group, members in by_group.items():
                kept = sorted(members)[:EXAMPLES] if group in large else members
                yield group, (len(members), kept)

        def group_row(element):
            _, parts = element
            parts = list(parts)
            members = sorted(holder for _, kept in parts for holder in kept)
            keys = [key for key, *_ in members]
            count = sum(count for count, _ in parts)
            if count > perceptual_hash.MAX_GROUP_SIZE:
                yield {  # look-alikes: a count and a few names, not a group of copies
                    "kind": "alike",
                    "key": keys[0],
                    "max_distance": max_distance,
                    "num_images": count,
                    "examples": keys[:EXAMPLES],
                    "images": [],
                }
            # A group of one content (the same bytes) is FindCopies' row, not a near one.
            elif len({sha for *_, sha in members}) > 1 or keep_exact:
                yield {
                    "kind": "near",
                    "key": keys[0],
                    "max_distance": max_distance,
                    "images": [
                        {"key": key, "label": label, "split": split, "sha256": sha}
                        for key, label, split, sha in members
                    ],
                }

        return (
            hash_lists
            | "ByBand" >> beam.FlatMap(by_band)
            | "GroupByBand" >> beam.GroupByKey()
            | "ClosePairs" >> beam.FlatMap(edges)
            # Without a default: no edges, no element (rather than an empty list injected
            # through a side input).
            | "AllBands"
            >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
            | "Components" >> beam.FlatMap(components)
            | "HoldersWanted" >> beam.FlatMap(holders_wanted)
            | "ByGroup" >> beam.GroupByKey()
            | "Rows" >> beam.FlatMap(group_row)
        )
