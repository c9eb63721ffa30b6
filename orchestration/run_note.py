"""The run's verdict where a person looks: the DAG run's note on its page in the UI.

Airflow 3 keeps task code away from the metadata database, and its Task SDK has no call
that sets the current run's note (the execution API reads notes, it does not write
them). The public REST API does: `PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}` with a
`note` (at most 1,000 characters). The `report` task calls it with the credentials of
the Airflow connection `imagepipe_api` (an http connection: host = the API server's
base URL, login and password of a user who may edit runs). Without that connection, on
a local `airflow standalone` (simple auth manager), it uses the admin password that
Airflow generated in AIRFLOW_HOME. With neither, the note goes to the task log only.
"""

from __future__ import annotations

import json
import os
import posixpath
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from orchestration.runs import RunPaths
from runspec.record import read_json
from stageconfig import user_path
from training.gate import verdict_line

CONNECTION_ID = "imagepipe_api"
MAX_NOTE = 1000  # the REST API's limit


def _accuracy_line(evaluation: dict) -> str:
    line = (
        f"held-out {evaluation['split']} accuracy {evaluation['accuracy']:.3f} on "
        f"{evaluation['num_examples']} images"
    )
    baseline = evaluation.get("baseline")
    if baseline:
        line += f"; serving model (version {baseline['version']}) {baseline['accuracy']:.3f}"
    return line


def run_note(
    *,
    model_name: str,
    evaluation: dict | None,
    published: dict | None,
    not_published: str | None,
    data: dict | None,
    run_root: str,
    data_check: dict | None = None,
    reused: list[str] | None = None,
) -> str:
    """A few lines of Markdown: the outcome first, then the numbers behind it."""
    if published:
        state = "already published as" if published.get("reused") else "published"
        lines = [f"**{model_name}: {state} version {published['version']}**"]
    else:
        lines = [f"**{model_name}: not published** ({not_published or 'the run did not finish'})"]
    if evaluation:
        lines.append(_accuracy_line(evaluation))
        verdict = evaluation.get("verdict")
        if verdict:
            lines.append(verdict_line(verdict))
            changes = verdict.get("class_changes") or {}
            if changes:
                worst = sorted(changes.items(), key=lambda item: item[1])[:6]
                lines.append(
                    f"per-class {verdict.get('class_metric', 'accuracy')} change vs serving: "
                    + ", ".join(f"{name} {change:+.2f}" for name, change in worst)
                )
    if data:
        splits = data.get("records_per_split") or {}
        lines.append(
            f"trained on {splits.get('train', '?')} images of {data.get('num_classes', '?')} "
            f"classes ({data.get('num_records', '?')} images in all splits)"
        )
    if data_check and data_check.get("status") != "off":
        line = data_check["line"]
        lines.append(line if len(line) <= 300 else line[:299] + "…")
    lines.extend(reused or [])
    lines.append(f"evaluation and plots: {posixpath.join(run_root, '')}")
    note = "\n\n".join(lines)
    return note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 1] + "…"


def _credentials() -> tuple[str, str, str] | None:
    """(base URL, user, password) of the connection, else of a local standalone's admin."""
    try:
        from airflow.sdk import Connection

        connection = Connection.get(CONNECTION_ID)
    except Exception:
        connection = None
    if connection is not None and connection.host:
        host = connection.host if "://" in connection.host else f"http://{connection.host}"
        base = f"{host}:{connection.port}" if connection.port else host
        return base.rstrip("/"), connection.login or "", connection.password or ""
    home = Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow"))
    passwords = home / "simple_auth_manager_passwords.json.generated"
    if not passwords.exists():
        return None
    from airflow.configuration import conf

    execution = conf.get("core", "execution_api_server_url", fallback="") or ""
    base = execution.rstrip("/").removesuffix("/execution") or conf.get(
        "api", "base_url", fallback="http://localhost:8080"
    )
    try:
        password = json.loads(passwords.read_text())["admin"]
    except (ValueError, KeyError):
        return None
    return base.rstrip("/"), "admin", password


def _request(method: str, url: str, body: dict, token: str | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method=method, headers=headers
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null") or {}


def set_run_note(dag_id: str, run_id: str, note: str) -> str:
    """Set the run's note; what happened, in one line (never raises: the note is a
    courtesy, the run's outcome does not depend on it)."""
    credentials = _credentials()
    if credentials is None:
        return (
            f"no Airflow connection {CONNECTION_ID!r} (http: the API server's URL, a user "
            "and password): the verdict is in this log only"
        )
    base, user, password = credentials
    try:
        token = _request("POST", f"{base}/auth/token", {"username": user, "password": password})
        quote = urllib.parse.quote
        _request(
            "PATCH",
            f"{base}/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}?update_mask=note",
            {"note": note},
            token.get("access_token"),
        )
    except (urllib.error.URLError, OSError, ValueError) as err:
        return f"could not set the run's note through {base}: {err}"
    return f"set the run's note through {base}"


def reused_lines(paths: RunPaths, trained: dict | None) -> list[str]:
    """What this run took from earlier ones instead of redoing it, one line each: the
    shards (the shard cache found the same images sharded with the same settings) and
    the training (reuse_training found a finished run of the same shards and recipe)."""
    lines = []
    shards = read_json(posixpath.join(paths.shards, "metadata.json")) or {}
    if shards.get("location"):
        lines.append(f"reused the shards in {shards['location']} (the same images and settings)")
    model_dir = (trained or {}).get("model_dir") or ""
    if model_dir and not model_dir.startswith(posixpath.join(paths.train, "")):
        lines.append(
            f"reused the training in {posixpath.dirname(model_dir.rstrip('/'))} (reuse_training: "
            "the same shards and training parameters, finished)"
        )
    scored = (read_json(paths.evaluation) or {}).get("scored_before")
    if scored:
        lines.append(f"reused the held-out scores: {scored}")
    return lines


def note_this_run(context, *, evaluated=None, published=None, not_published=None) -> None:
    """From a task of the pipeline's DAG (its Airflow `context`): write the run's note from
    what its tasks recorded, print it and what became of it to the task log."""
    params, run_id = context["params"], context["run_id"]
    paths = RunPaths.for_run(user_path(params["output_root"]), run_id)
    note = run_note(
        model_name=params["model_name"],
        evaluation=evaluated or read_json(paths.evaluation),
        published=published,
        not_published=not_published,
        data=context["ti"].xcom_pull(task_ids="validate_shards"),
        run_root=paths.root,
        data_check=context["ti"].xcom_pull(task_ids="check_data"),
        reused=reused_lines(paths, context["ti"].xcom_pull(task_ids="train")),
    )
    print(note)
    print(set_run_note(context["dag"].dag_id, run_id, note))
