"""Each run's concrete lineage, images -> shards -> model -> published version, for OpenLineage.

The DAG's Assets (`imagepipe://.../shards`) say which task feeds which; the
folders a run actually read and wrote differ per run. Tasks report those here
through Airflow's hook-level lineage, which the OpenLineage provider, when it
is configured (off by default: no transport, no events), sends as the task's
input and output datasets (`file` or `gs` namespaces). With no lineage reader
installed, Airflow's collector ignores the calls.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def as_uri(path: str) -> str:
    """Local paths as file:// URIs (OpenLineage's `file` namespace); URIs as they are."""
    if "://" in path:
        return path.rstrip("/")
    return "file://" + os.path.abspath(path).rstrip("/")


def record(*, inputs: Iterable[str] = (), outputs: Iterable[str] = ()) -> None:
    from airflow.sdk import ObjectStoragePath
    from airflow.sdk.lineage import get_hook_lineage_collector

    collector = get_hook_lineage_collector()
    for path in inputs:
        uri = as_uri(path)
        collector.add_input_asset(context=ObjectStoragePath(uri), uri=uri)
    for path in outputs:
        uri = as_uri(path)
        collector.add_output_asset(context=ObjectStoragePath(uri), uri=uri)
