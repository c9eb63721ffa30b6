import io

import pytest

from beam_jobs import fs
from stageconfig import text_name


class CountingReader(io.BytesIO):
    """Records the size of every read asked for."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.asked: list[int] = []

    def read(self, size=-1):
        self.asked.append(size)
        return super().read(size)


@pytest.mark.parametrize(
    ("size", "expected", "limit", "read", "asked"),
    [
        (100, 100, 1000, 100, [101]),  # as listed: one read of the size + 1
        (150, 100, 1000, 150, [101, 900]),  # grew since it was listed: read the rest
        (2000, 100, 1000, 1001, [101, 900]),  # grew past the limit: limit + 1 tells so
        (2000, 2000, 1000, 1001, [1001]),  # listed over the limit: never more than limit + 1
        (50, 100, 1000, 50, [101]),  # shrank: what is there
    ],
)
def test_a_read_asks_for_the_listed_size_and_never_past_the_limit(
    size, expected, limit, read, asked
):
    handle = CountingReader(bytes(range(256)) * (size // 256) + bytes(size % 256))
    data = fs.read_at_most(handle, limit, expected)
    assert len(data) == read
    assert data == handle.getvalue()[:read]
    assert handle.asked == asked


def test_text_name_keeps_text_and_shows_undecodable_bytes():
    assert text_name("caf\u00e9/a.jpg") == "caf\u00e9/a.jpg"
    undecodable = b"caf\xe9/a.jpg".decode("utf-8", "surrogateescape")
    assert text_name(undecodable) == "caf\\xe9/a.jpg"
    assert text_name(undecodable).encode("utf-8")  # valid text


def test_json_bytes_is_utf8_and_escapes_only_when_a_name_needs_it():
    assert fs.json_bytes({"label": "caf\u00e9"}) == '{"label": "caf\u00e9"}'.encode()
    undecodable = b"/in/r\xffoot".decode("utf-8", "surrogateescape")
    raw = fs.json_bytes({"input": undecodable})
    assert raw == b'{"input": "/in/r\\udcffoot"}'
    import json

    assert json.loads(raw)["input"] == undecodable  # the same name back


@pytest.mark.filterwarnings("ignore:Possible nested set")
@pytest.mark.parametrize("tail", ["**", "*", "_staging-*/**", "shards*", "a?c/*"])
def test_local_listing_matches_what_beam_matches(tmp_path, tail):
    """Local paths are listed without Beam (beam_jobs.fs): the same files as Beam's
    pattern match, literal `[`, `*` and `?` in the folder's own name included."""
    from apache_beam.io.filesystems import FileSystems

    root = tmp_path / "out[1]*?"
    for name in (
        "shards-0.jsonl", "x", "sub/shards-1", "_staging-ab/_plan/p", "_staging-cd/f",
        "abc/y", "abc/deep/z", "ac/w", ".hidden/shards-2",
    ):  # fmt: skip
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    directory = str(root)
    matched = FileSystems.match([FileSystems.join(fs.escape_glob(directory), tail)])
    by_beam = sorted(m.path for m in matched[0].metadata_list)
    assert fs.files_under(directory, tail) == by_beam
    assert by_beam  # every pattern finds something here
