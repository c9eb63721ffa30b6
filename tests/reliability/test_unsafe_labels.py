"""Label names that would be dangerous as paths or keys stay data: nothing escapes the output."""

import csv
import json
import os

from beam_jobs import sample_data
from tests.jobs import shard_job

UNSAFE = ["..", "../../escape", "a/b", "/etc/passwd", "ñandú 🐍", "con", "x\\y"]


def test_unsafe_label_names_are_kept_as_data_inside_the_output(tmp_path):
    images = sample_data.generate(str(tmp_path / "images"), images_per_class=3, seed=9)
    manifest = tmp_path / "manifest.csv"
    with open(manifest, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["uri", "label"])
        writer.writerows([path, UNSAFE[i % len(UNSAFE)]] for i, path in enumerate(images))
        writer.writerow([images[0], ""])  # an empty label
    output = tmp_path / "work" / "out"
    before = {p for p in tmp_path.rglob("*")}

    code = shard_job(str(manifest), str(output), "--max-error-fraction", "0.5")  # fmt: skip
    assert code == 0
    created = {p for p in tmp_path.rglob("*")} - before
    outside = [p for p in created if not str(p).startswith(str(output) + os.sep) and p != output]
    assert outside == [p for p in outside if p in output.parents]  # only the output's parents
    metadata = json.loads((output / "metadata.json").read_text())
    assert set(metadata["label_map"]) == set(UNSAFE)
    assert metadata["errors_by_reason"] == {"bad_manifest_row": 1}
    assert not (tmp_path / "escape").exists() and not (tmp_path / "work" / "escape").exists()
