"""Planning the job before it runs: what to read, with which label, into which shard.

The driver lists the input once (Beam's filesystems: local, gs://, anything
Beam supports), fixes the label map and each image's split and shard, and writes
that plan as JSONL for the pipeline to read. Deciding shards up front keeps them
balanced and the output deterministic: the same inputs always give the same
shards, byte for byte, whatever runner or parallelism executes the plan.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import io
import json
import logging
import math
import os
import posixpath
import sys
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from beam_jobs import fs
from beam_jobs.config import ShardConfig
from beam_jobs.splits import SPLIT_NAMES, hash_fraction, hash_fractions, split_at, split_name
from shardspec.folder import MIN_CLASSES
from stageconfig import ConfigError, is_inside, is_remote, local_path, text_name

log = logging.getLogger(__name__)

MANIFEST_SUFFIXES = (".csv", ".jsonl")
# Manifests do not carry sizes; the shard count is estimated from this many files.
SIZE_SAMPLE = 200
# Images one worker reads, validates and frames as one unit (a fragment of a shard) when a
# shard is cut: small enough that the work spreads evenly over workers, large enough that a
# unit's overhead (a fragment file, a bundle) stays small against ~1 ms per image.
CHUNK_IMAGES = 64
# A shard is one unit, though, when that still leaves about this many units per worker the
# job expects: its fragment is then renamed into the shard, so its bytes are written once,
# where a cut shard's are written as fragments, then again as the shard (issue #28).
UNITS_PER_WORKER = 16


class InputError(ValueError):
    """The input cannot be used at all (missing, empty, malformed manifest)."""


class WorkItem(NamedTuple):
    """One input of the plan. `reject` is set for inputs refused while listing.

    A tuple, not a dataclass: the planner makes two per image (as listed, as placed), and a
    tuple is a third of the time to make and half the memory (issue #28, 200,000 images)."""

    uri: str
    key: str
    label: str
    label_id: int = -1
    split: str = ""
    shard: int = -1
    chunk: int = 0
    reject: str = ""
    version: str = ""  # size@modified from the listing (folders); manifests leave it empty

    @property
    def unit(self) -> tuple[str, int, int]:
        """The unit of work it is read in: (split, shard, chunk)."""
        return self.split, self.shard, self.chunk


def unit_lines(items: Iterable[WorkItem]) -> Iterator[str]:
    """The plan as written for the pipeline: one JSON line per unit of work, its items in
    order. The pipeline reads units as they are, rather than one element per image
    grouped again by unit: a shuffle of every image cost more CPU than framing it, and on
    the local runner held every image's plan line in the driver (issue #28)."""
    # The items themselves grouped (a reference each), made into dicts a unit at a time:
    # a dict per image for the whole plan at once was 80 MB at 200,000 images.
    units: dict[tuple[str, int, int], list[WorkItem]] = defaultdict(list)
    for item in items:
        units[item.unit].append(item)
    for unit, members in units.items():
        yield json.dumps(
            {"unit": unit, "items": [member._asdict() for member in members]}, sort_keys=True
        )


class StagedPlan(NamedTuple):
    """The plan as the pipeline reads it: a file of `unit_lines`, and each line's (start,
    end) byte offsets, as its writer counted them (spread over the workers instead of the
    lines themselves: transforms.ReadPlanUnits)."""

    path: str
    ranges: list[tuple[int, int]]


def write_plan(path: str, items: Iterable[WorkItem]) -> StagedPlan:
    """Write the units of `items`, a line each, to `path`."""
    # Line by line through a buffer, not the whole plan as one string and again as bytes
    # (two copies of 60 MB at 200,000 images, at the driver's planning peak).
    ranges, offset = [], 0
    with fs.create(path) as handle:
        for line in unit_lines(items):
            data = f"{line}\n".encode()
            handle.write(data)
            ranges.append((offset, offset + len(data)))
            offset += len(data)
    return StagedPlan(path, ranges)


def parse_unit(line: str) -> tuple[tuple[str, int, int], list[WorkItem]]:
    """A line of `unit_lines` -> ((split, shard, chunk), its WorkItems)."""
    raw = json.loads(line)
    return tuple(raw["unit"]), [WorkItem(**item) for item in raw["items"]]


@dataclass(frozen=True)
class Plan:
    items: list[WorkItem]
    label_map: dict[str, int]
    shard_counts: dict[str, int]
    # The listing the plan was placed from (items as listed, sizes by key): placing it
    # again with other splits (with_splits) lists nothing twice.
    listing: tuple[list[WorkItem], dict[str, int]] = field(
        default=((), {}), repr=False, compare=False
    )
    # The workers the plan's chunks were sized for (whole_shard_images); placed again alike.
    parallelism: int = field(default=1, compare=False)

    def with_splits(self, config: ShardConfig, split_overrides: Mapping[str, str]) -> Plan:
        """The same listing placed again, `split_overrides` (key -> split) winning over
        the splits keys hash to (not over a manifest's split column)."""
        items, sizes = self.listing
        return _place(config, list(items), sizes, self.label_map, split_overrides, self.parallelism)

    def for_parallelism(self, config: ShardConfig, parallelism: int) -> Plan:
        """The same placement, its units of work sized for `parallelism` workers (which
        never changes a shard's bytes)."""
        items, sizes = self.listing
        overrides = {i.key: i.split for i in self.items if not i.reject}  # keep the splits
        return _place(config, list(items), sizes, self.label_map, overrides, parallelism)

    @property
    def num_inputs(self) -> int:
        return len(self.items)

    def outline(self) -> PlanOutline:
        return PlanOutline(self.num_inputs, self.label_map, self.shard_counts)

    @property
    def mean_bytes(self) -> float | None:
        """The inputs' mean size as listed (None when the listing gave no sizes)."""
        sizes = [size for size in self.listing[1].values() if size]
        return sum(sizes) / len(sizes) if sizes else None


@dataclass(frozen=True)
class PlanOutline:
    """What is left of a plan once it is staged (its items are in the plan file): what the
    output's metadata needs, without the items, which at 200,000 images were 130 MB of
    the driver's memory all through the pipeline (issue #28)."""

    num_inputs: int
    label_map: dict[str, int]
    shard_counts: dict[str, int]


def is_manifest(uri: str) -> bool:
    return uri.lower().endswith(MANIFEST_SUFFIXES)


def _is_hidden(relative: str) -> bool:
    """A part of the path starts with "." or "_" (string search: this runs per file)."""
    marked = "/" + relative
    return "/." in marked or "/_" in marked


def list_folder(root: str) -> tuple[list[WorkItem], dict[str, int]]:
    """<root>/<label>/<file> -> items keyed by their path relative to root, and sizes.

    Paths are taken literally (a folder named `in[1]` is not a pattern), and a
    local special file (FIFO, socket, device) or dangling symlink is dead-lettered
    instead of read: opening a FIFO would block the job forever.
    """
    root = root.rstrip("/") or "/"
    if not fs.is_remote(root) and not os.path.isdir(root):
        if os.path.exists(root):
            raise InputError(
                f"input {root} is a file: give a folder of <label>/<file> or a .csv/.jsonl manifest"
            )
        raise InputError(f"input path does not exist: {root}")
    # Object stores have no folders to test for: an absent prefix simply matches nothing.
    entries = fs.walk(root)
    if not entries and fs.is_remote(root):
        raise InputError(f"no input files found under {root} (missing or empty prefix)")
    items, sizes = [], {}
    for entry in entries:
        relative = text_name(entry.path[len(root) :].lstrip("/"))
        if not relative or _is_hidden(relative):
            continue  # dot-files, _SUCCESS-style markers, editor droppings
        folder, inside, _ = relative.partition("/")
        label = sys.intern(folder) if inside else ""  # one string a label, not an image
        reject = entry.problem or ("" if label else "no_label_dir")
        items.append(
            WorkItem(
                uri=entry.path, key=relative, label=label, reject=reject, version=entry.version
            )
        )
        if not reject:
            sizes[relative] = entry.size
    return items, sizes


def check_output_outside_input(input_root: str, output: str) -> None:
    """The job replaces its output as a whole; inside the input it would list its own
    shards as images on the next run, under a label named after the output folder."""
    if is_inside(output, input_root):
        raise InputError(
            f"--output {output} is inside --input {input_root}: the next run would read its "
            "own shards as images; choose an output folder outside the input"
        )


# Spreadsheets write CSV with the list separator of their locale: ";" across much of
# Europe, tabs when told to; the header says which.
CSV_DELIMITERS = (",", ";", "\t")


def _csv_rows(uri: str, text: str) -> Iterable[tuple[int, dict]]:
    """Rows of a CSV manifest as {column: cell}; column names match whatever their case
    or surrounding spaces (`URI`, ` Label `), as a spreadsheet user types them."""

    def names(cells: list[str]) -> list[str]:
        return [cell.strip().lower() for cell in cells]

    header = text.split("\n", 1)[0].rstrip("\r")
    delimiter = next(
        (
            d
            for d in CSV_DELIMITERS
            if {"uri", "label"} <= set(names(next(csv.reader([header], delimiter=d), [])))
        ),
        None,
    )
    if delimiter is None:
        raise InputError(
            f"manifest {uri}: the header must name 'uri' and 'label' columns, separated by "
            f"commas, semicolons or tabs (it reads {header[:80]!r})"
        )
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    columns = names(next(reader))
    rows = (cells for cells in reader if cells)  # blank lines are not rows
    for line_no, cells in enumerate(rows, start=2):
        yield line_no, dict(zip(columns, cells, strict=False))


def _manifest_rows(uri: str, text: str) -> list[tuple[int, dict | None]]:
    """(line number, row) of each manifest row; None for a JSON line that is not an object.

    One broken line (a truncated last line, a stray list) is that row's dead letter, as a
    row without a uri is; a file in which no line is a JSON object is not a JSONL manifest.
    """
    if uri.lower().endswith(".csv"):
        return list(_csv_rows(uri, text))
    rows, first_problem = [], ""
    # "\n" only: str.splitlines() would also cut a line at U+2028/U+2029/U+0085 in a name
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problem = "" if isinstance(row, dict) else "expected a JSON object"
        except json.JSONDecodeError as err:
            problem = f"invalid JSON ({err.msg})"
        if problem:
            first_problem = first_problem or f"line {line_no}: {problem}"
            row = None
        rows.append((line_no, row))
    if rows and all(row is None for _, row in rows):
        raise InputError(f"manifest {uri}, {first_problem}; no line is a JSON object")
    return rows


def list_manifest(uri: str) -> tuple[list[WorkItem], dict[str, int]]:
    """Manifest rows -> items keyed by their uri as written (relative uris resolve
    against the manifest's folder), and the sizes of a sample of them."""
    if not fs.exists(uri):
        raise InputError(f"manifest does not exist: {uri}")
    with fs.open_decompressed(uri) as handle:
        try:
            text = handle.read().decode("utf-8-sig")  # a BOM (Excel writes one) is not data
        except UnicodeDecodeError:
            raise InputError(f"manifest {uri} is not UTF-8 text") from None
    base = posixpath.dirname(uri) if "://" in uri else os.path.dirname(os.path.abspath(uri))
    items, seen = [], set()
    for line_no, row in _manifest_rows(uri, text):
        if row is None:
            items.append(
                WorkItem(uri=f"{uri}#{line_no}", key="", label="", reject="bad_manifest_row")
            )
            continue
        raw_uri, label, split = (_cell(row.get(name)) for name in ("uri", "label", "split"))
        if not raw_uri or not label:
            items.append(
                WorkItem(
                    uri=raw_uri or f"{uri}#{line_no}",
                    key=raw_uri,
                    label=label,
                    reject="bad_manifest_row",
                )
            )
            continue
        split = split_name(split)
        if split is None:
            items.append(WorkItem(uri=raw_uri, key=raw_uri, label=label, reject="bad_split"))
            continue
        try:
            resolved = local_path(raw_uri)
        except ConfigError:
            items.append(WorkItem(uri=raw_uri, key=raw_uri, label=label, reject="unreadable"))
            continue
        if "://" not in resolved and not resolved.startswith("/"):
            resolved = fs.join(base, resolved)
        if not _readable_scheme(resolved):
            items.append(
                WorkItem(uri=raw_uri, key=raw_uri, label=label, reject="unsupported_scheme")
            )
            continue
        if resolved in seen:  # the first row wins, whatever the others' labels say
            items.append(
                WorkItem(
                    uri=f"{resolved}#{line_no}", key=f"{raw_uri}#{line_no}", label=label,
                    reject="duplicate_uri",
                )
            )  # fmt: skip
            continue
        seen.add(resolved)
        items.append(WorkItem(uri=resolved, key=raw_uri, label=label, split=split))
    sample = sorted((i for i in items if not i.reject), key=lambda i: hash_fraction(i.key))
    sizes = {}
    for item in sample[:SIZE_SAMPLE]:
        entry = fs.check_readable(item.uri, max_bytes=2**63)
        if not entry.problem:  # missing files are dead-lettered when read, not here
            sizes[item.key] = entry.size
    return items, sizes


# What a dead letter decided when planning says in its `detail`, where the reason alone
# does not tell the user what to do.
REJECT_DETAILS = {
    "unsupported_scheme": "no file system here reads this scheme (local paths, file:// and "
    "gs:// are read): download the images and list their local paths",
    "bad_split": "the split column must say train, validation or test (or training, val, "
    "valid, dev, testing), in any case, or be empty",
}


def _readable_scheme(uri: str) -> bool:
    """Beam has a file system for the uri's scheme (http(s) and ftp rows, as public
    datasets list them, have none: download those images first). Its error at read time
    told the user to install apache-beam[gcp] for any scheme."""
    if not is_remote(uri):
        return True
    try:
        fs.filesystems().get_filesystem(uri)
    except ValueError:
        return False
    return True


def _cell(value) -> str:
    """A manifest value as text: strings and integers (label 0 is a label); anything
    else (a list, an object, a float, true) makes the row bad."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""


def label_name(text: str) -> str:
    """A label as Unicode text (NFC), not as the bytes a file system spelled it in.

    macOS writes folder names decomposed (NFD: "e" + U+0301), Linux keeps what it is
    given (usually NFC: "\u00e9"); a dataset gathered from both would otherwise hold
    two classes that print the same. Normalising is the identity for NFC names, so
    their shards do not change.
    """
    return unicodedata.normalize("NFC", text)


def load_label_map(uri: str) -> dict[str, int]:
    try:
        with fs.open_decompressed(uri) as handle:
            mapping = json.loads(handle.read().decode("utf-8"))
    except Exception as err:
        raise InputError(f"cannot read --label-map {uri}: {err}") from None
    if not isinstance(mapping, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in mapping.items()
    ):
        raise InputError(f"--label-map {uri} must be a JSON object of label name -> id >= 0")
    if len(set(mapping.values())) != len(mapping):
        raise InputError(f"--label-map {uri} maps two labels to the same id")
    normalised = {label_name(name): label_id for name, label_id in mapping.items()}
    if len(normalised) != len(mapping):
        raise InputError(
            f"--label-map {uri} names one label twice in different Unicode forms (NFC/NFD)"
        )
    return normalised


@contextlib.contextmanager
def _collector_paused():
    """Planning with Python's cycle collector paused: it allocates a few objects per image
    and frees none in cycles, yet each burst of allocations set off a collection that
    walked every object made so far, a third of the planning time at 200,000 images
    (bench/sharding_scale.py). Reference counting frees everything as before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@_collector_paused()
def build_plan(config: ShardConfig, parallelism: int = 1) -> Plan:
    """List the input and decide label ids, splits and balanced shard assignments, in
    units of work sized for `parallelism` workers (whole_shard_images)."""
    if is_manifest(config.input):
        items, sizes = list_manifest(config.input)
    else:
        check_output_outside_input(config.input, config.output)
        items, sizes = list_folder(config.input)
    if not items:
        raise InputError(f"no input files found under {config.input}")
    # Normalised once per label, and copied only where the name changes.
    names = {label: label_name(label) for label in {item.label for item in items}}
    items = [
        item if names[item.label] == item.label else item._replace(label=names[item.label])
        for item in items
    ]

    if config.label_map:
        label_map = load_label_map(config.label_map)
    else:
        label_map = {
            name: i for i, name in enumerate(sorted({i.label for i in items if not i.reject}))
        }
    if not label_map:
        raise InputError(f"no labelled images found under {config.input}")
    if len(label_map) < MIN_CLASSES:
        # Shards of one class are valid data, but no classifier trains on them: refuse
        # them now, not after the job at training, unless the user says they mean it.
        message = _one_label_message(config, next(iter(label_map)))
        if not config.allow_one_class:
            raise InputError(f"{message}; --allow-one-class shards it anyway")
        log.warning("%s", message)
    if not config.label_map and (warning := similar_labels_warning(label_map)):
        log.warning("%s", warning)  # a --label-map names its classes on purpose
    return _place(config, items, sizes, label_map, {}, parallelism)


@_collector_paused()
def _place(
    config: ShardConfig,
    items: list[WorkItem],
    sizes: dict[str, int],
    label_map: dict[str, int],
    split_overrides: Mapping[str, str],
    parallelism: int = 1,
) -> Plan:
    """Listed items -> a Plan: label ids, splits (a manifest's, else an override, else
    the key's hash) and balanced shard and chunk assignments."""
    # Labels and splits are decided here, but each item is copied once, with its shard and
    # chunk, below.
    rejected: list[WorkItem] = []
    # Per split, (place in the split's shard order, key, item): sorted as plain tuples.
    by_split: dict[str, list[tuple[float, str, WorkItem]]] = defaultdict(list)
    for item in items:
        if item.reject:
            rejected.append(item)
        elif item.label not in label_map:
            rejected.append(item._replace(reject="unknown_label"))
        else:
            point, rank = hash_fractions(item.key)
            split = (
                item.split
                or split_overrides.get(item.key)
                or split_at(point, config.split_fractions)
            )
            by_split[split].append((rank, item.key, item))

    mean_size = (sum(sizes.values()) / len(sizes)) if sizes else 0
    estimated = {
        split: int(sum(sizes.get(key, mean_size) for _, key, _ in members))
        for split, members in by_split.items()
    }
    shard_counts = {
        split: shard_count(len(by_split[split]), estimated.get(split, 0), config)
        for split in SPLIT_NAMES
    }

    whole = whole_shard_images(sum(len(members) for members in by_split.values()), parallelism)
    final: list[WorkItem] = _chunked(rejected, CHUNK_IMAGES)
    for split, members in by_split.items():
        # Round-robin over a hash order: balanced shards, independent of listing order.
        ordered = [item for _, _, item in sorted(members)]
        count = shard_counts[split]
        for shard in range(count):
            if placed := ordered[shard::count]:
                per_chunk = len(placed) if len(placed) <= whole else CHUNK_IMAGES
                final.extend(_chunked(placed, per_chunk, (label_map, split, shard)))
    counts = Counter(i.split for i in final if not i.reject)
    log.info(
        "planned %d inputs (%s), %d rejected while listing, %d labels",
        len(final),
        ", ".join(f"{s}={counts.get(s, 0)} in {shard_counts[s]} shards" for s in SPLIT_NAMES),
        sum(1 for i in final if i.reject),
        len(label_map),
    )
    return Plan(
        items=final,
        label_map=label_map,
        shard_counts=shard_counts,
        listing=(items, sizes),
        parallelism=parallelism,
    )


def _one_label_message(config: ShardConfig, label: str) -> str:
    """The usual cause of one label is an --input one folder above the class folders."""
    needs = f"a classifier needs {MIN_CLASSES} or more"
    if config.label_map:
        return f"--label-map {config.label_map} names only one label, {label!r}: {needs}"
    if is_manifest(config.input):
        return f"manifest {config.input} names only one label, {label!r}: {needs}"
    return (
        f"{config.input} holds one class folder, {label!r}: {needs} (labels are the "
        "folders right under --input: is it one level above the class folders?)"
    )


def similar_labels_warning(label_map: dict[str, int]) -> str:
    """Labels that differ only in case, spaces, '-' or '_' ("Cat", "cat", "cat "): folders
    gathered by two people or tools, most likely one class split in two, which the
    model must then tell apart. Kept (Linux tells them apart; the user decides)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for label in label_map:
        groups["".join(label.casefold().replace("-", " ").replace("_", " ").split())].append(label)
    similar = [sorted(names) for names in groups.values() if len(names) > 1]
    if not similar:
        return ""
    shown = "; ".join(" and ".join(repr(n) for n in names) for names in sorted(similar)[:5])
    more = f" and {len(similar) - 5} more" if len(similar) > 5 else ""
    return (
        f"labels that differ only in case, spaces, '-' or '_' are separate classes: "
        f"{shown}{more}. If each pair is one class, give its images one label (move them "
        "into one folder, or edit the manifest)"
    )


def whole_shard_images(num_images: int, parallelism: int) -> int:
    """The largest shard read, and written, as one unit: a share of the job that leaves
    UNITS_PER_WORKER units per worker (never under CHUNK_IMAGES); larger shards are cut
    into units of CHUNK_IMAGES. One worker has nobody to share with: every shard whole."""
    if parallelism <= 1:
        return max(num_images, CHUNK_IMAGES)
    units = UNITS_PER_WORKER * parallelism
    return max(CHUNK_IMAGES, math.ceil(num_images / units))


def _chunked(
    items: list[WorkItem],
    per_chunk: int,
    placed: tuple[Mapping[str, int], str, int] | None = None,
) -> list[WorkItem]:
    """Number consecutive runs of items in key order (a shard's record order), so a shard
    is the concatenation of its chunks' fragments in chunk order; each item copied once
    with its chunk and, when `placed` (label map, split, shard), its label id, split and
    shard (the rejected keep theirs).

    The runs are of equal size (within one), at most `per_chunk`: Beam's local runner
    deals grouped keys to its workers round-robin, so runs of exactly CHUNK_IMAGES and a
    short tail gave every shard's short tail to the same worker (one of 2 workers read
    1,792 of 3,000 images; the job ran 10 % longer than with equal runs, bench/)."""
    ordered = sorted(items, key=lambda i: i.key)
    runs = math.ceil(len(ordered) / per_chunk)
    if placed is None:
        return [
            item._replace(chunk=index * runs // len(ordered)) for index, item in enumerate(ordered)
        ]
    label_map, split, shard = placed
    return [  # made anew rather than _replace()d: a third of the time, once per image
        WorkItem(
            uri=item.uri,
            key=item.key,
            label=item.label,
            label_id=label_map[item.label],
            split=split,
            shard=shard,
            chunk=index * runs // len(ordered),
            reject=item.reject,
            version=item.version,
        )
        for index, item in enumerate(ordered)
    ]


def shard_count(num_records: int, estimated_bytes: int, config: ShardConfig) -> int:
    """Shards for one split: fixed by flag, else by size, at least min_shards, never
    more shards than records (an empty shard only costs a worker an idle file)."""
    if num_records == 0:
        return 0
    if config.num_shards is not None:
        wanted = config.num_shards
    else:
        wanted = max(
            config.min_shards, math.ceil(estimated_bytes / (config.target_shard_mb * 2**20))
        )
    return max(1, min(wanted, num_records))
