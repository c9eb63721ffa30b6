import json
import random
import threading
import time

import pytest

from orchestration import publish as publish_module
from orchestration.publish import LATEST, latest_version, publish_model
from training.model_files import EXTRA_DIR, METADATA_FILE, WEIGHTS_FINGERPRINT


@pytest.fixture
def model_dir(tmp_path):
    model = tmp_path / "export"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"graph")
    (model / "variables" / "variables.index").write_bytes(b"index")
    return str(model)


def test_versions_increase_and_latest_follows(model_dir, tmp_path):
    root = str(tmp_path / "models")
    first = publish_model(model_dir, root, "shapes", run_id="run-1")
    second = publish_model(model_dir, root, "shapes", run_id="run-2")
    assert (first["version"], second["version"]) == (1, 2)
    assert latest_version(root, "shapes") == 2
    published = tmp_path / "models" / "shapes" / "2"
    assert (published / "saved_model.pb").read_bytes() == b"graph"
    assert (published / "variables" / "variables.index").read_bytes() == b"index"
    assert not [p for p in (tmp_path / "models" / "shapes").iterdir() if p.name.startswith(".")]


def test_publishing_the_same_run_again_reuses_its_version(model_dir, tmp_path):
    root = str(tmp_path / "models")
    first = publish_model(model_dir, root, "m", run_id="run-1")
    again = publish_model(model_dir, root, "m", run_id="run-1")
    assert again["version"] == first["version"] and again["reused"]
    assert sorted(p.name for p in (tmp_path / "models" / "m").iterdir()) == ["1", LATEST]


def test_a_run_whose_model_changed_publishes_it_as_a_new_version(model_dir, tmp_path):
    """Its shards re-made and trained anew, a run has another model: returning the version
    of its old one would publish nothing and report the old model as this run's."""
    root = str(tmp_path / "models")
    assert publish_model(model_dir, root, "m", run_id="run-1")["version"] == 1
    (tmp_path / "export" / "variables" / "variables.index").write_bytes(b"retrained")
    second = publish_model(model_dir, root, "m", run_id="run-1")
    assert (second["version"], second["reused"]) == (2, False)
    assert latest_version(root, "m") == 2
    assert publish_model(model_dir, root, "m", run_id="run-1")["version"] == 2  # a retry


def test_one_checkpoint_exported_twice_is_one_model(model_dir, tmp_path):
    """A cleared `train` task re-exports a finished run: other graph bytes, same weights."""
    extra = tmp_path / "export" / EXTRA_DIR
    extra.mkdir()
    (extra / METADATA_FILE).write_text(json.dumps({WEIGHTS_FINGERPRINT: "53210f1f1dc023ce"}))
    root = str(tmp_path / "models")
    first = publish_model(model_dir, root, "m", run_id="run-1")
    (tmp_path / "export" / "saved_model.pb").write_bytes(b"graph traced again")
    again = publish_model(model_dir, root, "m", run_id="run-1")
    assert (again["version"], again["reused"]) == (first["version"], True)


def test_concurrent_publishers_get_unique_versions(model_dir, tmp_path, monkeypatch):
    root = str(tmp_path / "models")
    read_latest = publish_module.latest_version

    def slow_read(*args):
        # Widen the window between reading LATEST and replacing it, where an
        # unlocked publisher loses a race to a newer one and moves LATEST back.
        version = read_latest(*args)
        time.sleep(random.uniform(0, 0.02))
        return version

    monkeypatch.setattr(publish_module, "latest_version", slow_read)
    results, errors = [], []

    def publish(i):
        try:
            results.append(publish_model(model_dir, root, "m", run_id=f"run-{i}")["version"])
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(results) == list(range(1, 13))
    assert latest_version(root, "m") == 12
    for version in results:
        assert (tmp_path / "models" / "m" / str(version) / "saved_model.pb").exists()


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "", ".hidden", "x" * 64, "a\nb"])
def test_a_model_name_that_is_not_a_plain_name_is_refused_before_writing(model_dir, tmp_path, name):
    from orchestration.publish import PublishError

    with pytest.raises(PublishError, match="not a plain name"):
        publish_model(model_dir, str(tmp_path / "models"), name, run_id="r")
    assert not (tmp_path / "x").exists()
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").rglob("*.pb"))


def test_a_publisher_killed_mid_copy_leaves_nothing_after_the_next_publish(model_dir, tmp_path):
    import time

    home = tmp_path / "models" / "shapes"
    killed = home / f".staging-{int(time.time()) - 7 * 3600}-deadbeef"  # hours old
    legacy = home / ".staging-0123456789ab"  # named by an older release
    running = home / f".staging-{int(time.time())}-cafecafe"  # another publisher, copying now
    for folder in (killed, legacy, running):
        (folder / "variables").mkdir(parents=True)
    publish_model(model_dir, str(tmp_path / "models"), "shapes", run_id="run-1")
    assert not killed.exists() and not legacy.exists()
    assert running.exists()


def test_publish_cli_publishes_once_per_run_id_and_refuses_bad_names(model_dir, tmp_path, capsys):
    from orchestration.publish import main

    root = str(tmp_path / "models")
    args = ["--model", model_dir, "--model-root", root, "--model-name", "shapes"]
    assert main([*args, "--run-id", "r1"]) == 0
    assert main([*args, "--run-id", "r1"]) == 0
    out = capsys.readouterr().out
    assert "published version 1" in out and "already published as version 1" in out
    bad = ["--model", model_dir, "--model-root", root, "--model-name", "../x", "--run-id", "r"]
    assert main(bad) == 2
    assert "not a plain name" in capsys.readouterr().err


def _evaluated(model_dir: str, blessed: bool | None) -> dict:
    verdict = None
    if blessed is not None:
        verdict = {
            "blessed": blessed,
            "compared": True,
            "reasons": [] if blessed else ["accuracy 0.500 is 0.400 below the serving model's"],
            "accuracy": 0.9 if blessed else 0.5,
            "baseline_accuracy": 0.9,
            "baseline_version": 1,
        }
    return {
        "model_dir": model_dir,
        "accuracy": verdict["accuracy"] if verdict else 0.9,
        "baseline": {"version": 1, "accuracy": 0.9} if verdict else None,
        "verdict": verdict,
    }


def test_a_candidate_not_blessed_is_not_published_and_latest_stays(model_dir, tmp_path):
    root = str(tmp_path / "models")
    publish_model(model_dir, root, "m", run_id="run-1")
    with pytest.raises(publish_module.NotBlessed, match=r"^not blessed: accuracy 0\.500 is 0\.400"):
        publish_module.publish_run(
            _evaluated(model_dir, False), model_root=root, model_name="m", run_id="run-2"
        )
    assert latest_version(root, "m") == 1
    assert sorted(p.name for p in (tmp_path / "models" / "m").iterdir()) == ["1", LATEST]


def test_a_blessed_candidate_is_published_with_what_a_consumer_wants_to_know(model_dir, tmp_path):
    root = str(tmp_path / "models")
    publish_model(model_dir, root, "m", run_id="run-1")
    published = publish_module.publish_run(
        _evaluated(model_dir, True), model_root=root, model_name="m", run_id="run-2"
    )
    assert latest_version(root, "m") == 2
    assert {k: published[k] for k in ("version", "run_id", "accuracy", "baseline_version")} == {
        "version": 2,
        "run_id": "run-2",
        "accuracy": 0.9,
        "baseline_version": 1,
    }
    assert published["verdict"].startswith("blessed: 0.900 vs the serving model's 0.900")
    record = json.loads((tmp_path / "models/m/2" / publish_module.PUBLISH_RECORD).read_text())
    assert record["evaluation"]["verdict"]["blessed"] is True
    assert record["evaluation"]["baseline"]["version"] == 1


def test_rollback_points_latest_at_an_earlier_version_and_refuses_one_not_there(
    model_dir, tmp_path, capsys
):
    root = str(tmp_path / "models")
    for run in ("run-1", "run-2", "run-3"):
        publish_model(model_dir, root, "m", run_id=run)
    argv = ["--model-root", root, "--model-name", "m", "--rollback"]
    assert publish_module.main([*argv, "2"]) == 0
    assert capsys.readouterr().out == "m: LATEST 3 -> 2\n"
    assert latest_version(root, "m") == 2
    assert publish_module.main([*argv, "7"]) == 2
    assert capsys.readouterr().err == (f"error: {root}/m has no version 7 (published: 1, 2, 3)\n")
    assert latest_version(root, "m") == 2
    # A new publication still takes the next number and moves LATEST forward.
    assert publish_model(model_dir, root, "m", run_id="run-4")["version"] == 4
    assert latest_version(root, "m") == 4
