"""Publishing an exported model as `<model_root>/<model_name>/<version>/`.

Versions are increasing integers, as TensorFlow Serving expects. A version is
first copied into a private staging folder and then renamed into place; on a
local or POSIX filesystem the rename fails if another publisher took that
number first, and we move on to the next one, so versions stay unique under
concurrency. `LATEST` (a one-line file) is replaced atomically and only moves
forward, after the copy is complete. Publishing the same run again is a no-op
that returns the version it already got. Object stores (gs://) have no atomic
rename: there, run one publisher per model name (the DAG's max_active_runs=1).
"""

from __future__ import annotations

import json
import posixpath
import uuid

import tensorflow as tf

LATEST = "LATEST"
PUBLISH_RECORD = posixpath.join("assets.extra", "publish.json")
MAX_ATTEMPTS = 20


def _versions(model_home: str) -> list[int]:
    if not tf.io.gfile.isdir(model_home):
        return []
    return sorted(
        int(n.rstrip("/")) for n in tf.io.gfile.listdir(model_home) if n.rstrip("/").isdigit()
    )


def _copy_tree(source: str, target: str) -> None:
    for directory, _, files in tf.io.gfile.walk(source):
        relative = posixpath.relpath(directory, source)
        destination = target if relative == "." else posixpath.join(target, relative)
        tf.io.gfile.makedirs(destination)
        for name in files:
            tf.io.gfile.copy(
                posixpath.join(directory, name), posixpath.join(destination, name), overwrite=True
            )


def _read_json(path: str) -> dict | None:
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def latest_version(model_root: str, model_name: str) -> int | None:
    path = posixpath.join(model_root, model_name, LATEST)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return int(handle.read().strip())


def latest_model_path(model_root: str, model_name: str) -> str | None:
    version = latest_version(model_root, model_name)
    return None if version is None else posixpath.join(model_root, model_name, str(version))


def _set_latest(model_home: str, version: int) -> None:
    current = latest_version(posixpath.dirname(model_home), posixpath.basename(model_home))
    if current is not None and current >= version:
        return  # a newer model was published meanwhile; LATEST never moves backwards
    temporary = posixpath.join(model_home, f".{LATEST}.{uuid.uuid4().hex[:8]}")
    with tf.io.gfile.GFile(temporary, "w") as handle:
        handle.write(f"{version}\n")
    tf.io.gfile.rename(temporary, posixpath.join(model_home, LATEST), overwrite=True)


def publish_model(
    model_dir: str, model_root: str, model_name: str, *, run_id: str, evaluation: dict | None = None
) -> dict:
    model_home = posixpath.join(model_root.rstrip("/"), model_name)
    for version in reversed(_versions(model_home)):
        record = _read_json(posixpath.join(model_home, str(version), PUBLISH_RECORD))
        if record and record.get("run_id") == run_id:
            _set_latest(model_home, version)
            return {
                "version": version,
                "path": posixpath.join(model_home, str(version)),
                "reused": True,
            }

    staging = posixpath.join(model_home, f".staging-{uuid.uuid4().hex[:12]}")
    _copy_tree(model_dir, staging)
    tf.io.gfile.makedirs(posixpath.dirname(posixpath.join(staging, PUBLISH_RECORD)))
    with tf.io.gfile.GFile(posixpath.join(staging, PUBLISH_RECORD), "w") as handle:
        json.dump(
            {"run_id": run_id, "source": model_dir, "evaluation": evaluation}, handle, indent=2
        )
    for _ in range(MAX_ATTEMPTS):
        version = (max(_versions(model_home), default=0)) + 1
        target = posixpath.join(model_home, str(version))
        try:
            tf.io.gfile.rename(staging, target, overwrite=False)
        except (tf.errors.OpError, OSError):
            if tf.io.gfile.exists(target):
                continue  # another publisher took this number; take the next one
            raise
        _set_latest(model_home, version)
        return {"version": version, "path": target, "reused": False}
    raise RuntimeError(f"could not claim a version under {model_home} after {MAX_ATTEMPTS} tries")
