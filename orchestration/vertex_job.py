"""A Vertex AI CustomJob that a retried task reconnects to instead of submitting again.

Imported only by `submit.submit_vertex`, inside the `train` task: it needs the
Airflow SDK and the Google provider at import time.

If the Airflow worker dies while the CustomJob trains, the task's retry would
otherwise create a second job on the same checkpoints. Airflow's
`ResumableJobMixin` keeps the job's id in the task's state store; the retry
reads it and waits for that job when it is still active, returns when it
already succeeded, and submits anew only after it failed. The id is forgotten
when the task succeeds (`orchestration.resumable`), so clearing the task trains
again.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.providers.google.cloud.hooks.vertex_ai.custom_job import CustomJobHook
from airflow.sdk import BaseOperator

from orchestration.resumable import RerunnableJobMixin

ACTIVE_STATES = frozenset(
    {"JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_UPDATING"}
)


class VertexTrainingJobOperator(RerunnableJobMixin, BaseOperator):
    external_id_key = "vertex_custom_job_id"

    def __init__(
        self,
        *,
        custom_job: dict,
        project_id: str,
        region: str,
        gcp_conn_id: str = "google_cloud_default",
        poll_interval: int = 30,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.custom_job = custom_job
        self.project_id = project_id
        self.region = region
        self.gcp_conn_id = gcp_conn_id
        self.poll_interval = poll_interval

    @cached_property
    def hook(self) -> CustomJobHook:
        return CustomJobHook(gcp_conn_id=self.gcp_conn_id)

    def execute(self, context):
        return self.execute_resumable(context)

    def submit_job(self, context) -> str:
        job = self.hook.create_custom_job(
            project_id=self.project_id, region=self.region, custom_job=self.custom_job
        )
        job_id = CustomJobHook.extract_custom_job_id(job.name)
        self.log.info("submitted Vertex AI CustomJob %s", job.name)
        return job_id

    def get_job_status(self, external_id, context) -> str:
        job = self.hook.get_custom_job(
            project_id=self.project_id, region=self.region, custom_job=external_id
        )
        return job.state.name

    def is_job_active(self, status: str) -> bool:
        return status in ACTIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status == "JOB_STATE_SUCCEEDED"

    def poll_until_complete(self, external_id, context) -> dict:
        # Raises on FAILED, CANCELLED, PAUSED, EXPIRED.
        self.hook.wait_for_custom_job(
            project_id=self.project_id,
            region=self.region,
            custom_job_id=external_id,
            poll_interval=self.poll_interval,
        )
        # The mixin returns this method's value when it reconnected (and calls
        # get_job_result itself only after a fresh submission).
        return self.get_job_result(external_id, context)

    def get_job_result(self, external_id, context) -> dict:
        context["ti"].xcom_push(key="custom_job_id", value=external_id)
        return {"custom_job_id": external_id}
