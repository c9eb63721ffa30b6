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
