"""The sharding job's flags as the Airflow Beam operator passes them. Light: no Beam import."""

from __future__ import annotations

from collections.abc import Mapping

# Beam flags a user may not override through the extra options: the run layout owns them.
RESERVED = {"input", "output", "runner"}


def shard_job_options(params: Mapping, shards_dir: str) -> dict:
    """Job flags plus the user's extra Beam options (`params["beam_options"]`)."""
    extra = dict(params.get("beam_options") or {})
    clash = RESERVED & set(extra)
    if clash:
        raise ValueError(f"beam_options may not set {sorted(clash)}: use the DAG parameters")
    return {
        "input": params["input_uri"],
        "output": shards_dir,
        "max-side": params.get("max_side", 0),
        "max-error-fraction": params["max_error_fraction"],
        "min-shards": params["num_workers"],
        **extra,
    }


DATAFLOW_REQUIRED = ("project", "region", "temp_location")


def dataflow_config(params: Mapping) -> dict:
    """The Beam operator's `dataflow_config`, derived from the same `beam_options`.

    The operator waits for and links the Dataflow job by `dataflow_config`'s
    project and location, not by the pipeline options; left unset, it would
    poll the default region (us-central1) for a job launched elsewhere. So both
    are taken from the one place a user sets them. Empty for other runners.
    """
    if params.get("beam_runner") != "DataflowRunner":
        return {}
    extra = params.get("beam_options") or {}
    missing = [key for key in DATAFLOW_REQUIRED if not extra.get(key)]
    if missing:
        raise ValueError(f"DataflowRunner needs beam_options {missing} (see docs/deploy.md)")
    return {
        "project_id": extra["project"],
        "location": extra["region"],
        "job_name": "imagepipe-shard-images",
        "append_job_name": True,
    }
