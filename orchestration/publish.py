"""Publishing an exported model as `<model_root>/<model_name>/<version>/`.

Versions are increasing integers, as TensorFlow Serving expects. A version is
first copied into a private staging folder (the slow part, done unlocked) and
then renamed into place. Choosing the number, the rename and the update of
`LATEST` (a one-line file, replaced atomically, only ever moving forward) are
one critical section: reading LATEST and replacing it is check-then-act, and
without a lock a slower publisher can move it back. On local/POSIX
filesystems the section holds an exclusive `flock` on `<root>/.<model>.lock`
(beside the model folder, so the folder TensorFlow Serving watches holds only
versions and LATEST), so concurrent publishers (threads, processes, DAG runs)
get unique versions and LATEST always names the newest complete model. Publishing the same
run's same model again is a no-op that returns the version it already got. Object stores
(gs://) have neither locks nor atomic renames: there, run one publisher per model name (the
DAG's max_active_runs=1 does).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import posixpath
import re
import shutil
import time
import uuid
from collections.abc import Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from runspec.layout import EVALUATION, SAVED_MODEL
from runspec.record import RunFolderError, read_json
from stageconfig import user_path
from training.gate import verdict_line
from training.model_files import EXTRA_DIR, LATEST, METADATA_FILE, WEIGHTS_FINGERPRINT

PUBLISH_RECORD = posixpath.join(EXTRA_DIR, "publish.json")
STAGING_PREFIX = ".staging-"
# A staging folder older than this belongs to a publisher that died mid-copy (a live one
# renames its folder into place as soon as the copy ends); the next publish removes it.
STALE_STAGING_SECONDS = 6 * 3600


# A model's name is a folder name and a serving name: one safe path segment. The DAG's
# `model_name` Param is checked against the same pattern.
MODEL_NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


class PublishError(ValueError):
    """A publishing request that cannot be right (a model name that is not a name)."""


class NotBlessed(RuntimeError):
    """The candidate is worse than the serving model (training.gate.bless): not published,
    and LATEST stays where it is."""


# Paths go through fsspec (local or gs://, no TensorFlow on the Airflow worker) one file at
# a time: no call here expands a pattern, so a root named with [ ] * ? is taken literally.
def _fs(url: str):
    return fsspec.core.url_to_fs(url)


def _is_local(url: str) -> bool:
    return isinstance(_fs(url)[0], LocalFileSystem)


def _exists(url: str) -> bool:
    fs, path = _fs(url)
    return fs.exists(path)


def _children(url: str) -> list[str]:
    fs, path = _fs(url)
    if not fs.isdir(path):
        return []
    return [posixpath.basename(entry.rstrip("/")) for entry in fs.ls(path, detail=False)]


def _write_text(url: str, text: str) -> None:
    fs, path = _fs(url)
    with fs.open(path, "w") as handle:
        handle.write(text)


def _versions(model_home: str) -> list[int]:
    return sorted(int(name) for name in _children(model_home) if name.isdigit())


def copy_tree(source: str, target: str) -> None:
    """Every file under `source` to the same place under `target` (any two filesystems)."""
    source_fs, source_path = _fs(source)
    target_fs, target_path = _fs(target)
    for entry, info in sorted(source_fs.find(source_path, withdirs=True, detail=True).items()):
        destination = posixpath.join(target_path, posixpath.relpath(entry, source_path))
        if info["type"] == "directory":
            target_fs.makedirs(destination, exist_ok=True)
            continue
        target_fs.makedirs(posixpath.dirname(destination), exist_ok=True)
        with source_fs.open(entry, "rb") as reader, target_fs.open(destination, "wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)


def _remove_tree(url: str) -> None:
    fs, path = _fs(url)
    if isinstance(fs, LocalFileSystem):
        shutil.rmtree(path, ignore_errors=True)
        return
    for entry in fs.find(path):
        fs.rm_file(entry)


def _rename_tree(source: str, target: str) -> None:
    """Atomic on a local filesystem (and refused when `target` exists); copy + delete on
    object stores, which have no rename (see the module docstring)."""
    if _is_local(source):
        os.rename(_fs(source)[1], _fs(target)[1])
        return
    copy_tree(source, target)
    _remove_tree(source)


def latest_version(model_root: str, model_name: str) -> int | None:
    path = posixpath.join(model_root, model_name, LATEST)
    if not _exists(path):
        return None
    fs, local = _fs(path)
    with fs.open(local) as handle:
        return int(handle.read().strip())


@contextlib.contextmanager
def _publish_lock(model_home: str) -> Iterator[None]:
    if "://" in model_home:
        yield  # no locking on object stores; see the module docstring
        return
    model_root, model_name = os.path.split(model_home)
    os.makedirs(model_home, exist_ok=True)
    with open(os.path.join(model_root, f".{model_name}.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _set_latest(model_home: str, version: int, *, backwards: bool = False) -> None:
    """Call with the publish lock held."""
    current = latest_version(posixpath.dirname(model_home), posixpath.basename(model_home))
    if current is not None and current >= version and not backwards:
        return  # a newer model was published meanwhile; LATEST never moves backwards
    latest = posixpath.join(model_home, LATEST)
    if not _is_local(model_home):
        _write_text(latest, f"{version}\n")  # one object write: readers see old or new
        return
    temporary = posixpath.join(model_home, f".{LATEST}.{uuid.uuid4().hex[:8]}")
    _write_text(temporary, f"{version}\n")
    os.replace(_fs(temporary)[1], _fs(latest)[1])


def model_identity(model_dir: str) -> str:
    """Which model a folder holds: the trainer's weights fingerprint (one checkpoint
    exported twice is one model), else a digest of every file."""
    metadata = read_json(posixpath.join(model_dir, EXTRA_DIR, METADATA_FILE)) or {}
    if metadata.get(WEIGHTS_FINGERPRINT):
        return f"weights:{metadata[WEIGHTS_FINGERPRINT]}"
    fs, root = _fs(model_dir)
    digest = hashlib.sha256()
    for entry in sorted(fs.find(root)):
        digest.update(f"{posixpath.relpath(entry, root)}\n".encode())
        with fs.open(entry, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return f"files:{digest.hexdigest()[:16]}"


def _published_version(model_home: str, run_id: str, model: str) -> int | None:
    """The version this run already published of this model: a retried or cleared
    `publish` returns it. A run whose model changed since (its shards were re-made and
    it trained anew) publishes a new version. Records from before models were named in
    them match on the run alone."""
    for version in reversed(_versions(model_home)):
        record = read_json(posixpath.join(model_home, str(version), PUBLISH_RECORD))
        if record and record.get("run_id") == run_id and record.get("model", model) == model:
            return version
    return None


def _remove_stale_staging(model_home: str, now: float | None = None) -> None:
    """Call with the publish lock held: staging folders of publishers killed mid-copy."""
    now = time.time() if now is None else now
    for name in _children(model_home):
        if not name.startswith(STAGING_PREFIX):
            continue
        started = name[len(STAGING_PREFIX) :].split("-", 1)[0]
        # Older releases named it without a time: stale by definition once we hold the lock
        # and see it (their publishers held no lock while copying, but are long gone).
        if not started.isdigit() or now - int(started) > STALE_STAGING_SECONDS:
            _remove_tree(posixpath.join(model_home, name))


def publish_model(
    model_dir: str, model_root: str, model_name: str, *, run_id: str, evaluation: dict | None = None
) -> dict:
    if not re.fullmatch(MODEL_NAME_PATTERN, model_name or ""):
        raise PublishError(
            f"model name {model_name!r} is not a plain name (letters, digits, '.', '_', '-'; "
            "at most 63; no path separators): it would be published outside the model root"
        )
    model_home = posixpath.join(model_root.rstrip("/"), model_name)
    model = model_identity(model_dir)
    with _publish_lock(model_home):
        _remove_stale_staging(model_home)
        version = _published_version(model_home, run_id, model)
        if version is not None:
            _set_latest(model_home, version)
            return {
                "version": version,
                "path": posixpath.join(model_home, str(version)),
                "reused": True,
            }

    staging = posixpath.join(
        model_home, f"{STAGING_PREFIX}{int(time.time())}-{uuid.uuid4().hex[:8]}"
    )
    copy_tree(model_dir, staging)
    record = posixpath.join(staging, PUBLISH_RECORD)
    fs, record_path = _fs(record)
    fs.makedirs(posixpath.dirname(record_path), exist_ok=True)
    _write_text(
        record,
        json.dumps(
            {"run_id": run_id, "model": model, "source": model_dir, "evaluation": evaluation},
            indent=2,
        ),
    )
    with _publish_lock(model_home):
        version = _published_version(model_home, run_id, model)
        if version is not None:  # the same run published meanwhile (a concurrent retry)
            _remove_tree(staging)
            return {
                "version": version,
                "path": posixpath.join(model_home, str(version)),
                "reused": True,
            }
        version = max(_versions(model_home), default=0) + 1
        target = posixpath.join(model_home, str(version))
        _rename_tree(staging, target)
        _set_latest(model_home, version)
    return {"version": version, "path": target, "reused": False}


def roll_back(model_root: str, model_name: str, version: int) -> int | None:
    """Point LATEST at an earlier published `version` (a person's decision: the only way
    LATEST moves backwards); the version it named before. The next run compares with it."""
    model_home = posixpath.join(model_root.rstrip("/"), model_name)
    if not _exists(posixpath.join(model_home, str(version), SAVED_MODEL)):
        known = ", ".join(map(str, _versions(model_home))) or "none"
        raise PublishError(f"{model_home} has no version {version} (published: {known})")
    with _publish_lock(model_home):
        before = latest_version(model_root.rstrip("/"), model_name)
        _set_latest(model_home, version, backwards=True)
    return before


def publish_run(evaluated: dict, *, model_root: str, model_name: str, run_id: str) -> dict:
    """The DAG's publish step: the evaluated candidate if blessed (NotBlessed if not), and
    what a downstream consumer wants to know of it (the model Asset event's `extra`)."""
    verdict = evaluated.get("verdict")
    if verdict and not verdict["blessed"]:
        raise NotBlessed(verdict_line(verdict))
    published = publish_model(
        evaluated["model_dir"], model_root, model_name, run_id=run_id, evaluation=evaluated
    )
    baseline = evaluated.get("baseline") or {}
    return {
        **published,
        "model_name": model_name,
        "run_id": run_id,
        "accuracy": evaluated["accuracy"],
        "baseline_version": baseline.get("version"),
        "baseline_accuracy": baseline.get("accuracy"),
        "verdict": verdict_line(verdict) if verdict else None,
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m orchestration.publish`: the DAG's publish task by hand."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m orchestration.publish",
        description="Publish an exported model as <model-root>/<model-name>/<version>/ and "
        "move LATEST to it, or roll LATEST back to an earlier version. Publishing the same "
        "model under the same --run-id again returns its version (a retry publishes nothing "
        "twice).",
    )
    parser.add_argument("--model", type=user_path, help="SavedModel folder (RUN_DIR/model).")
    parser.add_argument("--model-root", required=True, type=user_path)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--run-id", help="Identifies this publication.")
    parser.add_argument("--evaluation", help=f"{EVALUATION} to keep with the version.")
    parser.add_argument(
        "--rollback",
        type=int,
        metavar="VERSION",
        help="Instead of publishing: point LATEST at this earlier version (serving and the "
        "next run's comparison follow it).",
    )
    args = parser.parse_args(argv)
    if args.rollback is not None:
        try:
            before = roll_back(args.model_root, args.model_name, args.rollback)
        except PublishError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"{args.model_name}: LATEST {before} -> {args.rollback}")
        return 0
    if not args.model or not args.run_id:
        parser.error("--model and --run-id are required to publish (or give --rollback)")
    if not _exists(posixpath.join(args.model, SAVED_MODEL)):
        print(f"error: no SavedModel at {args.model}", file=sys.stderr)
        return 2
    try:
        evaluation = read_json(args.evaluation) if args.evaluation else None
        published = publish_model(
            args.model, args.model_root, args.model_name, run_id=args.run_id, evaluation=evaluation
        )
    except (PublishError, RunFolderError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    state = "already published as" if published["reused"] else "published"
    print(f"{state} version {published['version']}: {published['path']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
