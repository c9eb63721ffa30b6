"""End to end: sample images (with corrupt files) -> shards -> read back with plain tf.data."""

import glob
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest
import tensorflow as tf

from beam_jobs import shard_images
from beam_jobs.local_runner import choose_local_mode
from beam_jobs.splits import assign_split
from tests.jobs import IN_PROCESS, shard_job
from training import features
from training.shards import ShardSet

FRACTIONS = {"train": 0.8, "validation": 0.1, "test": 0.1}


def _json(path):
    return json.loads(pathlib.Path(path).read_text())


def _bytes(path):
    return pathlib.Path(path).read_bytes()


def _text(path):
    return pathlib.Path(path).read_text()


def _read_split(output, split):
    records = {}
    for path in sorted(glob.glob(os.path.join(output, f"{split}-*"))):
        for raw in tf.data.TFRecordDataset(path, compression_type=""):
            parsed = tf.io.parse_single_example(raw, features.FEATURE_SPEC)
            key = parsed[features.IMAGE_ID].numpy().decode()
            assert key not in records, f"{key} written twice"
            records[key] = parsed
    return records


def _good_images(root):
    return {
        os.path.relpath(p, root): p
        for p in glob.glob(os.path.join(root, "*", "*"))
        if not os.path.basename(p).startswith("corrupt_")
    }


def test_every_good_image_once_in_its_split_and_every_bad_one_dead_lettered(
    sample_with_corrupt, tmp_path
):
    root, corrupt = sample_with_corrupt
    output = str(tmp_path / "shards")
    assert shard_job(root, output, "--max-error-fraction", "0.2") == 0

    metadata = _json(os.path.join(output, "metadata.json"))
    assert os.path.exists(os.path.join(output, "_SUCCESS"))
    label_map = metadata["label_map"]
    assert label_map == {"circle": 0, "cross": 1, "square": 2, "triangle": 3}

    good = _good_images(root)
    seen = {}
    for split in ("train", "validation", "test"):
        records = _read_split(output, split)
        assert len(records) == metadata["splits"][split]["num_records"]
        for key, parsed in records.items():
            assert assign_split(key, FRACTIONS) == split
            seen[key] = parsed
    assert set(seen) == set(good)
    for key, parsed in seen.items():
        source = _bytes(good[key])
        assert parsed[features.IMAGE_ENCODED].numpy() == source  # not resized: byte-identical
        label = key.split("/")[0]
        assert parsed[features.LABEL].numpy() == label_map[label]
        assert parsed[features.LABEL_TEXT].numpy().decode() == label
        expected_format = "png" if key.endswith(".png") else "jpeg"
        assert parsed[features.IMAGE_FORMAT].numpy().decode() == expected_format

    errors = [
        json.loads(line)
        for path in glob.glob(os.path.join(output, "errors", "*.jsonl"))
        for line in _text(path).splitlines()
    ]
    assert {e["uri"]: e["reason"] for e in errors} == corrupt
    assert metadata["num_errors"] == len(corrupt)
    assert metadata["num_inputs"] == len(good) + len(corrupt)

    for split in metadata["splits"].values():
        for shard in split["shards"]:
            data = _bytes(os.path.join(output, shard["file"]))
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
            assert len(data) == shard["num_bytes"]


def test_resize_reencodes_and_bounds_the_longest_side(sample_images, tmp_path):
    output = str(tmp_path / "shards")
    assert shard_job(sample_images, output, "--max-side", "32") == 0
    records = _read_split(output, "train")
    assert records
    for parsed in records.values():
        height, width = int(parsed[features.IMAGE_HEIGHT]), int(parsed[features.IMAGE_WIDTH])
        assert max(height, width) == 32
        decoded = tf.io.decode_image(parsed[features.IMAGE_ENCODED])
        assert decoded.shape[:2] == (height, width)
    assert ShardSet.open(output).folder.max_side == 32  # what the trainer sizes its cache by


def test_rerun_with_other_shard_count_replaces_output_cleanly(sample_images, tmp_path):
    output = tmp_path / "shards"
    assert shard_job(sample_images, str(output), "--num-shards", "3") == 0
    first = _json(output / "metadata.json")
    stale_staging = output / "_staging-deadbeef" / "train-00000-of-00001.tfrecord"
    stale_staging.parent.mkdir()
    stale_staging.write_bytes(b"left over by a killed run")

    assert shard_job(sample_images, str(output), "--num-shards", "2") == 0
    second = _json(output / "metadata.json")
    names = sorted(p.name for p in output.iterdir())
    shard_files = [n for n in names if n.endswith(".tfrecord")]
    assert all("-of-00002" in n for n in shard_files)
    assert len(shard_files) == 6
    assert names == sorted(
        [*shard_files, "_SUCCESS", "_config.json", "copies", "errors", "metadata.json"]
    )
    assert json.loads((output / "_config.json").read_text())["num_shards"] == 2
    assert first["num_records"] == second["num_records"]
    for split in ("train", "validation", "test"):
        assert first["splits"][split]["per_label"] == second["splits"][split]["per_label"]


def test_same_input_gives_byte_identical_shards(sample_images, tmp_path):
    digests = []
    for name in ("a", "b"):
        assert shard_job(sample_images, str(tmp_path / name)) == 0
        metadata = _json(tmp_path / name / "metadata.json")
        digests.append(
            [s["sha256"] for split in metadata["splits"].values() for s in split["shards"]]
        )
    assert digests[0] == digests[1]


def test_too_many_errors_fails_without_success_marker(sample_with_corrupt, tmp_path, capsys):
    root, corrupt = sample_with_corrupt
    output = tmp_path / "shards"
    code = shard_job(root, str(output), "--max-error-fraction", "0.01")
    assert code == 1
    err = capsys.readouterr().err
    assert "--max-error-fraction" in err and "Traceback" not in err
    assert not (output / "_SUCCESS").exists()
    metadata = _json(output / "metadata.json")
    assert metadata["status"].startswith("failed")
    assert metadata["num_errors"] == len(corrupt)


def test_missing_input_is_a_clear_error(tmp_path, capsys):
    code = shard_job(str(tmp_path / "nope"), str(tmp_path / "out"))
    assert code == 2
    assert "input path does not exist" in capsys.readouterr().err


def test_unknown_flag_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        shard_images.run(["--input", "x", "--output", "y", "--max-sid", "3"])
    assert info.value.code == 2
    assert "--max-sid" in capsys.readouterr().err


def test_manifest_input(sample_images, tmp_path):
    manifest = tmp_path / "manifest.jsonl"
    rows = [
        {
            "uri": os.path.join(sample_images, key),
            "label": key.split("/")[0],
            "split": "validation" if i % 2 else "train",
        }
        for i, key in enumerate(sorted(_good_images(sample_images)))
    ]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    output = tmp_path / "shards"
    assert shard_job(str(manifest), str(output)) == 0
    metadata = _json(output / "metadata.json")
    assert metadata["splits"]["train"]["num_records"] == (len(rows) + 1) // 2
    assert metadata["splits"]["validation"]["num_records"] == len(rows) // 2
    assert metadata["splits"]["test"]["num_records"] == 0


def test_a_label_without_train_images_is_warned_about(sample_images, tmp_path, caplog):
    """A class whose few images all fall into validation or test gets an output the model
    never learns; the job says which, with where its images went."""
    keys = sorted(_good_images(sample_images))
    rows = [
        {"uri": os.path.join(sample_images, key), "label": key.split("/")[0], "split": "train"}
        for key in keys
    ]
    rows[0].update(label="rare", split="test")
    rows[1].update(label="rare", split="validation")
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING", logger="beam_jobs.shard_images"):
        assert shard_job(str(manifest), str(tmp_path / "shards")) == 0
    labels = {row["label"] for row in rows}
    assert (
        f"1 of {len(labels)} labels have no train image, so the model cannot learn them: "
        "'rare' (validation 1, test 1)" in caplog.text
    )
    metadata = _json(tmp_path / "shards" / "metadata.json")
    assert shard_images.untrained_labels_warning(metadata).startswith("1 of")
    for split in metadata["splits"].values():  # every label in train: nothing to say
        split["per_label"] = dict.fromkeys(labels, 1)
    assert shard_images.untrained_labels_warning(metadata) == ""


def test_copies_across_labels_and_splits_are_reported_and_kept(sample_images, tmp_path, caplog):
    """A test image that is also a training image (under another name) inflates every
    score on the test split; one under two labels is a labelling conflict."""
    keys = sorted(_good_images(sample_images))
    rows = [
        {"uri": os.path.join(sample_images, key), "label": key.split("/")[0], "split": "train"}
        for key in keys
    ]
    rows.append({"uri": "copy.jpg", "label": "other", "split": "test"})
    pathlib.Path(tmp_path / "copy.jpg").write_bytes(_bytes(rows[0]["uri"]))
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    output = tmp_path / "shards"
    with caplog.at_level("WARNING", logger="beam_jobs.shard_images"):
        assert shard_job(str(manifest), str(output)) == 0
    metadata = _json(output / "metadata.json")
    assert metadata["num_records"] == len(rows)  # kept: copies are the user's data
    assert metadata["copies"] == {
        "groups": 1,
        "extra_copies": 1,
        "groups_across_labels": 1,
        "groups_across_splits": 1,
    }
    [line] = [
        json.loads(x)
        for f in sorted(output.glob("copies/*"))
        for x in f.read_text().split("\n")
        if x
    ]
    assert [i["key"] for i in line["images"]] == sorted([rows[0]["uri"], "copy.jpg"])
    assert {i["split"] for i in line["images"]} == {"train", "test"}
    assert "1 under two or more labels; 1 in two or more splits" in caplog.text

    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))  # rerun, no copy
    caplog.clear()
    with caplog.at_level("WARNING", logger="beam_jobs.shard_images"):
        assert shard_job(str(manifest), str(output)) == 0
    assert _json(output / "metadata.json")["copies"]["groups"] == 0
    assert all(f.read_text() == "" for f in output.glob("copies/*"))
    assert "stored more than once" not in caplog.text


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, "-m", "beam_jobs.shard_images", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def _shard_hashes(metadata: dict) -> dict:
    return {
        shard["file"]: shard["sha256"]
        for split in metadata["splits"].values()
        for shard in split["shards"]
    }


@pytest.mark.slow
def test_cli_default_runner_and_worker_processes_write_identical_shards(sample_images, tmp_path):
    """The documented command as a user runs it (the local runner picks its mode for 48
    images and this machine's cores), then with two worker processes, then on one thread:
    the same shards, byte for byte."""
    default, workers = tmp_path / "default", tmp_path / "workers"
    proc = _cli("--input", sample_images, "--output", str(default))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sharded 48/48 images" in proc.stdout
    assert (default / "_SUCCESS").exists()
    metadata = _json(default / "metadata.json")
    mode = choose_local_mode(48)
    assert metadata["runner"] == f"FnApiRunner ({mode.running_mode}, {mode.workers} worker(s))"
    assert metadata["params"]["input"] == sample_images

    one_thread = tmp_path / "one_thread"
    proc = _cli("--input", sample_images, "--output", str(one_thread), *IN_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _shard_hashes(_json(one_thread / "metadata.json")) == _shard_hashes(metadata)

    proc = _cli("--input", sample_images, "--output", str(workers), "--direct_num_workers=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    parallel = _json(workers / "metadata.json")
    assert parallel["runner"] == "FnApiRunner (multi_processing, 2 worker(s))"
    assert _shard_hashes(parallel) == _shard_hashes(metadata)
    # Progress on stdout, stderr only for problems (Airflow logs the job's stderr as
    # warnings); the workers' notices about pickled __main__ sessions are not problems.
    assert "INFO beam_jobs.plan: planned 48 inputs" in proc.stdout
    assert proc.stderr == "", proc.stderr[-3000:]
    assert not [p for p in workers.rglob("*") if p.name.startswith("_staging")]


@pytest.mark.slow
def test_help_documents_every_flag():
    proc = subprocess.run(
        [sys.executable, "-m", "beam_jobs.shard_images", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0
    for flag in (
        "--input",
        "--output",
        "--max-side",
        "--splits",
        "--target-shard-mb",
        "--num-shards",
        "--min-shards",
        "--compression",
        "--max-error-fraction",
        "--max-pixels",
        "--label-map",
        "--runner",
    ):
        assert flag in proc.stdout


def _written_bytes() -> int:
    fields = dict(
        line.split(": ") for line in pathlib.Path("/proc/self/io").read_text().splitlines()
    )
    return int(fields["wchar"])  # what this process handed to write() and its kin


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="Linux's per-process I/O counters")
def test_each_shard_byte_is_written_once_when_shards_are_units_of_work(tmp_path):
    """A shard read as one unit is its fragment renamed (issue #28: every byte was written
    to a fragment, then again into the shard)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    root = tmp_path / "images"
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(30):  # noise: ~30 KB each, so the shards dwarf the job's small files
            pixels = rng.integers(0, 256, (160, 160, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i}.jpg", quality=95)
    output = tmp_path / "shards"
    before = _written_bytes()
    assert shard_job(root, output, "--num-shards", "2") == 0
    written = _written_bytes() - before
    shard_bytes = sum(p.stat().st_size for p in output.glob("*.tfrecord"))
    assert shard_bytes > 1_000_000
    assert written <= 1.1 * shard_bytes, (written, shard_bytes)


def test_the_driver_holds_no_planned_item_while_the_pipeline_runs(
    sample_images, tmp_path, monkeypatch
):
    """The pipeline reads the staged plan file; the driver keeps an outline (counts, label
    map, shard counts), not an object per image: at 200,000 images those were 130 MB of
    its memory through the whole run (issue #28)."""
    import gc

    from beam_jobs.plan import WorkItem

    run_pipeline, held = shard_images._run_pipeline, []

    def counting(config, options, plan, staging, staged):
        gc.collect()
        held.append(sum(1 for o in gc.get_objects() if isinstance(o, WorkItem)))
        held.append(plan.num_inputs)
        return run_pipeline(config, options, plan, staging, staged)

    monkeypatch.setattr(shard_images, "_run_pipeline", counting)
    assert shard_job(sample_images, tmp_path / "out") == 0
    assert held == [0, 48]
    metadata = _json(tmp_path / "out" / "metadata.json")
    assert metadata["num_inputs"] == 48 and metadata["num_classes"] == 4
