"""Dataset statistics and near-copies, measured by the sharding job as it reads each image
(issue #27 points 1 and 3): merged by a combiner, typed by shardspec.statistics, and
near-copies across splits found and reported without comparing all pairs."""

import io
import json
import logging
import random

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image

from beam_jobs import perceptual_hash as ph
from beam_jobs.copies import FindNearCopies, StageHashLists
from beam_jobs.plan import WorkItem
from beam_jobs.transforms import (
    HASHES,
    STATS,
    GroupIntoUnits,
    MergeStatisticsFn,
    ReadImages,
)
from shardspec import statistics as st
from shardspec.example import IMAGE_ENCODED, IMAGE_ID, IMAGE_PHASH
from tests.beam_jobs.test_perceptual_hash import PHOTO, _tiles, edited_copies
from tests.jobs import shard_job
from training import features


def _item(path, key, label="cat", split="train", chunk=0):
    return WorkItem(
        uri=str(path), key=key, label=label, label_id=0, split=split, shard=0, chunk=chunk
    )


def test_statistics_partials_merge_into_the_whole_jobs_histograms(tmp_path):
    sizes = [(20, 10), (300, 300), (40, 2000), (5000, 100)]
    items = []
    for i, size in enumerate(sizes):
        path = tmp_path / f"{i}.png"
        Image.new("RGB", size, (i, 2, 3)).save(path)
        items.append(_item(path, f"cat/{i}.png", chunk=i % 2))  # two chunks: two partials
    with TestPipeline() as p:
        results = p | beam.Create(items) | GroupIntoUnits() | ReadImages(str(tmp_path), 0, 10**8)
        merged = results[STATS] | beam.CombineGlobally(MergeStatisticsFn())

        def check(rows):
            (row,) = rows
            stats = st.ImageStatistics.from_json(row)
            assert stats.num_images == 4 and stats.source_formats == {"png": 4}
            widths = [st.bucket(st.SIDE_EDGES, w) for w, _ in sizes]
            assert stats.histograms["width"] == [widths.count(i) for i in range(9)]
            assert sum(stats.histograms["aspect"]) == 4
            assert stats.histograms["aspect"][0] == 1  # 40x2000
            assert stats.histograms["aspect"][-1] == 2  # 20x10 (2.0: edges start buckets), 5000x100

        assert_that(merged, check)


def test_near_copies_are_grouped_and_unrelated_images_are_not(tmp_path):
    images = {"photo/original.png": PHOTO}
    for kind, copy in edited_copies(PHOTO).items():
        images[f"copies/{kind}.png"] = copy
    for i, tile in enumerate(_tiles(PHOTO, 4)):
        images[f"tiles/{i:02d}.png"] = tile
    items = []
    for key, image in images.items():
        path = tmp_path / key.replace("/", "_")
        image.save(path)
        items.append(_item(path, key, split="test" if key.startswith("copies") else "train"))
    with TestPipeline() as p:
        results = p | beam.Create(items) | GroupIntoUnits() | ReadImages(str(tmp_path), 0, 10**8)
        groups = results[HASHES] | FindNearCopies(ph.DEFAULT_MAX_DISTANCE)
        keys = groups | beam.Map(lambda g: (g["kind"], [i["key"] for i in g["images"]]))
        expected = sorted(k for k in images if not k.startswith("tiles"))
        assert_that(keys, equal_to([("near", expected)]))


def test_a_bucket_of_identical_hashes_is_chained_not_paired(tmp_path):
    """Two thousand blank images share one hash: one component from n-1 edges, reported
    as look-alikes (a count and the first keys), not as two thousand copies of each other.
    Each list sends its first few keys of such a group, not its members: the first keys
    of the whole group, spread over three lists here, are still the ones named."""
    sha = iter(range(10**6))
    hashes = [(7, (f"k{i:05d}", "a", "train", f"{next(sha):064x}")) for i in range(2000)]
    lists = [hashes[n::3] for n in range(3)]
    with TestPipeline() as p:
        groups = p | beam.Create(lists) | StageHashLists(str(tmp_path)) | FindNearCopies(6)
        rows = groups | beam.Map(lambda g: (g["kind"], g["num_images"], g["examples"]))
        assert_that(rows, equal_to([("alike", 2000, [f"k{i:05d}" for i in range(10)])]))


def test_groups_meet_their_holders_by_name_not_through_a_side_input():
    """A side input of every image's holder is held whole by the worker that reads it
    (1.2 GB at 10 million images): the holders travel keyed by their list instead."""
    from apache_beam.pipeline import PipelineVisitor

    p = beam.Pipeline()
    copies = [(7, ("k0", "a", "train", "0" * 64)), (7, ("k1", "a", "test", "1" * 64))]
    _ = p | beam.Create([copies]) | StageHashLists("unused") | FindNearCopies(6)
    side_inputs = []

    class Collect(PipelineVisitor):
        def visit_transform(self, node):
            side_inputs.extend(node.side_inputs)

    p.visit(Collect())
    assert side_inputs == []


def test_small_groups_are_copies_and_large_ones_look_alikes(tmp_path):
    close = [(0b1 << i, (f"c{i:03d}", "a", "train", f"{i:064x}")) for i in range(3)]  # 2 bits apart
    far = 0xFFFF_0000_FFFF_0000
    alike = [
        (far ^ (1 << (i % 64)), (f"z{i:03d}", "b", "test", f"{1000 + i:064x}"))
        for i in range(ph.MAX_GROUP_SIZE + 1)
    ]
    with TestPipeline() as p:
        signed = [(ph.to_int64(value), holder) for value, holder in close + alike]
        groups = p | beam.Create([signed]) | StageHashLists(str(tmp_path)) | FindNearCopies(2)
        rows = groups | beam.Map(lambda g: (g["kind"], len(g["images"]) or g["num_images"]))
        assert_that(rows, equal_to([("near", 3), ("alike", ph.MAX_GROUP_SIZE + 1)]))


@pytest.fixture(scope="module")
def leaky_manifest(tmp_path_factory):
    """Photo tiles of two labels in train; edited copies of tile 0 in validation and test."""
    root = tmp_path_factory.mktemp("leaky")
    rows = []
    for i, tile in enumerate(_tiles(PHOTO, 4)):
        path = root / f"tile{i:02d}.jpg"
        tile.save(path, quality=95)
        rows.append({"uri": str(path), "label": "even" if i % 2 == 0 else "odd", "split": "train"})
    for n, (kind, copy) in enumerate(edited_copies(_tiles(PHOTO, 4)[0]).items()):
        path = root / f"copy_{kind}.png"
        copy.save(path)
        rows.append({"uri": str(path), "label": "even", "split": ["validation", "test"][n % 2]})
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return manifest, rows


def test_the_job_records_statistics_hashes_and_leaks(leaky_manifest, tmp_path, caplog):
    manifest, rows = leaky_manifest
    output = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        assert shard_job(str(manifest), str(output)) == 0
    metadata = json.loads((output / "metadata.json").read_text())
    stats = st.read_statistics(metadata)
    assert stats.images.num_images == metadata["num_records"] == len(rows)
    assert stats.per_label == {"even": 12, "odd": 8}
    assert stats.per_split == {"train": 16, "validation": 2, "test": 2}
    assert stats.images.source_formats == {"jpeg": 16, "png": 4}
    assert all(sum(counts) == len(rows) for counts in stats.images.histograms.values())
    assert stats.error_share == 0 and stats.exact_duplicate_groups == 0
    assert stats.near_duplicate_groups == stats.near_duplicate_groups_across_splits == 1
    assert stats.held_out_with_near_copy_in_train == 4
    near = [
        json.loads(line)
        for path in (output / "copies").glob("near-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert [len(g["images"]) for g in near] == [5]
    assert "4 validation/test images have a near-copy in train" in caplog.text
    # Each record carries its stored pixels' hash.
    checked = 0
    for path in output.glob("*.tfrecord"):
        for raw in tf.data.TFRecordDataset(str(path)):
            parsed = features.parse_example(raw)
            stored = Image.open(io.BytesIO(parsed[IMAGE_ENCODED].numpy()))
            assert ph.from_int64(int(parsed[IMAGE_PHASH].numpy())) == ph.phash(stored)
            checked += 1
    assert checked == len(rows)


def test_statistics_of_another_version_are_refused_in_one_line():
    with pytest.raises(st.StatisticsError, match="version 99"):
        st.read_statistics({"statistics": {"version": 99}})
    assert st.read_statistics({}) is None  # written before statistics were measured


def _splits_of(output) -> dict[str, str]:
    splits = {}
    for path in output.glob("*.tfrecord"):
        for raw in tf.data.TFRecordDataset(str(path)):
            key = features.parse_example(raw)[IMAGE_ID].numpy().decode()
            splits[key] = path.name.split("-")[0]
    return splits


@pytest.fixture(scope="module")
def folder_with_copies(tmp_path_factory):
    """Photo tiles under two labels, each with its edited copies beside it: with splits
    by path hash, some copies land in another split than their original."""
    root = tmp_path_factory.mktemp("copies") / "in"
    for i, tile in enumerate(_tiles(PHOTO, 4)):
        folder = root / ("even" if i % 2 == 0 else "odd")
        folder.mkdir(parents=True, exist_ok=True)
        tile.save(folder / f"tile{i:02d}.png")
        for kind, copy in edited_copies(tile).items():
            copy.save(folder / f"tile{i:02d}_{kind}.png")
    return root


def test_leak_free_splits_keep_each_group_in_one_split(folder_with_copies, tmp_path):
    leaky, tight = tmp_path / "leaky", tmp_path / "tight"
    assert shard_job(str(folder_with_copies), str(leaky)) == 0
    assert shard_job(str(folder_with_copies), str(tight), "--leak-free-splits") == 0
    before = st.read_statistics(json.loads((leaky / "metadata.json").read_text()))
    after = st.read_statistics(json.loads((tight / "metadata.json").read_text()))
    assert before.held_out_with_near_copy_in_train > 0  # the case exists without the flag
    assert after.held_out_with_near_copy_in_train == 0
    assert after.near_duplicate_groups_across_splits == 0
    assert after.near_duplicate_groups == before.near_duplicate_groups == 16
    splits = _splits_of(tight)
    for i in range(16):
        group = {split for key, split in splits.items() if f"tile{i:02d}" in key}
        assert len(group) == 1, (i, group)
    # The same input gives the same shards.
    again = tmp_path / "again"
    assert shard_job(str(folder_with_copies), str(again), "--leak-free-splits") == 0
    digests = [
        [
            s["sha256"]
            for split in json.loads((o / "metadata.json").read_text())["splits"].values()
            for s in split["shards"]
        ]
        for o in (tight, again)
    ]
    assert digests[0] == digests[1]


def test_adding_an_unrelated_image_moves_no_other(folder_with_copies, tmp_path):
    import shutil

    from beam_jobs import sample_data

    grown = tmp_path / "in"
    shutil.copytree(folder_with_copies, grown)
    sample_data.draw_sample("circle", random.Random(1), 64, 64).save(grown / "odd" / "new.png")
    first, second = tmp_path / "first", tmp_path / "second"
    assert shard_job(str(folder_with_copies), str(first), "--leak-free-splits") == 0
    assert shard_job(str(grown), str(second), "--leak-free-splits") == 0
    before, after = _splits_of(first), _splits_of(second)
    assert set(after) - set(before) == {"odd/new.png"}
    assert {key: after[key] for key in before} == before
