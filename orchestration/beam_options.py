"""The sharding job's flags as the Airflow Beam operator passes them. Light: no Beam import."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping


def _key(flag: str) -> str:
    return flag.lstrip("-").replace("_", "-")


def shard_job_options(params: Mapping, shards_dir: str, cache_dir: str | None = None) -> dict:
    """Job flags plus the user's extra Beam options (`params["beam_options"]`).

    The extra options may add flags (Dataflow settings, or job flags the DAG has
    no Param for, such as compression) but never override one the run sets, in
    any spelling (`max_side`, `--max-side`): a Param must mean what it says.
    """
    job = {
        "input": params["input_uri"],
        "output": shards_dir,
        "max-side": params.get("max_side", 0),
        "max-error-fraction": params["max_error_fraction"],
        "min-shards": params["num_workers"],
    }
    if params.get("near_duplicate_distance") is not None:
        job["near-duplicate-distance"] = params["near_duplicate_distance"]
    if params.get("force_reshard"):
        job["force-reshard"] = True
    if params.get("leak_free_splits"):
        job["leak-free-splits"] = True
    if cache_dir:
        job["cache-dir"] = cache_dir
    extra = dict(params.get("beam_options") or {})
    clash = sorted(
        k
        for k in extra
        if _key(k) in {*job, "runner", "force-reshard", "leak-free-splits", "cache-dir"}
    )
    if clash:
        raise ValueError(
            f"beam_options may not set {clash}: the run sets them from its parameters "
            "(beam_runner, input_uri, max_side, ...)"
        )
    return {**job, **extra}


DATAFLOW_REQUIRED = ("project", "region", "temp_location")


def dataflow_job_name(run_id: str, prefix: str = "imagepipe-shard") -> str:
    """One Dataflow job name per DAG run, readable, matching `[a-z]([-a-z0-9]*[a-z0-9])?`."""
    slug = re.sub(r"[^a-z0-9]+", "-", run_id.lower()).strip("-")[:38].strip("-")
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


def dataflow_config(params: Mapping, run_id: str) -> dict:
    """The Beam operator's `dataflow_config`, derived from the same `beam_options`.

    The operator waits for and links the Dataflow job by `dataflow_config`'s
    project and location, not by the pipeline options; left unset, it would
    poll the default region (us-central1) for a job launched elsewhere. So both
    are taken from the one place a user sets them. The job's name is the run's,
    so a retry can never have two jobs of one run active at once. Empty for
    other runners.
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
        "job_name": dataflow_job_name(run_id),
        "append_job_name": False,
    }
