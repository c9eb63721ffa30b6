"""Where one pipeline run keeps its outputs. Light (no TensorFlow): the DAG imports it.

Every DAG run writes under its own folder keyed by its run id, so concurrent
runs never share files and a cleared task finds its upstream outputs again.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from runspec.layout import EVALUATION


def safe_run_id(run_id: str) -> str:
    """Airflow run ids hold ':' and '+' (manual__2026-01-01T00:00:00+00:00)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._")
    if not cleaned:
        raise ValueError(f"run id {run_id!r} has no usable characters")
    return cleaned


def shard_cache_dir(output_root: str) -> str:
    """Index of finished shard outputs by input fingerprint, shared by all runs."""
    return posixpath.join(output_root.rstrip("/"), "shard_cache")


@dataclass(frozen=True)
class RunPaths:
    root: str

    @classmethod
    def for_run(cls, output_root: str, run_id: str) -> RunPaths:
        return cls(posixpath.join(output_root.rstrip("/"), "runs", safe_run_id(run_id)))

    @property
    def shards(self) -> str:
        return posixpath.join(self.root, "shards")

    @property
    def data_check(self) -> str:
        """The check_data task's report and plot (datacheck.run)."""
        return posixpath.join(self.root, "data_check")

    @property
    def train(self) -> str:
        return posixpath.join(self.root, "train")

    @property
    def evaluation(self) -> str:
        return posixpath.join(self.root, EVALUATION)
