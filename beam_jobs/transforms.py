"""The sharding job's Beam transforms: read and validate images, write shards.

Failures of one input never raise out of a DoFn: every rejected input leaves
through the `errors` tagged output with its uri and a reason (`internal_error`,
naming the step, for an exception no check foresaw), so one bad file cannot
fail a bundle (and, on a distributed runner, the whole job after retries).
Only what concerns no single input (writing fragments and shards) may raise.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import zlib
from collections import Counter

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from beam_jobs import fs, perceptual_hash
from beam_jobs.copies import stage_hash_list
from beam_jobs.images import INTERNAL_ERROR, ImageRejected, PreparedImage, prepare_image, step
from beam_jobs.output import write_bytes
from beam_jobs.plan import REJECT_DETAILS, StagedPlan, WorkItem, parse_unit
from beam_jobs.splits import hash_fraction
from shardspec.example import encode_example
from shardspec.layout import shard_name
from shardspec.statistics import ImageStatistics
from shardspec.tfrecord import frame_record
from stageconfig import text_name

DEFAULT_MAX_BYTES = 256 << 20
FRAGMENTS = "fragments"
ERRORS = "errors"
# One ImageStatistics partial per chunk (a few hundred bytes), merged by MergeStatistics.
STATS = "stats"
# A chunk's hash list (beam_jobs.copies): its stored images' pHashes and sha256 digests,
# their holders in a file beside the fragments. What FindCopies and FindNearCopies read.
HASHES = "hashes"
# Inside the staging folder; names starting with "_" are never published.
FRAGMENTS_DIR = "_fragments"
# Warning lines per worker process for inputs that failed unexpectedly; errors/ lists all.
MAX_INTERNAL_ERRORS_LOGGED = 20

log = logging.getLogger(__name__)
_internal_errors = Counter()
_internal_errors_lock = threading.Lock()


def error_record(item: WorkItem, reason: str, detail: str = "") -> dict:
    return {
        "uri": text_name(item.uri),
        "key": item.key,
        "label": item.label,
        "reason": reason,
        "detail": text_name(detail),  # messages quote the path
    }


def read_record(
    item: WorkItem, max_side: int, max_pixels: int, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[bytes, PreparedImage] | dict:
    """One planned input -> (serialised Example, the image stored) or a dead-letter dict.

    Never raises for one input: an unforeseen exception becomes `internal_error`."""
    try:
        outcome = _read_record(item, max_side, max_pixels, max_bytes)
    except ImageRejected as rejected:
        outcome = error_record(item, rejected.reason, rejected.detail)
    except Exception as err:  # a bug of ours outside every step; still one input's
        outcome = error_record(item, INTERNAL_ERROR, f"read_record: {type(err).__name__}: {err}")
    if isinstance(outcome, dict) and outcome["reason"] == INTERNAL_ERROR:
        _log_internal_error(outcome)
    return outcome


def _read_record(item: WorkItem, max_side: int, max_pixels: int, max_bytes: int):
    if item.reject:
        return error_record(item, item.reject, REJECT_DETAILS.get(item.reject, ""))
    # Checked again here, not only when listing: a manifest names files the listing never
    # saw, and a file can change in between. Only regular files are opened (a FIFO would
    # block forever), and no read is larger than max_bytes (+1, to notice a grown file).
    with step("stat"):
        entry = fs.check_readable(item.uri, max_bytes)
    if entry.problem:
        return error_record(item, entry.problem, entry.detail)
    try:
        with FileSystems.open(item.uri, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            data = fs.read_at_most(handle, max_bytes, entry.size)
    except Exception as err:
        return error_record(item, "unreadable", f"{type(err).__name__}: {err}")
    if len(data) > max_bytes:
        return error_record(item, "file_too_large", f"more than {max_bytes} bytes (--max-file-mb)")
    image = prepare_image(data, max_side=max_side, max_pixels=max_pixels)
    with step("encode_example"):
        example = encode_example(
            encoded=image.encoded,
            image_format=image.image_format,
            height=image.height,
            width=image.width,
            image_id=item.key,
            sha256=image.sha256,
            label=item.label_id,
            label_text=item.label,
            phash=image.phash,
        )
        return example, image


def _log_internal_error(record: dict) -> None:
    """One warning line per input, up to a cap per process; the driver gives the total."""
    with _internal_errors_lock:
        _internal_errors["seen"] += 1
        seen = _internal_errors["seen"]
    if seen <= MAX_INTERNAL_ERRORS_LOGGED:
        log.warning("dead-lettered %s (internal_error): %s", record["uri"], record["detail"])
    if seen == MAX_INTERNAL_ERRORS_LOGGED:
        log.warning(
            "further inputs that fail unexpectedly are not logged one by one; errors/ lists each"
        )


def fragment_path(directory: str, split: str, shard: int, chunk: int) -> str:
    return FileSystems.join(directory, FRAGMENTS_DIR, f"{split}-{shard:05d}-{chunk:05d}")


class ReadChunkFn(beam.DoFn):
    """One chunk of a shard -> a fragment file of framed records, and a report of it.

    The image bytes stay in the worker that read them: they go to the fragment
    file, and only the report (a few hundred bytes) travels on. On the local
    multi-process runner every element otherwise crosses two process boundaries
    on its way to the shard writer, which cost more CPU than validating it.
    Rejected inputs leave through the `errors` tagged output.
    """

    def __init__(
        self, directory: str, max_side: int, max_pixels: int, max_bytes: int = DEFAULT_MAX_BYTES
    ):
        self.directory = directory
        self.max_side = max_side
        self.max_pixels = max_pixels
        self.max_bytes = max_bytes
        self.images_read = Metrics.counter("imagepipe", "images_read")
        self.images_reencoded = Metrics.counter("imagepipe", "images_reencoded")
        self.images_failed = Metrics.counter("imagepipe", "images_failed")

    def process(self, element):
        (split, shard, chunk), items = element
        # Streamed to the fragment record by record: a unit can be a whole shard.
        # Rewritten whole by a retried bundle: the same items give the same bytes.
        fragment = (
            _FragmentWriter(fragment_path(self.directory, split, shard, chunk))
            if shard >= 0  # inputs rejected while planning belong to no shard
            else None
        )
        per_label, stats, hashes = Counter(), ImageStatistics(), []
        try:
            for item in sorted(items, key=lambda i: i.key):  # the shard's record order
                outcome = read_record(item, self.max_side, self.max_pixels, self.max_bytes)
                if isinstance(outcome, dict):
                    self.images_failed.inc()
                    yield beam.pvalue.TaggedOutput(ERRORS, outcome)
                    continue
                example, image = outcome
                self.images_read.inc()
                self.images_reencoded.inc(int(image.reencoded))
                fragment.write(frame_record(example))
                per_label[item.label] += 1
                stats.add(
                    width=image.source_width,
                    height=image.source_height,
                    stored_bytes=len(image.encoded),
                    source_format=image.source_format,
                    stored_format=image.image_format,
                    reencoded=image.reencoded,
                )
                holder = (item.key, item.label, split, image.sha256)
                hashes.append((perceptual_hash.to_int64(image.phash), holder))
        finally:
            if fragment:
                fragment.close()
        if fragment:
            yield {
                "split": split,
                "index": shard,
                "chunk": chunk,
                "num_records": fragment.records,
                "num_bytes": fragment.size,
                "sha256": fragment.digest.hexdigest(),
                "per_label": dict(per_label),
            }
        if stats.num_images:
            yield beam.pvalue.TaggedOutput(STATS, stats.to_json())
            # One element a chunk, not an image, and numbers only: the holders stay in a
            # file, written after the chunk's other outputs. Written before them, a run
            # interrupted on worker threads made its deleted staging folder again in 1 of 3
            # runs of tests/beam_jobs/test_interrupt.py (0 of 5 after).
            name = f"{split}-{shard:05d}-{chunk:05d}"
            yield beam.pvalue.TaggedOutput(HASHES, stage_hash_list(self.directory, name, hashes))


class _FragmentWriter:
    """Framed records -> one fragment file, with their count, size and sha256 (what a
    shard of this one fragment reports without reading it again)."""

    def __init__(self, path: str):
        self.handle = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
        self.digest, self.size, self.records = hashlib.sha256(), 0, 0

    def write(self, record: bytes) -> None:
        self.handle.write(record)
        self.digest.update(record)
        self.size += len(record)
        self.records += 1

    def close(self) -> None:
        self.handle.close()


class HashImageFn(beam.DoFn):
    """A planned input -> (pHash as int64, (key, label, split, sha256)) of what is stored;
    nothing for a rejected one (the main pass dead-letters it). --leak-free-splits' first
    pass: the same read_record as the main pass, so the hashes are the stored images'."""

    def __init__(self, max_side: int, max_pixels: int, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_side, self.max_pixels, self.max_bytes = max_side, max_pixels, max_bytes

    def process(self, item):
        if item.reject:
            return
        outcome = read_record(item, self.max_side, self.max_pixels, self.max_bytes)
        if not isinstance(outcome, dict):
            image = outcome[1]
            holder = (item.key, item.label, item.split, image.sha256)
            yield perceptual_hash.to_int64(image.phash), holder


class ReadPlanLinesFn(beam.DoFn):
    """(start, end) of a line of the plan file -> that unit of work, read where it is
    processed; one open file per bundle (on gs://, a seek is a ranged read)."""

    def __init__(self, plan_path: str):
        self.plan_path = plan_path
        self._handle = None

    def start_bundle(self):
        self._handle = None

    def process(self, span):
        start, end = span
        if self._handle is None:
            self._handle = FileSystems.open(
                self.plan_path, compression_type=CompressionTypes.UNCOMPRESSED
            )
        self._handle.seek(start)
        yield parse_unit(self._handle.read(end - start).decode("utf-8"))

    def finish_bundle(self):
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class ReadPlanUnits(beam.PTransform):
    """The staged plan (plan.write_plan) -> its units of work, ((split, shard, chunk),
    items), spread over the workers. What is spread is each line's byte range, and each
    worker reads its own lines from the file: on the local runner every element between
    stages lives in the driver, where the lines themselves (300 bytes per image) were its
    largest buffer at 200,000 images. The ranges are part of the pipeline's definition
    (about 20 bytes a unit: 3 MB for 10 million images in units of 64, under Dataflow's
    10 MB job request; a run that large on Dataflow has shards as units, far fewer)."""

    def __init__(self, staged: StagedPlan):
        super().__init__()
        self.staged = staged

    def expand(self, p):
        return (
            p
            | "LineRanges" >> beam.Create(self.staged.ranges, reshuffle=False)
            | "Spread" >> beam.Reshuffle()
            | "ReadUnits" >> beam.ParDo(ReadPlanLinesFn(self.staged.path))
        )


class GroupIntoUnits(beam.PTransform):
    """WorkItems -> units of work, ((split, shard, chunk), items): for items that do not
    come from a plan file (tests, a caller's own PCollection)."""

    def expand(self, items):
        return (
            items
            | "KeyByUnit" >> beam.Map(lambda item: (item.unit, item))
            | "GroupByUnit" >> beam.GroupByKey()
        )


class ReadImages(beam.PTransform):
    """Units of work ((split, shard, chunk), WorkItems) -> tagged outputs `fragments`
    (reports of fragment files), `errors`, `stats` (per-chunk statistics) and `hashes`
    (per chunk, a hash list: beam_jobs.copies)."""

    def __init__(
        self, directory: str, max_side: int, max_pixels: int, max_bytes: int = DEFAULT_MAX_BYTES
    ):
        super().__init__()
        self.directory = directory
        self.max_side = max_side
        self.max_pixels = max_pixels
        self.max_bytes = max_bytes

    def expand(self, units):
        return units | "ReadAndValidate" >> beam.ParDo(
            ReadChunkFn(self.directory, self.max_side, self.max_pixels, self.max_bytes)
        ).with_outputs(ERRORS, STATS, HASHES, main=FRAGMENTS)


class AssembleShardFn(beam.DoFn):
    """A shard's fragment reports -> the shard file (its fragments in chunk order), a report.

    A shard of one uncompressed fragment is that fragment, renamed: its bytes are written
    once. Several are streamed into the shard (and gzip-compressed when asked) a block at
    a time, so no shard is ever held in memory whole."""

    def __init__(self, directory: str, shard_counts: dict[str, int], compression: str):
        self.directory = directory
        self.shard_counts = dict(shard_counts)
        self.compression = compression
        self.records_written = Metrics.counter("imagepipe", "records_written")
        self.shard_bytes = Metrics.counter("imagepipe", "shard_bytes_written")

    def process(self, element):
        (split, index), fragments = element
        fragments = sorted(fragments, key=lambda f: f["chunk"])
        name = shard_name(split, index, self.shard_counts[split], self.compression)
        target = FileSystems.join(self.directory, name)
        sources = [fragment_path(self.directory, split, index, f["chunk"]) for f in fragments]
        if len(fragments) == 1 and self.compression == "none":
            _move(sources[0], target)
            num_bytes, sha256 = fragments[0]["num_bytes"], fragments[0]["sha256"]
        else:
            num_bytes, sha256 = _concatenate(sources, target, self.compression)
        num_records = sum(f["num_records"] for f in fragments)
        per_label: Counter = Counter()
        for fragment in fragments:
            per_label.update(fragment["per_label"])
        self.records_written.inc(num_records)
        self.shard_bytes.inc(num_bytes)
        yield {
            "split": split,
            "index": index,
            "file": name,
            "num_records": num_records,
            "num_bytes": num_bytes,
            "sha256": sha256,
            "per_label": dict(per_label),
        }


# Bytes read from a fragment at a time while concatenating.
COPY_BLOCK = 8 << 20


def _move(source: str, target: str) -> None:
    """Rename; a retried bundle whose first try renamed already finds only the target."""
    if not FileSystems.exists(source) and FileSystems.exists(target):
        return
    FileSystems.rename([source], [target])


def _concatenate(sources: list[str], target: str, compression: str) -> tuple[int, str]:
    """Fragments -> one file (gzip as `compress_shard` makes it, streamed) -> (size, sha256).

    The fragments are deleted once the shard holds them, not with the staging folder at
    the end: the folder never holds a cut shard twice (at 200,000 images it held the whole
    output twice until the job ended), and a fragment deleted before the kernel writes it
    back never reaches the disk. Deleted only after the shard is closed, so a retried
    bundle that finds the shard and a fragment gone knows the shard is whole."""
    if FileSystems.exists(target) and not all(FileSystems.exists(s) for s in sources):
        return _size_and_digest(target)
    digest, size = hashlib.sha256(), 0
    # wbits 31: a gzip stream with mtime 0, byte for byte what gzip.compress(mtime=0) writes.
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if compression == "gzip" else None
    with FileSystems.create(target, compression_type=CompressionTypes.UNCOMPRESSED) as handle:

        def put(data: bytes) -> None:
            nonlocal size
            if data:
                handle.write(data)
                digest.update(data)
                size += len(data)

        for source in sources:
            with FileSystems.open(source, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                while block := f.read(COPY_BLOCK):
                    put(compressor.compress(block) if compressor else block)
        if compressor:
            put(compressor.flush())
    fs.delete(sources)
    return size, digest.hexdigest()


def _size_and_digest(path: str) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        while block := f.read(COPY_BLOCK):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


class WriteShards(beam.PTransform):
    """Fragment reports -> shard files in `directory`; returns a PCollection of shard reports."""

    def __init__(self, directory: str, shard_counts: dict[str, int], compression: str):
        super().__init__()
        self.directory = directory
        self.shard_counts = shard_counts
        self.compression = compression

    def expand(self, fragments):
        return (
            fragments
            | "KeyByShard" >> beam.Map(lambda f: ((f["split"], f["index"]), f))
            | "GroupByShard" >> beam.GroupByKey()
            | "AssembleShards"
            >> beam.ParDo(AssembleShardFn(self.directory, self.shard_counts, self.compression))
        )


class MergeStatisticsFn(beam.CombineFn):
    """Per-chunk ImageStatistics partials (as JSON dicts) -> one, for the whole job."""

    def create_accumulator(self):
        return ImageStatistics()

    def add_input(self, accumulator, partial):
        return accumulator.merge(ImageStatistics.from_json(partial))

    def merge_accumulators(self, accumulators):
        merged = ImageStatistics()
        for accumulator in accumulators:
            merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator.to_json()


class WriteJsonLines(beam.PTransform):
    """Dicts -> `{prefix}-{i:05d}-of-{n:05d}.jsonl` (dead letters, shard reports).

    Written with `FileSystems.create` on literal paths rather than `WriteToText`,
    whose finalisation matches file patterns and fails on an output folder named
    with `[`, `*` or `?`. Rows go to a file by a hash of their `key_field`, sorted
    inside it, so the same rows always give the same files; all `num_files` files
    are written, empty ones included, so the set is always whole.
    """

    def __init__(self, prefix: str, key_field: str, num_files: int = 1):
        super().__init__()
        self.prefix = prefix
        self.key_field = key_field
        self.num_files = num_files

    def expand(self, rows):
        num_files, key_field, prefix = self.num_files, self.key_field, self.prefix

        def by_file(row):
            return int(hash_fraction(str(row[key_field])) * num_files), row

        def write(element):
            index, members = element
            rows = (r for r in members if r is not None)
            lines = sorted(json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows)
            path = f"{prefix}-{index:05d}-of-{num_files:05d}.jsonl"
            write_bytes(path, "".join(line + "\n" for line in lines).encode())
            return path

        every_file = rows.pipeline | "EveryFile" >> beam.Create(
            [(i, None) for i in range(num_files)]
        )
        return (
            (rows | "ByFile" >> beam.Map(by_file), every_file)
            | "WithEveryFile" >> beam.Flatten()
            | "GroupByFile" >> beam.GroupByKey()
            | "Write" >> beam.Map(write)
        )
