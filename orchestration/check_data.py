"""The data-check stage: this run's shards against those the serving model was trained on.

    python -m orchestration.check_data --shards SHARDS [--baseline SHARDS_OR_MODEL_HOME]
        [--report DIR] [--data-checks off|warn|fail] [thresholds]

The comparison itself is `datacheck` (TensorFlow-free, on shardspec's statistics); this
module finds the baseline through lineage: LATEST of the model home names a published
version, its publish record names the shards that run evaluated on (or the training run
whose config names them). Exit codes (stageconfig/exit_codes.py): 0 no anomaly, or
anomalies in warn mode; 2 the folder cannot be checked; 4 anomalies in fail mode, one line
each on stderr.
"""

from __future__ import annotations

import argparse
import posixpath
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import stageconfig
from datacheck.config import DataCheckConfig
from datacheck.run import DataCheckError, check_data
from orchestration.evaluation import model_home
from orchestration.publish import PUBLISH_RECORD, latest_version
from orchestration.runs import RunPaths
from runspec.record import RunFolderError, RunRecord, read_json
from shardspec.layout import METADATA
from stageconfig import ConfigError, exit_codes
from training.model_files import LATEST

# DAG Param name -> DataCheckConfig field (the Params come from the config's definitions).
PARAM_FIELDS = (
    "data_checks",
    "max_label_shift",
    "max_size_drift",
    "max_error_share_rise",
    "max_image_drop",
)


def _exists(path: str) -> bool:
    import fsspec

    fs, local = fsspec.core.url_to_fs(path)
    return fs.exists(local)


def trained_on_shards(home: str) -> tuple[str | None, str]:
    """The shard folder the model LATEST names was trained on, or (None, why not)."""
    root, name = posixpath.split(home.rstrip("/"))
    version = latest_version(root, name)
    if version is None:
        return None, f"no model published in {home} yet"
    record = read_json(posixpath.join(home, str(version), PUBLISH_RECORD)) or {}
    shards = (record.get("evaluation") or {}).get("shards_dir")
    if not shards and record.get("source"):
        try:  # published by hand: the training run's own config names its data
            run = RunRecord.read(posixpath.dirname(record["source"].rstrip("/")))
        except RunFolderError:
            run = None
        shards = run.config.get("data") if run else None
    if not shards:
        return None, f"version {version} of {home} does not say which shards it was trained on"
    if not _exists(posixpath.join(shards, METADATA)):
        return None, f"the shards of version {version} ({shards}) are gone"
    return shards, f"version {version}"


def resolve_baseline(baseline: str) -> tuple[str, str]:
    """A --baseline (a shard folder or a model home) as (shard folder or "", note)."""
    if not baseline:
        return "", "no baseline given"
    if _exists(posixpath.join(baseline, METADATA)):
        return baseline, baseline
    if _exists(posixpath.join(baseline, LATEST)):
        shards, note = trained_on_shards(baseline)
        return shards or "", note
    raise DataCheckError(
        f"--baseline {baseline} is neither a shard folder ({METADATA}) nor a published "
        f"model's home ({LATEST})"
    )


def run_check(params: Mapping[str, Any], paths: RunPaths) -> dict:
    """The DAG's check_data task: the verdict (status, line, anomalies, report paths)."""
    config = stageconfig.from_mapping(
        DataCheckConfig,
        {
            "shards": paths.shards,
            "report": paths.data_check,
            **{name: params[name] for name in PARAM_FIELDS if name in params},
        },
        name="",
    )
    if config.data_checks == "off":
        return check_data(config)
    shards, note = trained_on_shards(model_home(params))
    return check_data(replace(config, baseline=shards or ""), baseline_note=note)


class DataChecksFailed(Exception):
    """data_checks=fail and anomalies were found: one line per anomaly (never retried)."""


def check_data_task(params: Mapping[str, Any], paths: RunPaths, log=print) -> dict:
    """The check_data task's body: anomalies logged one per line, DataChecksFailed in fail
    mode, else the verdict without the statistics (the XCom the run's note reads)."""
    verdict = run_check(params, paths)
    for anomaly in verdict["anomalies"]:
        log(f"WARNING data check {anomaly['kind']}: {anomaly['message']}")
    if verdict["status"] == "failed":
        raise DataChecksFailed(
            "data checks failed (data_checks=fail): "
            + "; ".join(f"{a['kind']}: {a['message']}" for a in verdict["anomalies"])
        )
    log(verdict["line"])
    return {key: value for key, value in verdict.items() if "statistics" not in key}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestration.check_data",
        description="Compare a shard folder's dataset statistics with those of the shards "
        "the serving model was trained on: labels added or gone, label shares, image "
        "sizes, rejected share, image count.",
        epilog="Exit codes: 0 no anomaly (or warn mode); 2 the folder cannot be checked; "
        "4 anomalies with --data-checks fail.",
        allow_abbrev=False,
    )
    stageconfig.add_arguments(parser, DataCheckConfig)
    args = parser.parse_args(argv)
    try:
        config = stageconfig.from_args(DataCheckConfig, args)
    except ConfigError as err:
        parser.error(str(err))
    try:
        shards, note = resolve_baseline(config.baseline)
        verdict = check_data(replace(config, baseline=shards), baseline_note=note)
    except DataCheckError as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_codes.BAD_INPUT
    level = "error" if verdict["status"] == "failed" else "warning"
    for anomaly in verdict["anomalies"]:
        print(f"{level}: data check {anomaly['kind']}: {anomaly['message']}", file=sys.stderr)
    if verdict["status"] == "failed":
        return exit_codes.DATA_ANOMALIES
    if verdict["anomalies"]:
        print(f"data: {len(verdict['anomalies'])} anomalies (warnings above)")
    else:
        print(verdict["line"])
    if verdict.get("report"):
        print(f"report: {verdict['report']}, {verdict['plot']}")
    return exit_codes.OK


if __name__ == "__main__":
    sys.exit(main())
