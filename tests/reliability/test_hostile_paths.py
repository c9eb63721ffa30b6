"""Odd paths, special files and odd manifests given to the sharding job (issue #12, items
1, 2, 4, 6, 7): every input is stored once or dead-lettered once with a reason, paths are
taken literally, nothing hangs, and the job's exit codes hold (0 done, 2 bad input)."""

import csv
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tensorflow as tf

from beam_jobs import sample_data
from tests.jobs import IN_PROCESS, shard_job
from training import features

ALL_REJECTIONS_ALLOWED = ["--max-error-fraction", "1", *IN_PROCESS]


def _run(input_path, output, *flags) -> int:
    # These inputs are about names and file kinds, often under one label folder: one
    # label is allowed here (its refusal is tested in tests/beam_jobs/test_plan.py).
    return shard_job(input_path, output, "--allow-one-class", *flags, in_process=False)


def _stored(output) -> dict[str, str]:
    """image id -> label text of every record, read back with plain TensorFlow."""
    stored = {}
    for path in sorted(Path(output).glob("*-of-*.tfrecord")):
        for raw in tf.data.TFRecordDataset(str(path)):
            parsed = tf.io.parse_single_example(raw, features.FEATURE_SPEC)
            image_id = parsed[features.IMAGE_ID].numpy().decode()
            assert image_id not in stored, f"{image_id} stored twice"
            stored[image_id] = parsed[features.LABEL_TEXT].numpy().decode()
            tf.io.decode_image(parsed[features.IMAGE_ENCODED], channels=3)
    return stored


def _dead_letters(output) -> dict[str, str]:
    rows = []
    for path in sorted((Path(output) / "errors").glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()]
    keys = [row["key"] for row in rows]
    assert len(keys) == len(set(keys)), "an input dead-lettered twice"
    return {row["key"]: row["reason"] for row in rows}


def _image(path: Path, seed: int = 0) -> None:
    import random

    path.parent.mkdir(parents=True, exist_ok=True)
    sample_data.draw_sample("circle", random.Random(seed), 32, 32).save(path, format="JPEG")


def test_glob_characters_in_the_input_path_are_literal(tmp_path):
    literal, lookalike = tmp_path / "data" / "in[1]", tmp_path / "data" / "in1"
    for label in ("a*", "b?"):
        for i in range(3):
            _image(literal / label / f"x[{i}].jpg", i)
    _image(lookalike / "wrong" / "y.jpg")
    assert _run(literal, tmp_path / "out", *IN_PROCESS) == 0
    assert sorted(set(_stored(tmp_path / "out").values())) == ["a*", "b?"]
    assert len(_stored(tmp_path / "out")) == 6


def test_glob_characters_in_the_output_path_are_literal(tmp_path, sample_images):
    output = tmp_path / "o[1]*?"
    (tmp_path / "o1").mkdir()  # what the pattern would also match
    for _ in range(2):  # the rerun replaces the first output through the same paths
        assert _run(sample_images, output, *IN_PROCESS) == 0
    assert (output / "_SUCCESS").exists()
    assert len(_stored(output)) == 48
    assert not any(p.name.startswith("_staging-") for p in output.iterdir())
    assert list((tmp_path / "o1").iterdir()) == []


def test_line_separators_and_any_unicode_in_names_go_through(tmp_path):
    root = tmp_path / "in"
    _image(root / "cls\u2028line" / "ok\u2029.jpg")
    _image(root / "cls\u2028line" / "ok2\u0085.jpg", 1)
    (root / "cls\u2028line" / "bad\u2028name.jpg").write_bytes(b"not an image")
    assert _run(root, tmp_path / "out", *ALL_REJECTIONS_ALLOWED) == 0
    assert set(_stored(tmp_path / "out")) == {
        "cls\u2028line/ok\u2029.jpg",
        "cls\u2028line/ok2\u0085.jpg",
    }
    assert _dead_letters(tmp_path / "out") == {"cls\u2028line/bad\u2028name.jpg": "not_an_image"}


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param(IN_PROCESS, id="in_process"),
        # worker processes: the plan crosses a process boundary as JSON
        pytest.param(
            ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
            id="worker_processes",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_file_and_folder_names_that_are_not_utf8_go_through(tmp_path, mode):
    """Linux names are bytes: a Latin-1 archive unpacked here has names no UTF-8 decoder
    takes. Each image is read through its real name and stored under a readable id
    (undecodable bytes as \\xNN); a class folder so named is a readable label; a bad
    file so named is dead-lettered in a valid JSON line."""
    root = os.fsencode(tmp_path / "in")
    for folder in (b"caf\xe9", b"tea"):  # Latin-1 "cafe" with an accent
        for i in range(3):
            _image(Path(os.fsdecode(root + b"/" + folder + b"/" + b"%d\xe9t\xe9.jpg" % i)), i)
    with open(root + b"/tea/bro\xfbken.jpg", "wb") as handle:
        handle.write(b"not an image")
    assert _run(os.fsdecode(root), tmp_path / "out", *mode, "--max-error-fraction", "1") == 0
    assert _stored(tmp_path / "out") == {
        **{f"caf\\xe9/{i}\\xe9t\\xe9.jpg": "caf\\xe9" for i in range(3)},
        **{f"tea/{i}\\xe9t\\xe9.jpg": "tea" for i in range(3)},
    }
    assert _dead_letters(tmp_path / "out") == {"tea/bro\\xfbken.jpg": "not_an_image"}
    metadata = json.loads((tmp_path / "out" / "metadata.json").read_text(encoding="utf-8"))
    assert metadata["label_map"] == {"caf\\xe9": 0, "tea": 1}


def test_file_uris_name_local_paths_for_input_output_and_manifest_rows(tmp_path):
    """`file:///x` (RFC 8089, percent-encoded) is the local path /x, as TensorFlow takes
    it; Beam's file systems know no `file` scheme and used to fail with a traceback."""
    _image(tmp_path / "in" / "cat" / "a b.jpg")
    _image(tmp_path / "in" / "dog" / "c.jpg", 1)
    folder_uri = (tmp_path / "in").as_uri()
    out_uri = (tmp_path / "out 1").as_uri()  # "out%201"
    assert _run(folder_uri, out_uri, *IN_PROCESS) == 0
    assert set(_stored(tmp_path / "out 1")) == {"cat/a b.jpg", "dog/c.jpg"}

    manifest = tmp_path / "m.csv"
    rows = [
        ((tmp_path / "in" / "cat" / "a b.jpg").as_uri(), "cat"),  # .../a%20b.jpg
        (str(tmp_path / "in" / "cat" / "a b.jpg"), "cat"),  # the same file: a duplicate
        (f"file://localhost{tmp_path}/in/dog/c.jpg", "dog"),
        ("file://elsewhere/in/dog/c.jpg", "dog"),  # another host's file: not readable here
    ]
    manifest.write_text("uri,label\n" + "".join(f"{u},{label}\n" for u, label in rows))
    assert _run(manifest.as_uri(), tmp_path / "out2", *ALL_REJECTIONS_ALLOWED) == 0
    assert _stored(tmp_path / "out2") == {rows[0][0]: "cat", rows[2][0]: "dog"}
    assert sorted(_dead_letters(tmp_path / "out2").values()) == ["duplicate_uri", "unreadable"]


def test_special_files_are_dead_lettered_not_read(tmp_path):
    root = tmp_path / "in"
    _image(root / "cat" / "good.jpg")
    _image(root / "cat" / "big.jpg", 1)
    os.mkfifo(root / "cat" / "x.jpg")
    os.symlink(root / "cat" / "gone.jpg", root / "cat" / "dangling.jpg")
    os.symlink(root / "cat" / "good.jpg", root / "cat" / "link.jpg")
    (root / "cat" / "big.jpg").write_bytes((root / "cat" / "big.jpg").read_bytes() + b"\0" * 4096)
    outcome = {}
    worker = threading.Thread(
        target=lambda: outcome.setdefault(
            "code", _run(root, tmp_path / "out", "--max-file-mb", "0.003", *ALL_REJECTIONS_ALLOWED)
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the job hung on a special file"
    assert outcome["code"] == 0
    assert set(_stored(tmp_path / "out")) == {"cat/good.jpg", "cat/link.jpg"}
    assert _dead_letters(tmp_path / "out") == {
        "cat/x.jpg": "not_a_regular_file",
        "cat/dangling.jpg": "dangling_symlink",
        "cat/big.jpg": "file_too_large",
    }


def test_a_fifo_named_in_a_manifest_is_not_opened(tmp_path):
    _image(tmp_path / "a.jpg")
    os.mkfifo(tmp_path / "b.jpg")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        '{"uri": "a.jpg", "label": "x"}\n{"uri": "b.jpg", "label": "x"}\n', encoding="utf-8"
    )
    assert _run(manifest, tmp_path / "out", *ALL_REJECTIONS_ALLOWED) == 0
    assert _dead_letters(tmp_path / "out") == {"b.jpg": "not_a_regular_file"}


def test_manifest_labels_bom_and_duplicate_uris(tmp_path):
    for i in range(4):
        _image(tmp_path / f"{i}.jpg", i)
    jsonl = tmp_path / "m.jsonl"
    rows = [
        {"uri": "0.jpg", "label": 0},
        {"uri": "1.jpg", "label": "1"},
        {"uri": "2.jpg", "label": ["a", "b"]},
        {"uri": "3.jpg", "label": 2.5},
        {"uri": "0.jpg", "label": "other"},  # same uri again: the first row wins
    ]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    first = tmp_path / "out1"
    assert _run(jsonl, first, *ALL_REJECTIONS_ALLOWED) == 0
    assert _stored(first) == {"0.jpg": "0", "1.jpg": "1"}
    assert sorted(_dead_letters(first).values()) == [
        "bad_manifest_row",
        "bad_manifest_row",
        "duplicate_uri",
    ]

    with_bom = tmp_path / "m.csv"
    with open(with_bom, "w", newline="", encoding="utf-8-sig") as handle:
        csv.writer(handle).writerows([["uri", "label"], ["0.jpg", "x"], ["1.jpg", "y"]])
    assert _run(with_bom, tmp_path / "out2", *IN_PROCESS) == 0
    assert _stored(tmp_path / "out2") == {"0.jpg": "x", "1.jpg": "y"}


def test_manifest_rows_of_a_scheme_nothing_reads_are_dead_lettered_as_such(tmp_path):
    """Public datasets list their images as http(s) URLs: each such row is
    `unsupported_scheme` with what to do, not `unreadable` with Beam's advice to install
    apache-beam[gcp]; a scheme Beam knows (gs://, s3:// without boto3) is read or fails
    when read."""
    for i in range(2):
        _image(tmp_path / f"{i}.jpg", i)
    manifest = tmp_path / "m.csv"
    manifest.write_text(
        "uri,label\n0.jpg,a\n1.jpg,b\nhttps://example.com/2.jpg,a\nftp://host/3.jpg,b\n"
    )
    assert _run(manifest, tmp_path / "out", *ALL_REJECTIONS_ALLOWED) == 0
    assert _stored(tmp_path / "out") == {"0.jpg": "a", "1.jpg": "b"}
    letters = [
        json.loads(line)
        for path in sorted((tmp_path / "out" / "errors").iterdir())
        for line in path.read_text().splitlines()
    ]
    assert sorted((x["key"], x["reason"]) for x in letters) == [
        ("ftp://host/3.jpg", "unsupported_scheme"),
        ("https://example.com/2.jpg", "unsupported_scheme"),
    ]
    assert all("download the images" in x["detail"] for x in letters)


def test_duplicate_uris_give_the_same_shards_every_run(tmp_path):
    for i in range(6):
        _image(tmp_path / f"{i}.jpg", i)
    manifest = tmp_path / "m.jsonl"
    rows = [{"uri": f"{i % 6}.jpg", "label": f"l{i % 4}"} for i in range(12)]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    digests = []
    for name in ("a", "b"):
        assert _run(manifest, tmp_path / name, *ALL_REJECTIONS_ALLOWED) == 0
        metadata = json.loads((tmp_path / name / "metadata.json").read_text())
        digests.append(
            [s["sha256"] for split in metadata["splits"].values() for s in split["shards"]]
        )
    assert digests[0] == digests[1]


@pytest.mark.parametrize("where", ["inside", "same_real_path"])
def test_output_inside_the_input_is_refused_with_one_line(tmp_path, sample_images, capsys, where):
    root = tmp_path / "in"
    shutil.copytree(sample_images, root)
    output = root / "shards" if where == "inside" else tmp_path / "link" / "shards"
    if where == "same_real_path":
        os.symlink(root, tmp_path / "link")
    assert _run(root, output, *IN_PROCESS) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is inside --input" in err[0]
    assert not output.exists()


def _cli(module: str, *args) -> subprocess.CompletedProcess:
    """One stage's CLI in its own process, as a user runs it (arguments as str or bytes)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("module", ["beam_jobs.shard_images", "training.train"])
def test_an_output_that_is_a_file_exits_2_in_one_line(tmp_path, sample_images, module):
    a_file = tmp_path / "out"
    a_file.write_text("not a folder")
    flag = "--input" if module.startswith("beam") else "--data"
    done = _cli(module, flag, sample_images, "--output", str(a_file))
    assert done.returncode == 2
    assert f"--output {a_file} is a file" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_output_holding_other_files_is_refused_and_left_as_it_was(
    tmp_path, sample_images, capsys
):
    """Each run replaces the shards, errors/ and copies/ in its output (by name): pointed at
    a folder of the user's, it deleted `test-plan.txt` and `errors/`. Refused, untouched."""
    theirs = tmp_path / "project"
    (theirs / "errors").mkdir(parents=True)
    files = {"test-plan.txt": "mine", "errors/build.log": "mine", "notes.md": "mine"}
    for name, text in files.items():
        (theirs / name).write_text(text)
    assert _run(sample_images, theirs) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --output {theirs} holds other files (errors, notes.md, test-plan.txt) and "
        "is not a shard folder (no _config.json or metadata.json): each run replaces the "
        "shards and errors/ there, so give a new or empty folder"
    )
    assert sorted(str(p.relative_to(theirs)) for p in theirs.rglob("*") if p.is_file()) == sorted(
        files
    )
    # What the job wrote itself it replaces, as before: a rerun, and a killed run's leftovers.
    ours = tmp_path / "shards"
    assert _run(sample_images, ours) == 0 and _run(sample_images, ours) == 0
    killed = tmp_path / "killed"
    (killed / "_staging-0123456789ab" / "_plan").mkdir(parents=True)
    (killed / "_staging-0123456789ab" / "_plan" / "inputs.jsonl").write_text("")
    assert _run(sample_images, killed) == 0


@pytest.mark.slow
@pytest.mark.parametrize("module", ["beam_jobs.shard_images", "training.train"])
def test_an_output_name_that_is_not_utf8_exits_2_in_one_line(tmp_path, sample_images, module):
    """Beam's pipeline graph and TensorFlow's file API hold paths as UTF-8 text; a
    folder name of other bytes is refused before anything runs, and shown readably."""
    output = os.fsencode(tmp_path) + b"/out\xff"
    flag = "--input" if module.startswith("beam") else "--data"
    done = _cli(module, flag, sample_images, "--output", output)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"python -m {module}: error: --output {tmp_path}/out\\xff: the name is not UTF-8, "
        "and Beam's and TensorFlow's paths are UTF-8 text: give a folder with a UTF-8 name"
    )
    assert not os.path.exists(output)


@pytest.mark.slow
def test_training_data_named_in_bytes_that_are_not_utf8_exits_2_in_one_line(tmp_path):
    data = os.fsencode(tmp_path) + b"/shards\xff"
    os.mkdir(data)
    done = _cli("training.train", "--data", data, "--output", tmp_path / "run")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"error: --data {tmp_path}/shards\\xff: the name is not UTF-8" in done.stderr
