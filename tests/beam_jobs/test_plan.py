import json
import os
from collections import Counter

import pytest

from beam_jobs import plan as plan_module
from beam_jobs.config import ShardConfig
from beam_jobs.plan import InputError, build_plan


def _touch(path, data=b"x" * 100):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def _config(tmp_path, input_uri, **kwargs):
    return ShardConfig(input=str(input_uri), output=str(tmp_path / "out"), **kwargs)


def test_folder_labels_are_sorted_names_and_odd_files_are_handled(tmp_path):
    root = tmp_path / "images"
    for label in ("zebra", "ant", "moth"):
        _touch(str(root / label / "a.jpg"))
    _touch(str(root / "moth" / "nested" / "b.jpg"))
    _touch(str(root / "loose.jpg"))  # not in a label folder
    _touch(str(root / "ant" / ".DS_Store"))  # hidden: ignored
    plan = build_plan(_config(tmp_path, root))
    assert plan.label_map == {"ant": 0, "moth": 1, "zebra": 2}
    by_key = {item.key: item for item in plan.items}
    assert set(by_key) == {
        "zebra/a.jpg",
        "ant/a.jpg",
        "moth/a.jpg",
        "moth/nested/b.jpg",
        "loose.jpg",
    }
    assert by_key["loose.jpg"].reject == "no_label_dir"
    assert by_key["moth/nested/b.jpg"].label_id == 1
    assert sum(1 for item in plan.items if item.reject) == 1


def test_one_class_folder_is_refused_unless_the_user_means_it(tmp_path, caplog):
    """--input one level too high makes one label of everything: valid shards, but no
    classifier trains on them, so the job refuses before it runs (one line: the label it
    found, the likely fix, the flag that shards it anyway)."""
    root = tmp_path / "data"
    for name in ("cat/1.jpg", "dog/1.jpg"):
        _touch(str(root / "images" / name))
    with pytest.raises(InputError) as refused:
        build_plan(_config(tmp_path, root))
    message = str(refused.value)
    assert f"{root} holds one class folder, 'images': a classifier needs 2" in message
    assert "one level above the class folders" in message and "--allow-one-class" in message
    assert "\n" not in message

    with caplog.at_level("WARNING", logger="beam_jobs.plan"):
        plan = build_plan(_config(tmp_path, root, allow_one_class=True))
    assert plan.label_map == {"images": 0}
    assert "holds one class folder, 'images'" in caplog.text

    caplog.clear()
    with caplog.at_level("WARNING", logger="beam_jobs.plan"):
        build_plan(_config(tmp_path, root / "images"))
    assert caplog.text == ""


def test_labels_that_differ_only_in_case_or_spacing_are_warned_about(tmp_path, caplog):
    """Folders gathered by two people ('Cat', 'cat', 'golden_retriever', 'Golden Retriever')
    are most likely one class each pair; kept apart, as Linux keeps them, with a warning."""
    root = tmp_path / "images"
    for name in ("Cat", "cat", "dog", "golden_retriever", "Golden Retriever", "catdog"):
        _touch(str(root / name / "1.jpg"))
    with caplog.at_level("WARNING", logger="beam_jobs.plan"):
        plan = build_plan(_config(tmp_path, root))
    assert len(plan.label_map) == 6
    assert (
        "labels that differ only in case, spaces, '-' or '_' are separate classes: "
        "'Cat' and 'cat'; 'Golden Retriever' and 'golden_retriever'. If each pair is one "
        "class, give its images one label" in caplog.text
    )
    label_map = tmp_path / "labels.json"  # named on purpose: nothing to say
    label_map.write_text(json.dumps({"Cat": 0, "cat": 1}))
    caplog.clear()
    with caplog.at_level("WARNING", logger="beam_jobs.plan"):
        build_plan(_config(tmp_path, root, label_map=str(label_map)))
    assert "differ only in case" not in caplog.text
    assert plan_module.similar_labels_warning({"cat": 0, "dog": 1, "c-a-t": 2}).startswith(
        "labels that differ only"
    )
    assert plan_module.similar_labels_warning({"cat": 0, "dog": 1, "cats": 2}) == ""


def _train_only_plan(tmp_path, images: int, classes: int, num_shards: int, parallelism: int = 2):
    """A plan of `images` files in `classes` folders, all in the train split."""
    root = tmp_path / "images"
    for i in range(images):
        _touch(str(root / f"c{i % classes}" / f"{i:03d}.png"))
    train_only = {"train": 1.0, "validation": 0.0, "test": 0.0}
    config = _config(tmp_path, root, num_shards=num_shards, split_fractions=train_only)
    return build_plan(config, parallelism)


def test_shards_are_balanced_and_bounded(tmp_path):
    plan = _train_only_plan(tmp_path, images=103, classes=3, num_shards=4)
    assert plan.shard_counts == {"train": 4, "validation": 0, "test": 0}
    sizes = Counter(item.shard for item in plan.items)
    assert sorted(sizes.values()) == [25, 26, 26, 26]


def test_chunks_are_consecutive_runs_of_a_shard_in_key_order(tmp_path, monkeypatch):
    """...of equal size (within one), so no worker gets every shard's short tail."""
    monkeypatch.setattr(plan_module, "CHUNK_IMAGES", 4)
    plan = _train_only_plan(tmp_path, images=34, classes=2, num_shards=2)
    for shard in (0, 1):
        members = sorted((i for i in plan.items if i.shard == shard), key=lambda i: i.key)
        assert len(members) == 17
        chunks = [i.chunk for i in members]
        assert chunks == sorted(chunks)  # consecutive runs in key order
        assert sorted(Counter(chunks).values()) == [3, 3, 3, 4, 4]  # not 4, 4, 4, 4 and 1


def test_planning_runs_with_the_cycle_collector_paused_and_restores_it(tmp_path, monkeypatch):
    """At 200,000 images the collector, set off by the planner's allocations and walking
    every object made so far, was a third of the planning time."""
    import gc

    for i in range(20):
        _touch(tmp_path / "in" / ("a" if i % 2 else "b") / f"{i}.png")
    seen = []
    walk = plan_module.fs.walk
    monkeypatch.setattr(
        plan_module.fs, "walk", lambda root: seen.append(gc.isenabled()) or walk(root)
    )
    assert gc.isenabled()
    plan = build_plan(_config(tmp_path, tmp_path / "in"))
    assert seen == [False] and gc.isenabled()
    assert len(plan.items) == 20
    monkeypatch.setattr(plan_module.fs, "walk", lambda root: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        build_plan(_config(tmp_path, tmp_path / "in"))
    assert gc.isenabled()


def test_shard_count_follows_data_size_with_a_minimum(tmp_path):
    root = tmp_path / "images"
    for i in range(40):
        _touch(str(root / "a" / f"{i}.jpg"), b"x" * 100_000)  # 4 MB in all
    fractions = {"train": 1.0, "validation": 0.0, "test": 0.0}
    small = build_plan(
        _config(tmp_path, root, target_shard_mb=1, split_fractions=fractions, allow_one_class=True)
    )
    assert small.shard_counts["train"] == 4
    big = build_plan(
        _config(
            tmp_path,
            root,
            target_shard_mb=100,
            min_shards=3,
            split_fractions=fractions,
            allow_one_class=True,
        )
    )
    assert big.shard_counts["train"] == 3


def test_csv_manifest_with_relative_uris_and_split_override(tmp_path):
    _touch(str(tmp_path / "data" / "x.jpg"))
    _touch(str(tmp_path / "data" / "y.jpg"))
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(
        "uri,label,split\ndata/x.jpg,cat,test\ndata/y.jpg,dog,\n,dog,\ndata/z.jpg,dog,holdout\n"
    )
    plan = build_plan(_config(tmp_path, manifest))
    items = {item.key: item for item in plan.items}
    assert items["data/x.jpg"].uri == str(tmp_path / "data" / "x.jpg")
    assert items["data/x.jpg"].split == "test"
    assert items["data/y.jpg"].split in {"train", "validation", "test"}
    assert items["data/z.jpg"].reject == "bad_split"
    assert sum(1 for i in plan.items if i.reject == "bad_manifest_row") == 1
    assert plan.label_map == {"cat": 0, "dog": 1}


def test_a_manifests_split_column_in_any_case_and_the_usual_short_names(tmp_path):
    """Spreadsheets and other tools write `Train`, `VAL`, `valid`, `dev`: the split they
    mean, not a dead letter; a split that is none of them still is one."""
    cells = ["Train", " TEST ", "VAL", "valid", "dev", "Validation", "training", "holdout"]
    for name in cells:
        _touch(str(tmp_path / "data" / f"{name.strip()}.jpg"))
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(
        "uri,label,split\n"
        + "".join(f"data/{name.strip()}.jpg,{i % 2},{name}\n" for i, name in enumerate(cells))
    )
    items = {item.key: item for item in build_plan(_config(tmp_path, manifest)).items}
    assert {key: item.split or item.reject for key, item in items.items()} == {
        "data/Train.jpg": "train",
        "data/TEST.jpg": "test",
        "data/VAL.jpg": "validation",
        "data/valid.jpg": "validation",
        "data/dev.jpg": "validation",
        "data/Validation.jpg": "validation",
        "data/training.jpg": "train",
        "data/holdout.jpg": "bad_split",
    }


@pytest.mark.parametrize(
    "header", ["uri,label,split", "uri;label;split", "uri\tlabel\tsplit", " URI , Label ,Split"]
)
def test_csv_manifests_as_spreadsheets_write_them(tmp_path, header):
    """Commas, semicolons (Excel in much of Europe) or tabs, column names in any case
    with spaces around, CRLF line ends and blank lines: the same plan."""
    for name in ("a.png", "b;c.png"):
        _touch(str(tmp_path / name))
    delimiter = next(d for d in (";", "\t", ",") if d in header)
    rows = [("a.png", "cat", "train"), ('"b;c.png"', "dog", "test")]
    body = "".join(delimiter.join(row) + "\r\n\r\n" for row in rows)
    manifest = tmp_path / "m.csv"
    manifest.write_text(header + "\r\n" + body, newline="")
    plan = build_plan(_config(tmp_path, manifest))
    assert [(i.key, i.label, i.split, i.reject) for i in plan.items] == [
        ("a.png", "cat", "train", ""),
        ("b;c.png", "dog", "test", ""),
    ]


def test_jsonl_manifest(tmp_path):
    _touch(str(tmp_path / "a.png"))
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"uri": str(tmp_path / "a.png"), "label": "a"}) + "\n\n")
    plan = build_plan(_config(tmp_path, manifest, allow_one_class=True))
    assert [(i.uri, i.label_id) for i in plan.items] == [(str(tmp_path / "a.png"), 0)]


def test_label_map_file_fixes_ids_and_dead_letters_unknown_labels(tmp_path):
    root = tmp_path / "images"
    _touch(str(root / "cat" / "1.jpg"))
    _touch(str(root / "dog" / "1.jpg"))
    label_map = tmp_path / "labels.json"
    label_map.write_text(json.dumps({"dog": 0, "cat": 5}))
    plan = build_plan(_config(tmp_path, root, label_map=str(label_map), allow_one_class=True))
    assert {i.key: i.label_id for i in plan.items} == {"cat/1.jpg": 5, "dog/1.jpg": 0}

    label_map.write_text(json.dumps({"dog": 0}))
    plan = build_plan(_config(tmp_path, root, label_map=str(label_map), allow_one_class=True))
    assert {i.key: i.reject for i in plan.items} == {"cat/1.jpg": "unknown_label", "dog/1.jpg": ""}


CAFE_NFC, CAFE_NFD = "caf\u00e9", "cafe\u0301"  # print the same; differ as bytes


def test_one_label_spelled_in_two_unicode_forms_is_one_class(tmp_path):
    """A folder named on macOS (NFD) and one named on Linux (NFC) are the same class,
    whether the labels come from folders, a manifest or a label map."""
    root = tmp_path / "images"
    _touch(str(root / CAFE_NFC / "1.jpg"))
    _touch(str(root / CAFE_NFD / "2.jpg"))
    _touch(str(root / "tea" / "3.jpg"))
    plan = build_plan(_config(tmp_path, root))
    assert plan.label_map == {CAFE_NFC: 0, "tea": 1}
    assert {i.key: i.label_id for i in plan.items} == {
        f"{CAFE_NFC}/1.jpg": 0,
        f"{CAFE_NFD}/2.jpg": 0,
        "tea/3.jpg": 1,
    }

    manifest = tmp_path / "m.jsonl"
    rows = [{"uri": str(root / "tea" / "3.jpg"), "label": CAFE_NFD}]
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    one_label = _config(tmp_path, manifest, allow_one_class=True)
    assert build_plan(one_label).label_map == {CAFE_NFC: 0}

    label_map = tmp_path / "labels.json"
    label_map.write_text(json.dumps({CAFE_NFD: 3, "tea": 4}))
    plan = build_plan(_config(tmp_path, root, label_map=str(label_map)))
    assert {i.key: i.label_id for i in plan.items}[f"{CAFE_NFC}/1.jpg"] == 3

    label_map.write_text(json.dumps({CAFE_NFD: 3, CAFE_NFC: 4}))
    with pytest.raises(InputError, match="names one label twice in different Unicode forms"):
        build_plan(_config(tmp_path, root, label_map=str(label_map)))


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda root: None, "does not exist"),
        (lambda root: os.makedirs(root), "no input files"),
        (
            lambda root: (os.makedirs(root / "x"), _touch(str(root / "x" / ".hidden"))),
            "no input files",
        ),
    ],
)
def test_unusable_input_is_a_clear_error(tmp_path, setup, message):
    root = tmp_path / "images"
    setup(root)
    with pytest.raises(InputError, match=message):
        build_plan(_config(tmp_path, root))


def test_manifest_without_label_column_is_a_clear_error(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("path,class\na.jpg,cat\n")
    with pytest.raises(InputError, match="'uri' and 'label'"):
        build_plan(_config(tmp_path, manifest))


def test_a_broken_jsonl_line_is_that_rows_dead_letter(tmp_path):
    """A truncated last line or a stray list costs its own row, not the whole manifest."""
    _touch(str(tmp_path / "a.jpg"))
    _touch(str(tmp_path / "b.jpg"))
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        '{"uri": "a.jpg", "label": "cat"}\n["b.jpg", "dog"]\n"b.jpg"\n'
        '{"uri": "b.jpg", "label": "dog"}\n{"uri": "c.jpg", "lab'
    )
    plan = build_plan(_config(tmp_path, manifest))
    rejected = {i.uri: i.reject for i in plan.items if i.reject}
    assert rejected == {f"{manifest}#{n}": "bad_manifest_row" for n in (2, 3, 5)}
    assert sorted(i.key for i in plan.items if not i.reject) == ["a.jpg", "b.jpg"]
    assert plan.label_map == {"cat": 0, "dog": 1}


def test_a_jsonl_manifest_without_one_json_object_is_a_clear_error(tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("uri,label\na.jpg,cat\n")  # a CSV saved as .jsonl
    with pytest.raises(InputError, match=r"line 1: invalid JSON .*no line is a JSON object"):
        build_plan(_config(tmp_path, manifest))


def test_a_shard_is_one_unit_when_that_leaves_enough_units_else_it_is_cut(tmp_path):
    """A shard read as one unit is written once; one too large for the workers to share
    the job evenly is cut into units of CHUNK_IMAGES, as every shard was before."""
    assert plan_module.whole_shard_images(100, parallelism=2) == plan_module.CHUNK_IMAGES
    assert plan_module.whole_shard_images(40_000, parallelism=2) == 40_000 // (
        2 * plan_module.UNITS_PER_WORKER
    )
    assert plan_module.whole_shard_images(40_000, parallelism=1) == 40_000  # nobody to share
    # 40 shards of 100 for 2 workers: 32 units of 125 would do, so each is one unit...
    plan = _train_only_plan(tmp_path / "many", images=4000, classes=2, num_shards=40)
    assert {i.chunk for i in plan.items} == {0}
    # ...and 5 shards of 400 are cut into units of at most CHUNK_IMAGES (7 of 57 or 58).
    cut = _train_only_plan(tmp_path / "cut", images=2000, classes=2, num_shards=5)
    cut_images = tmp_path / "cut" / "images"
    assert max(Counter((i.shard, i.chunk) for i in cut.items).values()) <= 64
    assert len({(i.shard, i.chunk) for i in cut.items}) == 5 * 7
    # On one worker nothing is cut; placed for other workers, the shards stay the same.
    train_only = {"train": 1.0, "validation": 0.0, "test": 0.0}
    config = _config(tmp_path / "cut", cut_images, num_shards=5, split_fractions=train_only)
    whole = cut.for_parallelism(config, 1)
    assert {i.chunk for i in whole.items} == {0} and whole.parallelism == 1
    assert {(i.key, i.split, i.shard) for i in whole.items} == {
        (i.key, i.split, i.shard) for i in cut.items
    }
