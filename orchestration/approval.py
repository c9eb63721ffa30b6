"""An optional human approval between evaluation and publishing (Param `require_approval`).

Airflow's own human-in-the-loop `ApprovalOperator` (standard provider): the run
waits on the UI's Required Actions page (or `PATCH .../hitlDetails` on the REST
API) for Approve or Reject; Reject skips `publish`. With the Param off (the
default) the task passes at once, so every run has the same shape: the graph,
clearing and the docs do not change with a Param.
"""

from __future__ import annotations

import datetime as dt

from airflow.providers.standard.operators.hitl import ApprovalOperator

# A run nobody answers fails after this, without publishing.
RESPONSE_TIMEOUT = dt.timedelta(days=7)


class PublishApprovalOperator(ApprovalOperator):
    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("response_timeout", RESPONSE_TIMEOUT)
        super().__init__(**kwargs)

    def execute(self, context):
        if not context["params"].get("require_approval"):
            self.log.info("require_approval is off: publishing without asking")
            return None
        evaluated = context["ti"].xcom_pull(task_ids="evaluate") or {}
        if not (evaluated.get("verdict") or {}).get("blessed", True):
            # Nothing to approve: publish skips it with the reason (the verdict).
            self.log.info("not blessed against the serving model: nobody is asked")
            return None
        return super().execute(context)

    def execute_complete(self, context, event):
        if self.REJECT in (event.get("chosen_options") or []):
            # Before Airflow's own handling, which ends the task by skipping publish.
            from orchestration.run_note import note_this_run

            note_this_run(context, not_published=f"rejected by {_who(event)} in the approval step")
        return super().execute_complete(context, event)


def _who(event) -> str:
    user = event.get("responded_by_user") or {}  # a HITLUser: {"id": ..., "name": ...}
    return user.get("name") or user.get("id") or "a person"
