"""The sharding job's Beam transforms: read and validate images, write shards.

Failures never raise out of a DoFn: every rejected input leaves through the
`errors` tagged output with its uri and a reason, so one bad file cannot fail
a bundle (and, on a distributed runner, the whole job after retries).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from beam_jobs.images import ImageRejected, prepare_image
from beam_jobs.output import write_bytes
from beam_jobs.plan import WorkItem
from shardspec.example import encode_example
from shardspec.tfrecord import encode_shard, shard_name

RECORDS = "records"
ERRORS = "errors"


def error_record(item: WorkItem, reason: str, detail: str = "") -> dict:
    return {
        "uri": item.uri,
        "key": item.key,
        "label": item.label,
        "reason": reason,
        "detail": detail,
    }


class ReadImageFn(beam.DoFn):
    """WorkItem -> ((split, shard), (key, serialized Example, label)) or a dead letter."""

    def __init__(self, max_side: int, max_pixels: int):
        self.max_side = max_side
        self.max_pixels = max_pixels
        self.images_read = Metrics.counter("imagepipe", "images_read")
        self.bytes_read = Metrics.counter("imagepipe", "bytes_read")
        self.images_reencoded = Metrics.counter("imagepipe", "images_reencoded")
        self.images_failed = Metrics.counter("imagepipe", "images_failed")

    def process(self, item: WorkItem):
        if item.reject:
            self.images_failed.inc()
            yield beam.pvalue.TaggedOutput(ERRORS, error_record(item, item.reject))
            return
        try:
            with FileSystems.open(item.uri) as handle:
                data = handle.read()
        except Exception as err:
            self.images_failed.inc()
            yield beam.pvalue.TaggedOutput(
                ERRORS, error_record(item, "unreadable", f"{type(err).__name__}: {err}")
            )
            return
        self.images_read.inc()
        self.bytes_read.inc(len(data))
        try:
            image = prepare_image(data, max_side=self.max_side, max_pixels=self.max_pixels)
        except ImageRejected as rejected:
            self.images_failed.inc()
            yield beam.pvalue.TaggedOutput(
                ERRORS, error_record(item, rejected.reason, rejected.detail)
            )
            return
        if image.reencoded:
            self.images_reencoded.inc()
        example = encode_example(
            encoded=image.encoded,
            image_format=image.image_format,
            height=image.height,
            width=image.width,
            image_id=item.key,
            sha256=image.sha256,
            label=item.label_id,
            label_text=item.label,
        )
        yield (item.split, item.shard), (item.key, example, item.label)


class ReadImages(beam.PTransform):
    """WorkItems -> tagged outputs `records` (keyed by shard) and `errors` (dicts)."""

    def __init__(self, max_side: int, max_pixels: int):
        super().__init__()
        self.max_side = max_side
        self.max_pixels = max_pixels

    def expand(self, items):
        return (
            items
            # The plan is read from one file; spread the reads over all workers.
            | "Spread" >> beam.Reshuffle()
            | "ReadAndValidate"
            >> beam.ParDo(ReadImageFn(self.max_side, self.max_pixels)).with_outputs(
                ERRORS, main=RECORDS
            )
        )


class WriteShardFn(beam.DoFn):
    """All records of one shard -> one file in `directory`, and a report of it."""

    def __init__(self, directory: str, shard_counts: dict[str, int], compression: str, suffix: str):
        self.directory = directory
        self.shard_counts = dict(shard_counts)
        self.compression = compression
        self.suffix = suffix
        self.records_written = Metrics.counter("imagepipe", "records_written")
        self.shard_bytes = Metrics.counter("imagepipe", "shard_bytes_written")

    def process(self, element):
        (split, index), records = element
        # Sorted by key: identical inputs give identical shard bytes on any runner.
        records = sorted(records, key=lambda record: record[0])
        name = shard_name(split, index, self.shard_counts[split], self.suffix)
        data = encode_shard((example for _, example, _ in records), self.compression)
        write_bytes(FileSystems.join(self.directory, name), data)
        self.records_written.inc(len(records))
        self.shard_bytes.inc(len(data))
        yield {
            "split": split,
            "index": index,
            "file": name,
            "num_records": len(records),
            "num_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "per_label": dict(Counter(label for _, _, label in records)),
        }


class WriteShards(beam.PTransform):
    """Keyed records -> shard files; returns a PCollection of shard reports."""

    def __init__(self, directory: str, shard_counts: dict[str, int], compression: str, suffix: str):
        super().__init__()
        self.directory = directory
        self.shard_counts = shard_counts
        self.compression = compression
        self.suffix = suffix

    def expand(self, records):
        return (
            records
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShardFiles"
            >> beam.ParDo(
                WriteShardFn(self.directory, self.shard_counts, self.compression, self.suffix)
            )
        )


class WriteJsonLines(beam.PTransform):
    """Dicts -> sharded JSONL files under `prefix` (dead letters, shard reports)."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def expand(self, rows):
        return (
            rows
            | "ToJson" >> beam.Map(lambda row: json.dumps(row, sort_keys=True, ensure_ascii=False))
            | "WriteJsonl" >> beam.io.WriteToText(self.prefix, file_name_suffix=".jsonl")
        )
