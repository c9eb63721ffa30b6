"""One data check: read both folders' statistics, compare, write the report, give a verdict.

The verdict is a dict (the DAG task's XCom and the run's result): `status` is `ok`,
`anomalies` (warn mode), `failed` (fail mode), `no_baseline` or `off`; `line` says it in
one line for the task log, the run's note and the summary.
"""

from __future__ import annotations

import json
import posixpath

import fsspec

from datacheck.checks import compare
from datacheck.config import DataCheckConfig
from datacheck.plot import draw
from runspec.record import RunFolderError, read_json
from shardspec.layout import METADATA
from shardspec.statistics import DatasetStatistics, StatisticsError, read_statistics

REPORT = "data_check.json"
PLOT = "data_check.png"


class DataCheckError(ValueError):
    """The folder to check cannot be read as shards with statistics (exit 2)."""


def _metadata(folder: str) -> dict | None:
    try:
        return read_json(posixpath.join(folder.rstrip("/"), METADATA))
    except RunFolderError as err:
        raise DataCheckError(str(err)) from None


def folder_statistics(folder: str) -> DatasetStatistics | None:
    """A shard folder's statistics; None when it was written before they were measured.
    DataCheckError when it is no shard folder or its statistics are of another version."""
    metadata = _metadata(folder)
    if metadata is None:
        raise DataCheckError(f"{folder} holds no {METADATA}: not a sharding job's output")
    try:
        return read_statistics(metadata)
    except StatisticsError as err:
        raise DataCheckError(f"{folder}: {err}") from None


def check_data(config: DataCheckConfig, *, baseline_note: str = "") -> dict:
    """Compare `config.shards` with `config.baseline` (a shard folder, or "" with
    `baseline_note` saying why there is none); write the report when asked."""
    if config.data_checks == "off":
        return {"status": "off", "line": "data checks off", "anomalies": []}
    current = folder_statistics(config.shards)
    if current is None:
        raise DataCheckError(
            f"{config.shards} was sharded before statistics were measured: reshard it "
            "(force_reshard) to check its data"
        )
    baseline, why_none = None, baseline_note or "no baseline given"
    if config.baseline:
        try:
            baseline = folder_statistics(config.baseline)
            why_none = f"the baseline {config.baseline} holds no statistics (sharded before)"
        except DataCheckError as err:
            why_none = f"the baseline cannot be read: {err}"
    anomalies = compare(current, baseline, config) if baseline else []
    if baseline is None:
        status, line = "no_baseline", f"data: nothing to compare with ({why_none})"
    elif not anomalies:
        status, line = "ok", f"data: no anomalies against {config.baseline}"
    else:
        status = "failed" if config.data_checks == "fail" else "anomalies"
        line = f"data: {len(anomalies)} anomal{'y' if len(anomalies) == 1 else 'ies'} " + (
            f"against {config.baseline}: " + "; ".join(a.message for a in anomalies)
        )
    verdict = {
        "status": status,
        "line": line,
        "mode": config.data_checks,
        "anomalies": [a.to_json() for a in anomalies],
        "shards": config.shards,
        "baseline": config.baseline if baseline else None,
        "thresholds": {
            "max_label_shift": config.max_label_shift,
            "max_size_drift": config.max_size_drift,
            "max_error_share_rise": config.max_error_share_rise,
            "max_image_drop": config.max_image_drop,
        },
        "statistics": current.to_json(),
        "baseline_statistics": baseline.to_json() if baseline else None,
    }
    if config.report:
        report = posixpath.join(config.report.rstrip("/"), REPORT)
        fs, path = fsspec.core.url_to_fs(report)
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        with fs.open(path, "w") as handle:
            handle.write(json.dumps(verdict, indent=2, sort_keys=True))
        verdict["report"] = report
        verdict["plot"] = draw(current, baseline, posixpath.join(config.report, PLOT))
    return verdict
