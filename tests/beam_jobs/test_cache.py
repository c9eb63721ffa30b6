"""Stage caching by content: a run whose inputs and parameters did not change reuses a
finished output copy-free, and never a partial, changed or replaced one."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from beam_jobs.validate import ShardValidationError, validate_shards
from tests.jobs import IN_PROCESS, shard_job
from training.shards import ShardError, ShardSet

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def images(sample_images, tmp_path):
    return shutil.copytree(sample_images, tmp_path / "images")


def _shard(images, output, cache, *flags, capsys=None):
    code = shard_job(images, output, "--cache-dir", str(cache), *flags)
    assert code == 0
    return json.loads((Path(output) / "metadata.json").read_text())


def _shard_files(folder):
    return sorted(p.name for p in Path(folder).glob("*.tfrecord"))


def test_unchanged_inputs_reuse_the_finished_output_copy_free(images, tmp_path, capsys):
    cache = tmp_path / "cache"
    first = _shard(images, tmp_path / "run1", cache)
    capsys.readouterr()
    second = _shard(images, tmp_path / "run2", cache)
    assert "reused the 48 records in" in capsys.readouterr().out
    assert second["location"] == str(tmp_path / "run1")
    assert second["fingerprint"] == first["fingerprint"]
    assert _shard_files(tmp_path / "run2") == []  # nothing copied
    assert (tmp_path / "run2" / "_SUCCESS").exists()
    opened = ShardSet.open(str(tmp_path / "run2"))
    assert all(f.startswith(str(tmp_path / "run1")) for f in opened.files("train"))
    assert opened.num_records("train") == first["splits"]["train"]["num_records"]
    for verify in (False, True):
        summary = validate_shards(
            str(tmp_path / "run2"), max_error_fraction=0.05, verify_records=verify
        )
        assert summary["reused_from"] == str(tmp_path / "run1")


def test_a_changed_image_or_parameter_or_force_shards_again(images, tmp_path):
    cache = tmp_path / "cache"
    first = _shard(images, tmp_path / "run1", cache)
    victim = sorted(Path(images).glob("circle/*"))[0]
    victim.write_bytes(victim.read_bytes() + b"\0")  # same name, new bytes
    changed = _shard(images, tmp_path / "run2", cache)
    assert "location" not in changed and changed["fingerprint"] != first["fingerprint"]
    other_param = _shard(images, tmp_path / "run3", cache, "--max-side", "16")
    assert "location" not in other_param
    forced = _shard(images, tmp_path / "run4", cache, "--force-reshard")
    assert "location" not in forced and _shard_files(tmp_path / "run4")


def test_a_partial_output_is_never_reused(images, tmp_path):
    cache = tmp_path / "cache"
    _shard(images, tmp_path / "run1", cache)
    (tmp_path / "run1" / "_SUCCESS").unlink()  # as a killed rerun leaves it
    second = _shard(images, tmp_path / "run2", cache)
    assert "location" not in second and _shard_files(tmp_path / "run2")


def test_an_output_whose_shards_changed_since_is_not_reused(images, tmp_path):
    """The cache holds a folder to the readers' own check: a shard truncated after the job
    wrote it (its _SUCCESS still there) makes the next run shard again."""
    cache = tmp_path / "cache"
    _shard(images, tmp_path / "run1", cache)
    victim = tmp_path / "run1" / _shard_files(tmp_path / "run1")[0]
    victim.write_bytes(victim.read_bytes()[:-10])
    second = _shard(images, tmp_path / "run2", cache)
    assert "location" not in second and _shard_files(tmp_path / "run2")


def test_a_pointer_to_replaced_shards_is_refused_by_the_readers(images, tmp_path, sample_images):
    cache = tmp_path / "cache"
    _shard(images, tmp_path / "run1", cache)
    _shard(images, tmp_path / "run2", cache)  # points at run1
    other = tmp_path / "other"
    shutil.copytree(sample_images, other)
    shutil.rmtree(other / "circle")
    _shard(other, tmp_path / "run1", tmp_path / "cache2")  # run1 now holds other shards
    with pytest.raises(ShardError, match="replaced or removed since"):
        ShardSet.open(str(tmp_path / "run2"))
    with pytest.raises(ShardValidationError, match="replaced or removed since"):
        validate_shards(str(tmp_path / "run2"), max_error_fraction=0.05, verify_records=False)


@pytest.mark.slow
def test_concurrent_runs_with_one_fingerprint_both_complete_and_the_index_stays_usable(
    images, tmp_path
):
    cache = tmp_path / "cache"
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "beam_jobs.shard_images",
                "--input",
                str(images),
                "--output",
                str(tmp_path / name),
                "--cache-dir",
                str(cache),
                *IN_PROCESS,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        for name in ("a", "b")
    ]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-2000:]
    for name in ("a", "b"):
        ShardSet.open(str(tmp_path / name))  # each complete (or pointing at a complete one)
    third = _shard(images, tmp_path / "c", cache)
    assert third["location"] in (str(tmp_path / "a"), str(tmp_path / "b"))


def test_a_reused_output_must_fit_this_runs_error_budget(tmp_path, sample_with_corrupt, capsys):
    images, corrupt = sample_with_corrupt
    cache = tmp_path / "cache"
    first = _shard(images, tmp_path / "run1", cache, "--max-error-fraction", "0.5")
    assert first["num_errors"] == len(corrupt)
    code = shard_job(
        images, tmp_path / "run2", "--cache-dir", str(cache), "--max-error-fraction", "0.01"
    )
    assert code == 1
    assert "sharded before with" in capsys.readouterr().err
    assert not (tmp_path / "run2" / "_SUCCESS").exists()


def test_a_cache_hit_over_local_paths_imports_no_beam(images, tmp_path):
    """Beam's import was two thirds of a reused run (1.1 of 1.7 s, issue #28): a run whose
    flags only name the local runner (as the DAG's Beam operator passes them) finds and
    reuses its output without it; a miss, or another Beam flag, still imports it."""
    cache = tmp_path / "cache"
    # As Airflow's Beam operator passes them (providers' beam_options_to_args).
    flags = ["--runner=DirectRunner", '--labels={"airflow-version": "v3-1-0"}']
    probe = (
        "import sys; from beam_jobs.shard_images import run; code = run(sys.argv[1:]); "
        "print(code, 'apache_beam' in sys.modules)"
    )

    def beam_imported(output, *more):
        argv = ["--input", str(images), "--output", str(output), "--cache-dir", str(cache)]
        done = subprocess.run(
            [sys.executable, "-c", probe, *argv, *flags, *more],
            capture_output=True, text=True, cwd=REPO, check=True,
        )  # fmt: skip
        code, imported = done.stdout.split()[-2:]
        assert code == "0", done.stderr
        return imported == "True"

    assert beam_imported(tmp_path / "run1")  # a miss runs the job
    assert not beam_imported(tmp_path / "run2")
    assert json.loads((tmp_path / "run2" / "metadata.json").read_text())["location"] == str(
        tmp_path / "run1"
    )
    assert beam_imported(tmp_path / "run3", "--direct_num_workers=1")  # parsed by Beam


def test_a_miss_imports_beam_once_the_planned_items_are_gone(images, tmp_path):
    """The driver's peak memory (issue #28): at 200,000 images the planned items are
    150 MB and Beam's import another 60; the pipeline reads the staged plan, so the driver
    drops the plan before it imports Beam, and never holds both."""
    probe = (
        "import gc, sys\n"
        "from beam_jobs.plan import Plan\n"
        "from beam_jobs.shard_images import run\n"
        "plans = []\n"
        "class Watch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'apache_beam' and not plans:\n"
        "            plans.append(sum(isinstance(o, Plan) for o in gc.get_objects()))\n"
        "sys.meta_path.insert(0, Watch())\n"
        "code = run(sys.argv[1:])\n"
        "print(code, plans)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "--input", str(images), "--output", str(tmp_path / "o")],
        capture_output=True, text=True, cwd=REPO, check=True,
    )  # fmt: skip
    assert done.stdout.split("\n")[-2] == "0 [0]", done.stdout[-2000:] + done.stderr[-2000:]
