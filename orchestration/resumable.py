"""Reconnect-on-retry for remote jobs, forgotten once the task succeeds.

Airflow's `ResumableJobMixin` keeps the submitted job's id in the task's state
store, which survives retries (the point: a retry waits for the job an earlier
try submitted) and, unless `[state_store] clear_on_success` is set, survives
success too. Then a user who clears a succeeded task to rerun its stage would
get the old job's result back ("already succeeded") instead of a new job. The
id is therefore deleted when the try succeeds: retries still reconnect, and a
clear is a rerun, whatever the deployment's state-store settings.

With `deferrable` (the default; a deployment without a triggerer sets
AIRFLOW__IMAGEPIPE__DEFERRABLE=False) the wait itself happens in the triggerer, not in a
worker slot: a job of hours holds no slot. Airflow's own `[operators] default_deferrable`
is off by default and is not read: the providers' operators would then run a local Beam
pipeline inside the triggerer. The id is stored before the task defers, so a task whose worker died
before deferring, or whose resumed half failed and is retried, still reconnects.
"""

from __future__ import annotations

from typing import Any

from airflow.configuration import conf
from airflow.sdk.bases.resumablejobmixin import ResumableJobMixin


def default_deferrable() -> bool:
    return conf.getboolean("imagepipe", "deferrable", fallback=True)


class RerunnableJobMixin(ResumableJobMixin):
    def execute_resumable(self, context) -> Any:
        result = super().execute_resumable(context)
        store = context.get("task_state_store")
        if store is not None:
            store.delete(self.external_id_key)
        return result

    def wait_in_triggerer(self, trigger, external_id) -> None:
        """Hand the wait for `external_id` to the triggerer; `execute_complete` resumes
        the task with the trigger's event (raises TaskDeferred)."""
        self.log.info("job %s: waiting in the triggerer (no worker slot held)", external_id)
        self.defer(
            trigger=trigger, method_name="execute_complete", kwargs={"external_id": external_id}
        )

    def result_after_trigger(self, context, event: dict | None, external_id) -> Any:
        """What `execute_resumable` returns after an in-worker wait, from a trigger's
        event: the job's result with its id forgotten, or the failure a wait in the
        worker would have raised (`job_failure`)."""
        event = event or {}
        if event.get("status") != "success":
            raise self.job_failure(external_id, str(event.get("message") or "no detail"))
        result = self.get_job_result(external_id, context)
        store = context.get("task_state_store")
        if store is not None:
            store.delete(self.external_id_key)
        return result

    def job_failure(self, external_id, message: str) -> Exception:
        raise NotImplementedError
