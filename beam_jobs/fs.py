"""File calls on literal paths: local ones through `os`, remote ones through Beam.

Local paths and object names may contain `[`, `]`, `*` and `?`, while Beam's
`FileSystems.match` (and every reader that takes a file pattern) treats them as
a pattern: `in[1]` would list `in1`. Every path a user names goes through here
escaped, and what a pattern returns is kept only when it lies under the
folder the user named.

Beam is imported on the first remote path (`filesystems()`), not with this module:
the driver of a run over local paths that finds its output in the shard cache
(beam_jobs/cache.py) imports no Beam at all, which was two thirds of its time (1.1 of
1.7 s). Locally the calls do what Beam's LocalFileSystem does (a created file's folder
is made; `*` in a pattern stays within one folder, `**` crosses them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import warnings
from typing import NamedTuple

from stageconfig import is_remote

_GLOB = re.compile(r"([\[*?])")


def escape_glob(path: str) -> str:
    """`path` as a Beam pattern matching only itself (`[` -> `[[]`, `*` -> `[*]`)."""
    return _GLOB.sub(r"[\1]", path)


def json_bytes(value, **options) -> bytes:
    """`value` as UTF-8 JSON. Where it quotes a local name that is not UTF-8 (see
    `stageconfig.text_name`) the whole document is ASCII with `\\uDCxx` escapes instead, which
    `json.loads` turns back into that same name."""
    text = json.dumps(value, ensure_ascii=False, **options)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, **options).encode()


# An escaped "[" ("[[]") becomes a regex set that Python warns may one day nest; Beam
# compiles it wherever it matches (here, and in the pipeline's reads of a staging path).
warnings.filterwarnings("ignore", message="Possible nested set", category=FutureWarning)


def filesystems():
    """Beam's `FileSystems`, imported when a remote path first needs it."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def _match(pattern: str) -> list:
    return filesystems().match([pattern])[0].metadata_list


def join(path: str, *parts: str) -> str:
    return filesystems().join(path, *parts) if is_remote(path) else os.path.join(path, *parts)


def exists(path: str) -> bool:
    return filesystems().exists(path) if is_remote(path) else os.path.exists(path)


def open_read(path: str):
    """The file's bytes as they are stored (Beam would gunzip anything named *.gz)."""
    if not is_remote(path):
        return open(path, "rb")
    from apache_beam.io.filesystem import CompressionTypes

    return filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


# The suffixes Beam's readers decompress by (`CompressionTypes.detect_compression_type`).
_COMPRESSED = (".bz2", ".deflate", ".gz", ".zst", ".zstd", ".xz", ".lzma")


def open_decompressed(path: str):
    """The file's content, decompressed by its suffix as Beam's readers do (a user's
    `manifest.csv.gz`)."""
    if is_remote(path) or path.lower().endswith(_COMPRESSED):
        return filesystems().open(path)
    return open(path, "rb")


def create(path: str):
    """A file to write exactly what is written to, its folder made if missing (Beam would
    otherwise gzip again anything named *.gz); Beam's writers buffer."""
    if not is_remote(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return open(path, "wb")
    from apache_beam.io.filesystem import CompressionTypes

    return filesystems().create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def rename(sources: list[str], destinations: list[str]) -> None:
    """Move files (one batch call to the object store where the paths are remote)."""
    if sources and is_remote(sources[0]):
        filesystems().rename(sources, destinations)
        return
    for source, destination in zip(sources, destinations, strict=True):
        os.rename(source, destination)


def mkdirs(directory: str) -> None:
    """Local renames need the target folder; object stores have none."""
    if not is_remote(directory):
        os.makedirs(directory, exist_ok=True)


def delete(paths: list[str]) -> None:
    """Delete these files, or local folders with what they hold. Beam's delete would
    match each path as a pattern (and finds no local folder through a pattern)."""
    remote = [escape_glob(path) for path in paths if is_remote(path)]
    if remote:
        filesystems().delete(remote)
    for path in paths:
        if is_remote(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)


def files_under(directory: str, tail: str = "**") -> list[str]:
    """Files whose path below the literal `directory` matches `tail` (a pattern), sorted."""
    directory = directory.rstrip("/")
    if not is_remote(directory):
        return _local_files_under(directory, tail)
    matches = _match(filesystems().join(escape_glob(directory), tail))
    return sorted(m.path for m in matches if m.path.startswith(directory + "/"))


def _pattern(tail: str) -> re.Pattern:
    """`tail` as Beam reads a pattern: `**` any characters, `*` and `?` within a folder."""
    parts = re.split(r"(\*\*|\*|\?)", tail)
    wildcards = {"**": ".*", "*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(wildcards.get(part, re.escape(part)) for part in parts))


def _local_files_under(directory: str, tail: str) -> list[str]:
    wanted, found = _pattern(tail), []
    for folder, _, files in os.walk(directory):  # symlinked folders not followed, as Beam
        relative = folder[len(directory) + 1 :]
        prefix = f"{relative}/" if relative else ""
        found.extend(
            os.path.join(folder, name) for name in files if wanted.fullmatch(prefix + name)
        )
    return sorted(found)


class Entry(NamedTuple):
    """One listed file (a tuple: a listing makes one per file)."""

    path: str
    size: int
    problem: str = ""  # "" for a readable regular file, else a dead-letter reason
    detail: str = ""
    modified: str = ""  # mtime (local, ns) or last update (object stores): a changed file
    # with the same name and size changes it

    @property
    def version(self) -> str:
        return f"{self.size}@{self.modified}"


def walk(root: str) -> list[Entry]:
    """Every file below `root`, literally; local special files come back with a problem.

    Locally the folder is walked with `os.scandir` rather than matched: a FIFO,
    socket or device in the input would otherwise be opened and block or read
    forever, and a dangling symlink would vanish from the listing unnoticed.
    """
    root = root.rstrip("/") or "/"
    if is_remote(root):
        matches = _match(escape_glob(root) + "/**")
        return sorted(
            (
                Entry(m.path, m.size_in_bytes, modified=repr(m.last_updated_in_seconds))
                for m in matches
                if m.path.startswith(root + "/")
            ),
            key=lambda e: e.path,
        )
    loops, paths, seen = [], [], {os.path.realpath(root)}
    for folder, dirs, files in os.walk(root, followlinks=True):
        for name in list(dirs):  # a symlinked folder is followed once; a loop is not
            real = os.path.realpath(os.path.join(folder, name))
            if real in seen:
                dirs.remove(name)
                loops.append(Entry(os.path.join(folder, name), 0, "symlink_loop", real))
            seen.add(real)
        prefix = folder if folder.endswith("/") else folder + "/"  # os.path.join, per file
        paths.extend([prefix + name for name in files])
    paths.sort()  # as strings, before each becomes an Entry: cheaper than after
    entries = [local_entry(path) for path in paths]
    return sorted(entries + loops) if loops else entries  # by path: unique


def local_entry(path: str) -> Entry:
    try:
        info = os.stat(path)  # follows symlinks: a link to a regular file is fine
    except FileNotFoundError as err:
        if os.path.islink(path):
            return Entry(path, 0, "dangling_symlink", f"points at {os.readlink(path)!r}")
        return Entry(path, 0, "unreadable", f"FileNotFoundError: {err}")
    except OSError as err:
        return Entry(path, 0, "unreadable", f"{type(err).__name__}: {err}")
    if stat.S_ISREG(info.st_mode):
        return Entry(path, info.st_size, "", "", str(info.st_mtime_ns))
    kind = (
        "FIFO"
        if stat.S_ISFIFO(info.st_mode)
        else "socket"
        if stat.S_ISSOCK(info.st_mode)
        else "device"
    )
    return Entry(path, 0, "not_a_regular_file", kind)


def check_readable(path: str, max_bytes: int) -> Entry:
    """Size and kind of one file about to be read (local: stat; remote: metadata)."""
    if not is_remote(path):
        entry = local_entry(path)
    else:
        try:
            filesystem = filesystems().get_filesystem(path)
            entry = Entry(path, filesystem.size(path), modified=repr(filesystem.last_updated(path)))
        except Exception as err:  # OSError, or an object store client's own NotFound
            return Entry(path, 0, "unreadable", f"{type(err).__name__}: {err}")
    if not entry.problem and entry.size > max_bytes:
        return Entry(
            path, entry.size, "file_too_large", f"{entry.size} bytes > {max_bytes} (--max-file-mb)"
        )
    return entry


def read_at_most(handle, limit: int, expected: int) -> bytes:
    """Up to `limit` + 1 bytes (one more tells a file over the limit), asking first for
    the `expected` size + 1: `read(n)` allocates n bytes before it reads, so asking
    for the limit (256 MB) for a 30 KB image cost more than decoding its header."""
    data = handle.read(min(expected, limit) + 1)
    if len(data) > expected and len(data) <= limit:  # grew since it was listed
        data += handle.read(limit + 1 - len(data))
    return data


def read_json_lines(paths: list[str]) -> list[dict]:
    """JSON objects, one per line. Lines end at "\\n" only: `str.splitlines` would also
    split inside a value holding U+2028, U+2029 or U+0085 (a file name may)."""
    rows = []
    for path in paths:
        with open_read(path) as handle:
            rows.extend(json.loads(line) for line in handle.read().split(b"\n") if line.strip())
    return rows
