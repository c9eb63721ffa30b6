"""Waits that run in Airflow's triggerer instead of a worker slot, where a provider has none.

The Google provider's triggers wait for a Vertex AI CustomJob and a Dataflow job; the
cncf.kubernetes provider's job trigger follows the pods of one Job it started itself, not
the several Jobs of a multi-worker training that must all succeed. This trigger polls
those Jobs with the same one look (`kubernetes.jobs_done`) as the in-worker wait, so the
two paths cannot disagree on what a state means. The Kubernetes client is synchronous:
each look runs in a thread, and the triggerer's event loop is never blocked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from orchestration.launchers import TrainingFailed


class KubernetesJobsTrigger(BaseTrigger):
    """Fires once: "success" when every Job succeeded, else "failed" with the message
    and exit code (2: a trainer refused its input) the in-worker wait would have raised."""

    def __init__(
        self, jobs: list[dict], conn_id: str = "kubernetes_default", poll_seconds: float = 30.0
    ):
        super().__init__()
        self.jobs = jobs  # manifests of kind Job, or just their kind and metadata
        self.conn_id = conn_id
        self.poll_seconds = poll_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"jobs": self.jobs, "conn_id": self.conn_id, "poll_seconds": self.poll_seconds},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from orchestration.launchers import kubernetes

        try:
            batch = (await asyncio.to_thread(kubernetes.clients, self.conn_id))["batch"]
            while not await asyncio.to_thread(kubernetes.jobs_done, batch, self.jobs):
                await asyncio.sleep(self.poll_seconds)
        except TrainingFailed as err:  # TrainingRefused too: its code (2) says so
            yield TriggerEvent({"status": "failed", "message": str(err), "code": err.code})
            return
        except Exception as err:  # the API unreachable, credentials: the task retries
            yield TriggerEvent({"status": "failed", "message": f"{type(err).__name__}: {err}"})
            return
        yield TriggerEvent({"status": "success", "message": "every training job succeeded"})
