"""The exported model's serving signature takes untrusted bytes: refuse, don't explode."""

import json
import subprocess
import sys

import pytest

from tests.dags.airflow_env import REPO

pytestmark = pytest.mark.slow  # exports a model in a subprocess


def test_serving_refuses_bombs_and_garbage_before_decoding(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "reliability" / "serve_bombs.py"),
         str(tmp_path / "model")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    outcomes = result["outcomes"]
    assert result["empty_shapes"]["probabilities"] == [0, 4]  # an empty request, empty answers
    # Each bad image is the second of its batch: the refusal names it.
    for bomb in ("bomb.png", "bomb.jpg", "bomb.gif", "gif_frame_bomb.gif"):
        assert "images[1]: image header claims more than 50000000 pixels" in outcomes[bomb], (
            outcomes[bomb]
        )
    assert "images[1]: not a JPEG, PNG, GIF or BMP" in outcomes["text.jpg"]
    assert "images[1]: not a JPEG, PNG, GIF or BMP" in outcomes["tiff.tif"]
    assert "images[1]: not a JPEG, PNG, GIF or BMP" in outcomes["truncated.jpg"]  # cut in header
    # Past the header checks, the decoder fails on it: the refusal still names the element.
    assert "images[1]: cannot be decoded" in outcomes["cut.jpg"], outcomes["cut.jpg"]
    # A decoded bomb is 1.6 G pixels x 3 bytes; refusing it must not allocate anything like it.
    assert result["peak_growth_kb"] < 200_000, result["peak_growth_kb"]
    # Unsafe label names are data, served back verbatim.
    assert set(result["good_class_names"]) <= {"a", "../b", "c/d", "ñandú"}
    # Every stored mode x transparency kind: JPEG, PNG and GIF are served (two answers);
    # BMP and WebP may be refused (TensorFlow reads 24/32-bit BMPs only, and no WebP), by
    # the element's index; nothing raises anything else.
    modes = result["modes"]
    assert len(modes) > 40
    for name, outcome in modes.items():
        if name.endswith((".bmp", ".webp")) and outcome != "served 2":
            assert outcome.startswith("refused: ") and "images[1]: " in outcome, (name, outcome)
        else:
            assert outcome == "served 2", (name, outcome)
