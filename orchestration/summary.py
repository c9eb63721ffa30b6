"""What a person wants to know after a run, in a few lines: what the newest run decided
(published, or not and why), the model being served, how good it is per class, and where
the evaluation, plots and TensorBoard logs are.

    python -m orchestration.summary --model-root MODELS [--model-name shapes]
        [--output-root PIPELINE]
"""

from __future__ import annotations

import argparse
import posixpath
import sys
from pathlib import Path

import fsspec

from datacheck.run import PLOT, REPORT
from orchestration.publish import LATEST, PUBLISH_RECORD, latest_version
from orchestration.runs import RunPaths
from runspec.layout import CONFUSION, CURVES, EVALUATION, METRICS, TENSORBOARD
from runspec.record import RunFolderError, RunRecord, read_json
from stageconfig import user_path
from training.gate import verdict_line


class SummaryError(ValueError):
    """Nothing (readable) is published under that name."""


def newest_run_verdict(output_root: str) -> str | None:
    """The newest run's decision, in one line (None: no run has evaluated yet)."""
    fs, runs = fsspec.core.url_to_fs(posixpath.join(output_root.rstrip("/"), "runs"))
    if not fs.isdir(runs):
        return None
    folders = [entry for entry in fs.ls(runs, detail=True) if entry["type"] == "directory"]
    for folder in sorted(folders, key=lambda entry: entry.get("mtime", 0), reverse=True):
        evaluation = read_json(posixpath.join(folder["name"], EVALUATION))
        if evaluation is None:
            continue
        run = posixpath.basename(folder["name"].rstrip("/"))
        verdict = evaluation.get("verdict")
        if verdict is None:
            return f"run {run}: evaluated, accuracy {evaluation['accuracy']:.3f}"
        if verdict["blessed"]:
            return f"run {run}: {verdict_line(verdict)}"
        return f"run {run}: not published, {verdict_line(verdict)}"
    return None


def summary(model_root: str, model_name: str) -> str:
    home = posixpath.join(model_root.rstrip("/"), model_name)
    try:
        version = latest_version(model_root.rstrip("/"), model_name)
    except ValueError:
        raise SummaryError(f"{home}/{LATEST} does not hold a version number") from None
    if version is None:
        raise SummaryError(f"nothing published under {home} (no {LATEST})")
    published = posixpath.join(home, str(version))
    fs, path = fsspec.core.url_to_fs(published)
    if not fs.isdir(path):
        raise SummaryError(f"{home}/{LATEST} names version {version}, which is not there")
    record = read_json(posixpath.join(published, PUBLISH_RECORD)) or {}
    train_dir = posixpath.dirname(record.get("source", "").rstrip("/"))
    # The DAG's runs keep the evaluation and plots beside train/ (orchestration/runs.py);
    # a model trained and published by hand has one folder for all of it.
    run_dir = (
        posixpath.dirname(train_dir) if posixpath.basename(train_dir) == "train" else train_dir
    )
    evaluation = record.get("evaluation") or (
        read_json(posixpath.join(run_dir, EVALUATION)) if run_dir else None
    )
    lines = [f"published {model_name} version {version}: {published}"]
    if evaluation:
        classes = len(evaluation.get("per_class_accuracy", {})) or 1
        per_class = ", ".join(
            f"{name} {accuracy:.2f}"
            for name, accuracy in sorted(evaluation.get("per_class_accuracy", {}).items())
        )
        lines.append(
            f"held-out {evaluation['split']} accuracy {evaluation['accuracy']:.3f} on "
            f"{evaluation['num_examples']} images (chance {1 / classes:.2f}); "
            f"per class: {per_class}"
        )
    else:
        lines.append(
            "no held-out evaluation kept with it (publish with --evaluation EVALUATION.json)"
        )
    if run_dir:
        lines += _run_files(run_dir, train_dir)
        run = RunRecord.read(train_dir)
        advice = (run.input_diagnosis if run else {}).get("advice")
        if advice:
            lines.append(f"input: {advice}")
        lines += _data_check_lines(run_dir)
    return "\n".join(lines)


def _data_check_lines(run_dir: str) -> list[str]:
    """The run's data verdict (check_data's report), with its anomalies one per line."""
    folder = RunPaths(run_dir).data_check
    report = read_json(posixpath.join(folder, REPORT))
    if not report:
        return []
    if not report["anomalies"]:
        return [report["line"]]
    return [
        f"data: {len(report['anomalies'])} anomalies against {report['baseline']} "
        f"(data_checks={report['mode']}; plot {posixpath.join(folder, PLOT)}):",
        *(f"  {a['kind']}: {a['message']}" for a in report["anomalies"]),
    ]


def _run_files(run_dir: str, train_dir: str) -> list[str]:
    """Where the run's evaluation, plots and logs are: those that exist."""
    fs, _ = fsspec.core.url_to_fs(run_dir)
    wanted = [posixpath.join(run_dir, name) for name in (EVALUATION, CURVES, CONFUSION)]
    wanted.append(posixpath.join(train_dir, METRICS))
    there = [path for path in dict.fromkeys(wanted) if fs.exists(path)]
    lines = [f"run folder: {run_dir}"]
    if there:
        lines.append("  " + ", ".join(posixpath.relpath(path, run_dir) for path in there))
    logs = posixpath.join(train_dir, TENSORBOARD)
    if fs.exists(logs):
        lines.append(f"  TensorBoard: {tensorboard_command()} --logdir {logs}")
    return lines


def tensorboard_command() -> str:
    """TensorBoard as installed beside this Python (.venv/bin is not on a user's PATH)."""
    beside = Path(sys.executable).parent / "tensorboard"
    return str(beside) if beside.exists() else f"{sys.executable} -m tensorboard.main"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestration.summary", description=__doc__)
    parser.add_argument("--model-root", required=True, type=user_path)
    parser.add_argument("--model-name", default="shapes")
    parser.add_argument(
        "--output-root",
        type=user_path,
        help="The DAG's output_root: say what its newest run decided.",
    )
    args = parser.parse_args(argv)
    try:
        if args.output_root and (line := newest_run_verdict(args.output_root)):
            print(line)
        print(summary(args.model_root, args.model_name))
    except (SummaryError, RunFolderError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
