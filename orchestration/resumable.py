"""Reconnect-on-retry for remote jobs, forgotten once the task succeeds.

Airflow's `ResumableJobMixin` keeps the submitted job's id in the task's state
store, which survives retries (the point: a retry waits for the job an earlier
try submitted) and, unless `[state_store] clear_on_success` is set, survives
success too. Then a user who clears a succeeded task to rerun its stage would
get the old job's result back ("already succeeded") instead of a new job. The
id is therefore deleted when the try succeeds: retries still reconnect, and a
clear is a rerun, whatever the deployment's state-store settings.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.bases.resumablejobmixin import ResumableJobMixin


class RerunnableJobMixin(ResumableJobMixin):
    def execute_resumable(self, context) -> Any:
        result = super().execute_resumable(context)
        store = context.get("task_state_store")
        if store is not None:
            store.delete(self.external_id_key)
        return result
