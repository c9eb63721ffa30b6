"""The run's verdict as its note in the UI."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from orchestration import run_note
from training.gate import bless

EVALUATION = {
    "split": "test",
    "accuracy": 0.84,
    "num_examples": 120,
    "per_class_accuracy": {"circle": 0.70, "square": 0.98},
    "per_class_examples": {"circle": 60, "square": 60},
    "baseline": {
        "version": 4,
        "accuracy": 0.91,
        "per_class_accuracy": {"circle": 0.90, "square": 0.92},
    },
}
DATA = {"num_records": 1000, "records_per_split": {"train": 800}, "num_classes": 2}


def test_a_run_not_blessed_says_why_beside_both_scores():
    evaluation = {**EVALUATION, "verdict": bless(EVALUATION)}
    note = run_note.run_note(
        model_name="shapes",
        evaluation=evaluation,
        published=None,
        not_published="not blessed: accuracy 0.840 is 0.070 below",
        data=DATA,
        run_root="/out/runs/r1",
    )
    lines = note.split("\n\n")
    assert lines[0] == "**shapes: not published** (not blessed: accuracy 0.840 is 0.070 below)"
    assert lines[1] == (
        "held-out test accuracy 0.840 on 120 images; serving model (version 4) 0.910"
    )
    assert "class circle accuracy 0.700 is 0.200 below" in lines[2]
    assert lines[3] == "per-class accuracy change vs serving: circle -0.20, square +0.06"
    assert lines[4] == "trained on 800 images of 2 classes (1000 images in all splits)"
    assert lines[5] == "evaluation and plots: /out/runs/r1/"


def test_a_published_run_names_its_version_and_the_note_fits_the_api():
    note = run_note.run_note(
        model_name="shapes",
        evaluation={**EVALUATION, "per_class_accuracy": {f"c{i}": 0.5 for i in range(400)}},
        published={"version": 5, "reused": False},
        not_published=None,
        data=None,
        run_root="/r",
    )
    assert note.startswith("**shapes: published version 5**")
    assert len(note) <= run_note.MAX_NOTE


def test_the_data_verdict_is_on_the_runs_page():
    """check_data's line (its XCom) is in the note; `off` adds nothing."""
    verdict = {"status": "anomalies", "line": "data: 1 anomaly against /s: 1 new label(s): 'owl'"}
    kwargs = dict(model_name="shapes", evaluation=None, data=None, run_root="/r")
    note = run_note.run_note(
        published={"version": 2}, not_published=None, data_check=verdict, **kwargs
    )
    assert note.split("\n\n")[1] == verdict["line"]
    stopped = run_note.run_note(
        published=None,
        not_published="data checks failed (data_checks=fail): labels_added: 1 new label(s)",
        data_check={**verdict, "status": "failed"},
        **kwargs,
    )
    assert stopped.startswith("**shapes: not published** (data checks failed")
    off_verdict = {"status": "off", "line": "data checks off"}
    off = run_note.run_note(published=None, not_published=None, data_check=off_verdict, **kwargs)
    assert "data checks off" not in off


class _Api(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(("POST", self.path, body, None))
        self._reply({"access_token": "t0k"})

    def do_PATCH(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(("PATCH", self.path, body, self.headers["Authorization"]))
        self._reply({"note": body["note"]})

    def _reply(self, document):
        data = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_the_note_is_set_through_the_public_rest_api_with_the_connections_user(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv(
            "AIRFLOW_CONN_IMAGEPIPE_API",
            json.dumps(
                {
                    "conn_type": "http",
                    "host": "http://127.0.0.1",
                    "port": server.server_port,
                    "login": "bot",
                    "password": "pw",
                }
            ),
        )
        said = run_note.set_run_note(
            "image_model_pipeline", "manual__2026-12-05T10:00:00+00:00", "hi"
        )
    finally:
        server.shutdown()
    assert said == f"set the run's note through http://127.0.0.1:{server.server_port}"
    assert _Api.seen == [
        ("POST", "/auth/token", {"username": "bot", "password": "pw"}, None),
        (
            "PATCH",
            "/api/v2/dags/image_model_pipeline/dagRuns/"
            "manual__2026-12-05T10%3A00%3A00%2B00%3A00?update_mask=note",
            {"note": "hi"},
            "Bearer t0k",
        ),
    ]


def test_without_credentials_the_note_stays_in_the_log(monkeypatch, tmp_path):
    monkeypatch.delenv("AIRFLOW_CONN_IMAGEPIPE_API", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    said = run_note.set_run_note("d", "r", "hi")
    assert said.startswith("no Airflow connection 'imagepipe_api'")


def test_what_a_run_reused_is_on_its_page(tmp_path):
    """The shard cache's source and a reused training are named; a run that did both
    itself says nothing of reuse."""

    from orchestration.runs import RunPaths

    paths = RunPaths.for_run(str(tmp_path), "manual__2")
    Path(paths.shards).mkdir(parents=True)
    metadata = Path(paths.shards) / "metadata.json"
    metadata.write_text(json.dumps({"num_records": 4}))
    own = {"model_dir": f"{paths.train}/model"}
    assert run_note.reused_lines(paths, own) == []
    earlier = RunPaths.for_run(str(tmp_path), "manual__1")
    metadata.write_text(json.dumps({"num_records": 4, "location": earlier.shards}))
    lines = run_note.reused_lines(paths, {"model_dir": f"{earlier.train}/model"})
    assert lines == [
        f"reused the shards in {earlier.shards} (the same images and settings)",
        f"reused the training in {earlier.train} (reuse_training: the same shards and "
        "training parameters, finished)",
    ]
    note = run_note.run_note(
        model_name="shapes", evaluation=None, published={"version": 2}, not_published=None,
        data=None, run_root=paths.root, reused=lines,
    )  # fmt: skip
    assert all(line in note for line in lines)
