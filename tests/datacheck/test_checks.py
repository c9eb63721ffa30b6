"""The data checks (issue #27 point 2): each anomaly kind triggers once and only once,
identical data triggers none, and the stage's CLI and DAG task say so in one line each."""

import json
import os
import random
from dataclasses import replace
from pathlib import Path

import pytest

from datacheck.checks import KINDS, compare, js_distance, linf_distance
from datacheck.config import DataCheckConfig
from shardspec.statistics import DatasetStatistics, ImageStatistics

CONFIG = DataCheckConfig(shards="unused")


def _stats(per_label=None, sizes=None, errors=0, seed=0) -> DatasetStatistics:
    per_label = per_label or {"cat": 300, "dog": 300, "fox": 200}
    rng = random.Random(seed)
    images = ImageStatistics()
    for _ in range(sum(per_label.values())):
        w, h = sizes() if sizes else (rng.randint(200, 700), rng.randint(200, 700))
        images.add(
            width=w,
            height=h,
            stored_bytes=w * h // 8,
            source_format="JPEG",
            stored_format="jpeg",
            reencoded=False,
        )
    stored = sum(per_label.values())
    return DatasetStatistics(
        version=1,
        images=images,
        per_label=per_label,
        per_split={"train": stored},
        num_inputs=stored + errors,
        errors_by_reason={"decode_failed": errors} if errors else {},
        exact_duplicate_groups=0,
        near_duplicate_groups=0,
        near_duplicate_groups_across_splits=0,
        held_out_with_near_copy_in_train=0,
    )


BASE = _stats()

# One change of the data per anomaly kind, each big enough for that kind alone.
CHANGES = {
    "labels_added": _stats({"cat": 300, "dog": 300, "fox": 200, "owl": 20}, seed=1),
    "labels_gone": _stats({"cat": 300, "dog": 300, "fox": 200, "owl": 20}, seed=1),  # reversed
    "label_shift": _stats({"cat": 420, "dog": 200, "fox": 180}, seed=2),
    "size_drift": _stats(sizes=lambda: (48, 48), seed=3),
    "error_share": _stats(errors=120, seed=4),
    "fewer_images": _stats({"cat": 180, "dog": 180, "fox": 120}, seed=5),
}


def test_identical_data_triggers_nothing():
    assert compare(BASE, BASE, CONFIG) == []
    assert compare(BASE, _stats(seed=9), CONFIG) == []  # another draw of the same data


@pytest.mark.parametrize("kind", KINDS)
def test_each_anomaly_kind_triggers_once_and_alone(kind):
    current, baseline = CHANGES[kind], BASE
    if kind == "labels_gone":
        current, baseline = BASE, CHANGES[kind]
    found = compare(current, baseline, CONFIG)
    assert [a.kind for a in found] == [kind], [a.message for a in found]
    assert found[0].message and "\n" not in found[0].message


def test_many_labels_gone_are_one_anomaly():
    many = _stats({f"c{i}": 50 for i in range(12)})
    fewer = _stats({"c0": 300, "c1": 300})
    kinds = [
        a.kind for a in compare(fewer, many, replace(CONFIG, max_label_shift=1, max_image_drop=1))
    ]
    assert kinds == ["labels_gone"]


def test_thresholds_are_the_limits():
    shift = compare(CHANGES["label_shift"], BASE, CONFIG)[0].value
    assert compare(CHANGES["label_shift"], BASE, replace(CONFIG, max_label_shift=shift)) == []


def test_distances():
    assert linf_distance({"a": 0.5, "b": 0.5}, {"a": 0.2, "c": 0.8}) == pytest.approx(0.8)
    assert js_distance([1, 0], [0, 1]) == pytest.approx(1.0)
    assert js_distance([3, 1], [3, 1]) == 0.0


def _shard_folder(tmp_path, name, stats: DatasetStatistics):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "metadata.json").write_text(json.dumps({"statistics": stats.to_json()}))
    return str(folder)


def test_the_cli_warns_fails_and_reports(tmp_path, capsys):
    from orchestration import check_data

    base = _shard_folder(tmp_path, "base", BASE)
    same = _shard_folder(tmp_path, "same", _stats(seed=9))
    moved = _shard_folder(tmp_path, "moved", CHANGES["size_drift"])
    assert check_data.main(["--shards", same, "--baseline", base]) == 0
    assert capsys.readouterr().out.startswith(f"data: no anomalies against {base}")

    report = tmp_path / "report"
    args = ["--shards", moved, "--baseline", base, "--report", str(report)]
    assert check_data.main(args) == 0  # warn, the default
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: data check size_drift:")
    verdict = json.loads((report / "data_check.json").read_text())
    assert verdict["status"] == "anomalies" and verdict["baseline_statistics"]
    assert (report / "data_check.png").read_bytes()[:4] == b"\x89PNG"

    assert check_data.main([*args, "--data-checks", "fail"]) == 4
    assert capsys.readouterr().err.startswith("error: data check size_drift:")
    assert check_data.main(["--shards", moved, "--baseline", base, "--data-checks", "off"]) == 0


def test_nothing_to_compare_is_said_once_and_a_bad_folder_is_one_line(tmp_path, capsys):
    from orchestration import check_data

    shards = _shard_folder(tmp_path, "s", BASE)
    assert check_data.main(["--shards", shards]) == 0
    assert capsys.readouterr().out == "data: nothing to compare with (no baseline given)\n"
    assert check_data.main(["--shards", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no metadata.json" in err
    assert check_data.main(["--shards", shards, "--baseline", str(tmp_path)]) == 2
    assert "neither a shard folder" in capsys.readouterr().err


def test_the_baseline_is_the_shards_the_serving_model_was_trained_on(tmp_path):
    from orchestration import check_data
    from orchestration.publish import publish_model

    home = tmp_path / "models" / "shapes"
    shard_v1 = _shard_folder(tmp_path, "shards_v1", BASE)
    shards, note = check_data.trained_on_shards(str(home))
    assert shards is None and note == f"no model published in {home} yet"
    model = tmp_path / "run" / "train" / "model"
    model.mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"x")
    publish_model(
        str(model),
        str(tmp_path / "models"),
        "shapes",
        run_id="r1",
        evaluation={"shards_dir": shard_v1},
    )
    assert check_data.trained_on_shards(str(home)) == (shard_v1, "version 1")
    assert check_data.resolve_baseline(str(home)) == (shard_v1, "version 1")
    # Published by hand, without an evaluation: the training run's config names its data.
    (tmp_path / "run" / "train" / "config.json").write_text(json.dumps({"data": shard_v1}))
    (model / "saved_model.pb").write_bytes(b"y")
    publish_model(str(model), str(tmp_path / "models"), "shapes", run_id="r2")
    assert check_data.trained_on_shards(str(home)) == (shard_v1, "version 2")


def test_the_dag_task_compares_with_the_serving_models_shards(tmp_path):
    """check_data's body, as the DAG calls it: the baseline through LATEST's publish
    record, warn returns the verdict without the statistics (the XCom), fail raises with
    one clause per anomaly, and the report lands in the run's data_check/."""
    from orchestration.check_data import DataChecksFailed, check_data_task
    from orchestration.publish import publish_model
    from orchestration.runs import RunPaths

    paths = RunPaths.for_run(str(tmp_path / "out"), "manual__2026-12-05T00:00:00+00:00")
    params = {"model_root": str(tmp_path / "models"), "model_name": "shapes"}
    os.makedirs(paths.shards)
    Path(paths.shards, "metadata.json").write_text(
        json.dumps({"statistics": CHANGES["fewer_images"].to_json()})
    )
    logged = []
    first = check_data_task(params, paths, log=logged.append)
    assert first["status"] == "no_baseline" and logged == [first["line"]]
    assert "no model published" in first["line"]

    model = tmp_path / "old" / "train" / "model"
    model.mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"x")
    old_shards = _shard_folder(tmp_path, "old_shards", BASE)
    publish_model(str(model), params["model_root"], "shapes", run_id="old",
                  evaluation={"shards_dir": old_shards})  # fmt: skip
    logged.clear()
    warned = check_data_task(params, paths, log=logged.append)
    assert warned["status"] == "anomalies" and "statistics" not in warned
    assert "baseline_statistics" not in warned
    assert logged[0].startswith("WARNING data check fewer_images: 480 images stored, 40% fewer")
    assert Path(paths.data_check, "data_check.png").exists()
    with pytest.raises(DataChecksFailed, match=r"^data checks failed .*fewer_images: 480"):
        check_data_task({**params, "data_checks": "fail"}, paths, log=logged.append)
    assert check_data_task({**params, "data_checks": "off"}, paths)["status"] == "off"
