import hashlib
import io
import json
from pathlib import Path

import apache_beam as beam
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image

from beam_jobs.copies import FindCopies, StageHashLists, read_holders
from beam_jobs.plan import WorkItem
from beam_jobs.transforms import (
    ERRORS,
    FRAGMENTS,
    HASHES,
    GroupIntoUnits,
    ReadImages,
    WriteShards,
    fragment_path,
    read_record,
)
from shardspec.tfrecord import encode_shard
from training import features


def _jpeg(path, size=(20, 10)):
    buffer = io.BytesIO()
    Image.new("RGB", size, (1, 2, 3)).save(buffer, format="JPEG")
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def _item(path, key, **kwargs):
    return WorkItem(
        uri=str(path),
        key=key,
        label=kwargs.pop("label", "cat"),
        label_id=0,
        split="train",
        shard=1,
        **kwargs,
    )


def test_read_images_routes_good_and_bad_files(tmp_path):
    good = tmp_path / "good.jpg"
    _jpeg(good)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"nope")
    items = [
        _item(good, "cat/good.jpg"),
        _item(bad, "cat/bad.jpg"),
        _item(tmp_path / "missing.jpg", "cat/missing.jpg"),
        WorkItem(uri="x", key="x", label="", reject="no_label_dir"),
    ]
    with TestPipeline() as p:
        results = (
            p
            | beam.Create(items)
            | GroupIntoUnits()
            | ReadImages(str(tmp_path), max_side=0, max_pixels=10**6)
        )
        fragments = results[FRAGMENTS] | "Chunks" >> beam.Map(
            lambda f: (f["split"], f["index"], f["chunk"], f["num_records"])
        )
        reasons = results[ERRORS] | "Reasons" >> beam.Map(lambda e: (e["key"], e["reason"]))
        assert_that(fragments, equal_to([("train", 1, 0, 1)]), label="fragments")
        assert_that(
            reasons,
            equal_to(
                [
                    ("cat/bad.jpg", "not_an_image"),
                    ("cat/missing.jpg", "unreadable"),
                    ("x", "no_label_dir"),
                ]
            ),
            label="errors",
        )
    # The fragment holds the good image's framed record, nothing else.
    fragment = fragment_path(str(tmp_path), "train", 1, 0)
    [record] = [r.numpy() for r in tf.data.TFRecordDataset(fragment)]
    assert features.parse_example(tf.constant(record))[features.IMAGE_ID].numpy() == (
        b"cat/good.jpg"
    )


def test_copies_are_found_by_content_whatever_their_names(tmp_path):
    """The same bytes at two paths are one content; ReadImages says what each stored
    image hashes to, FindCopies keeps only contents stored more than once."""
    one, other = tmp_path / "one.jpg", tmp_path / "other.jpg"
    _jpeg(one)
    _jpeg(other, size=(10, 20))
    (tmp_path / "copy.jpg").write_bytes(one.read_bytes())
    items = [
        _item(one, "cat/one.jpg"),
        _item(other, "cat/other.jpg"),
        _item(tmp_path / "copy.jpg", "dog/copy.jpg", label="dog"),
    ]
    digest = hashlib.sha256(one.read_bytes()).hexdigest()
    with TestPipeline() as p:
        results = (
            p
            | beam.Create(items)
            | GroupIntoUnits()
            | ReadImages(str(tmp_path), max_side=0, max_pixels=10**6)
        )
        copies = results[HASHES] | FindCopies()
        assert_that(
            copies,
            equal_to(
                [
                    {
                        "kind": "exact",
                        "sha256": digest,
                        "images": [
                            {"key": "cat/one.jpg", "label": "cat", "split": "train"},
                            {"key": "dog/copy.jpg", "label": "dog", "split": "train"},
                        ],
                    }
                ]
            ),
        )


def test_hash_lists_carry_numbers_and_leave_the_holders_in_a_file(tmp_path):
    """On the local runner every element between stages is held in the driver's memory:
    a chunk's hash list carries 40 bytes an image (its pHash and sha256), and who holds
    each image (key, label, split) stays in a file that only the copies' rows read."""
    items = []
    for i in range(12):
        path = tmp_path / f"{i}.jpg"
        _jpeg(path, size=(20 + i, 10))
        items.append(_item(path, f"cat/a-rather-long-name-{i:02d}.jpg"))
    with TestPipeline() as p:
        results = p | beam.Create(items) | GroupIntoUnits() | ReadImages(str(tmp_path), 0, 10**6)

        def check(lists):
            ((path, values, digests),) = lists
            assert (len(values), len(digests)) == (8 * 12, 32 * 12)
            holders = read_holders(path)
            assert [h[0] for h in holders] == sorted(item.key for item in items)
            assert b"".join(bytes.fromhex(h[3]) for h in holders) == digests

        assert_that(results[HASHES], check)


def test_copies_are_found_across_lists_and_buckets(tmp_path):
    def holder(key, content):
        return (0, (key, "a", "train", hashlib.sha256(content).hexdigest()))

    contents = [bytes([n]) for n in range(40)]  # digests in every bucket
    lists = [
        [holder(f"one/{n:02d}", c) for n, c in enumerate(contents)],
        [holder(f"two/{n:02d}", c) for n, c in enumerate(contents[::2])],
        [holder("three/a", contents[7]), holder("three/b", contents[7])],
    ]
    with TestPipeline() as p:
        copies = p | beam.Create(lists) | StageHashLists(str(tmp_path)) | FindCopies()
        rows = copies | beam.Map(lambda row: (row["sha256"], [i["key"] for i in row["images"]]))
        expected = [
            (hashlib.sha256(c).hexdigest(), [f"one/{n:02d}", f"two/{n // 2:02d}"])
            for n, c in enumerate(contents)
            if n % 2 == 0
        ]
        expected.append((hashlib.sha256(contents[7]).hexdigest(), ["one/07", "three/a", "three/b"]))
        assert_that(rows, equal_to(expected))


def test_read_record_builds_the_shared_example(tmp_path):
    path = tmp_path / "a.jpg"
    data = _jpeg(path, size=(30, 12))
    serialized, image = read_record(_item(path, "cat/a.jpg"), 0, 10**6)
    parsed = features.parse_example(tf.constant(serialized))
    assert not image.reencoded and image.sha256 == hashlib.sha256(data).hexdigest()
    assert parsed[features.IMAGE_ENCODED].numpy() == data
    assert parsed[features.IMAGE_WIDTH].numpy() == 30
    assert parsed[features.IMAGE_HEIGHT].numpy() == 12
    assert parsed[features.IMAGE_ID].numpy() == b"cat/a.jpg"
    assert parsed[features.LABEL_TEXT].numpy() == b"cat"


def test_a_shard_is_its_chunks_in_chunk_order_sorted_by_key(tmp_path):
    # (key, shard, chunk): shard 0 in three chunks, given out of order; shard 1 in one.
    layout = [("e", 1, 0), ("d", 0, 2), ("c", 0, 1), ("b", 0, 0), ("a", 0, 0)]
    items = []
    for key, shard, chunk in layout:
        _jpeg(tmp_path / f"{key}.jpg")
        label = "dog" if key == "b" else "cat"
        item = _item(tmp_path / f"{key}.jpg", key, chunk=chunk, label=label)
        items.append(item._replace(shard=shard))
    out = tmp_path / "out"
    with TestPipeline() as p:
        results = (
            p
            | beam.Create(items)
            | GroupIntoUnits()
            | ReadImages(str(out), max_side=0, max_pixels=10**6)
        )
        reports = (
            results[FRAGMENTS]
            | WriteShards(str(out), {"train": 2}, "gzip")
            | beam.Map(
                lambda r: (r["file"], r["num_records"], json.dumps(r["per_label"], sort_keys=True))
            )
        )
        assert_that(
            reports,
            equal_to(
                [
                    ("train-00000-of-00002.tfrecord.gz", 4, '{"cat": 3, "dog": 1}'),
                    ("train-00001-of-00002.tfrecord.gz", 1, '{"cat": 1}'),
                ]
            ),
        )
    # Byte for byte what one writer of the shard's records, sorted by key, produces.
    shard_0 = sorted((i for i in items if i.shard == 0), key=lambda i: i.key)
    expected = encode_shard([read_record(i, 0, 10**6)[0] for i in shard_0], "gzip")
    assert (out / "train-00000-of-00002.tfrecord.gz").read_bytes() == expected


def _shard_of(tmp_path, layout, compression, monkeypatch=None):
    """ReadImages + WriteShards over `layout` [(key, shard, chunk)] -> (out, reports)."""
    items = []
    for key, shard, chunk in layout:
        _jpeg(tmp_path / f"{key}.jpg", size=(20 + len(items), 10))  # distinct bytes
        item = _item(tmp_path / f"{key}.jpg", key, chunk=chunk)
        items.append(item._replace(shard=shard))
    out = tmp_path / "out"
    counts = {"train": 1 + max(shard for _, shard, _ in layout)}
    with TestPipeline() as p:
        results = (
            p
            | beam.Create(items)
            | GroupIntoUnits()
            | ReadImages(str(out), max_side=0, max_pixels=10**6)
        )
        reports = results[FRAGMENTS] | WriteShards(str(out), counts, compression)
        reports | beam.Map(lambda r: (out / "report.jsonl").open("a").write(json.dumps(r) + "\n"))
    rows = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    return items, out, {row["index"]: row for row in rows}


def test_a_shard_of_one_fragment_is_that_fragment_renamed_and_reported_unread(
    tmp_path, monkeypatch
):
    # The report of a one-fragment shard comes from the fragment's writer: nothing opens
    # the fragment again (a read here would fail the test).
    from beam_jobs import transforms

    def no_reads(*args, **kwargs):
        raise AssertionError("a one-fragment shard was read back")

    monkeypatch.setattr(transforms, "_concatenate", no_reads)
    items, out, reports = _shard_of(tmp_path, [("a", 0, 0), ("b", 0, 0), ("c", 1, 0)], "none")
    for index, keys in ((0, ["a", "b"]), (1, ["c"])):
        data = (out / reports[index]["file"]).read_bytes()
        expected = encode_shard(
            [read_record(i, 0, 10**6)[0] for i in items if i.key in keys], "none"
        )
        assert data == expected
        assert reports[index]["sha256"] == hashlib.sha256(data).hexdigest()
        assert reports[index]["num_bytes"] == len(data) and reports[index]["num_records"] == len(
            keys
        )
    assert not list((out / "_fragments").iterdir())  # moved, not copied


def test_shards_of_several_fragments_stream_block_by_block_to_the_same_bytes(tmp_path, monkeypatch):
    from beam_jobs import transforms

    monkeypatch.setattr(transforms, "COPY_BLOCK", 7)  # many blocks per fragment
    layout = [("a", 0, 0), ("b", 0, 1), ("c", 0, 1), ("d", 0, 2)]
    for compression in ("none", "gzip"):
        where = tmp_path / compression
        where.mkdir()
        items, out, reports = _shard_of(where, layout, compression)
        data = (out / reports[0]["file"]).read_bytes()
        assert data == encode_shard([read_record(i, 0, 10**6)[0] for i in items], compression)
        assert reports[0]["sha256"] == hashlib.sha256(data).hexdigest()
        assert reports[0]["num_bytes"] == len(data)


def test_a_shards_fragments_are_deleted_once_it_holds_them_and_a_retry_finds_it_whole(
    tmp_path,
):
    """The staging folder never holds a cut shard twice; a retried bundle whose first try
    wrote the shard and deleted a fragment reports the same shard, and one whose first try
    died while writing (every fragment still there) writes it again."""
    from beam_jobs.transforms import _concatenate

    sources = [tmp_path / "f0", tmp_path / "f1"]
    for n, source in enumerate(sources):
        source.write_bytes(bytes([n]) * 1000)
    target = tmp_path / "shard"
    target.write_bytes(b"half a shard from a try that died")
    names = [str(source) for source in sources]
    first = _concatenate(names, str(target), "none")
    assert target.read_bytes() == b"\0" * 1000 + b"\1" * 1000
    assert first == (2000, hashlib.sha256(target.read_bytes()).hexdigest())
    assert not any(source.exists() for source in sources)
    assert _concatenate(names, str(target), "none") == first  # the retry


def test_a_retried_rename_finds_its_shard_in_place(tmp_path):
    from beam_jobs.transforms import _move

    target = tmp_path / "shard"
    target.write_bytes(b"records")
    _move(str(tmp_path / "gone-fragment"), str(target))  # the first try renamed it
    assert target.read_bytes() == b"records"


def test_the_plan_is_read_by_the_workers_from_byte_ranges(tmp_path):
    """Only each line's (start, end), as the plan's writer counted them, crosses the runner;
    each unit is read back whole from its range."""
    from beam_jobs.plan import unit_lines, write_plan
    from beam_jobs.transforms import ReadPlanUnits

    items = [
        WorkItem(uri=f"/in/{label}/{n}.jpg", key=f"{label}/{n}.jpg", label=label,
                 split="train", shard=0, chunk=n % 3)
        for label in ("cat", "dog") for n in range(7)
    ]  # fmt: skip
    lines = list(unit_lines(items))
    staged = write_plan(str(tmp_path / "_plan" / "inputs.jsonl"), items)
    data = Path(staged.path).read_bytes()
    assert [data[a:b].decode() for a, b in staged.ranges] == [f"{line}\n" for line in lines]
    with TestPipeline() as p:
        units = p | ReadPlanUnits(staged)
        assert_that(
            units | beam.MapTuple(lambda unit, members: (unit, sorted(i.key for i in members))),
            equal_to(
                [
                    (("train", 0, c), sorted(i.key for i in items if i.unit == ("train", 0, c)))
                    for c in range(3)
                ]
            ),
        )
