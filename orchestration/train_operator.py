"""The training operator: the DAG's `train` task, whichever launcher runs it.

It checks the launcher's options, removes a run folder trained on shards that
were re-made since, reuses a finished run when asked, starts the trainers
through the launcher's module and returns the run's result (RunRecord) for
XCom. The trainers' exit code decides what Airflow does next
(stageconfig/exit_codes.py): 2 (bad parameters or unusable shards) fails the
task without retries, 75 (preempted, checkpoint saved) reschedules it without
counting a try, anything else is an ordinary failure that Airflow retries.
With the `vertex` launcher a retry reconnects to the CustomJob an earlier try
submitted (its id is in the task's state store), as `ShardImagesOperator` does
for Dataflow.
"""

from __future__ import annotations

import datetime as dt
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException

from orchestration import lineage
from orchestration.launchers import (
    LauncherConfigError,
    TrainingJob,
    TrainingPreempted,
    TrainingRefused,
    launcher_options,
)
from orchestration.resumable import RerunnableJobMixin
from runspec.record import read_training_result

# A preempted run starts again after this, without counting a try.
PREEMPTED_RESTART_DELAY = dt.timedelta(seconds=30)


class TrainModelOperator(RerunnableJobMixin, BaseOperator):
    template_fields = (
        "shards_dir",
        "train_dir",
        "output_root",
        "num_workers",
        "train_flags",
        "launcher",
        "launcher_options",
        "reuse_training",
        "job_name",
    )
    external_id_key = "vertex_custom_job_id"

    def __init__(
        self,
        *,
        shards_dir: str,
        train_dir: str,
        output_root: str,
        num_workers: int | str,
        train_flags: dict | str,
        launcher: str,
        launcher_options: dict | str,
        image: str,
        job_name: str,
        reuse_training: bool | str = False,
        gcp_conn_id: str = "google_cloud_default",
        kubernetes_conn_id: str = "kubernetes_default",
        poll_interval: int = 30,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.shards_dir, self.train_dir, self.output_root = shards_dir, train_dir, output_root
        self.num_workers, self.train_flags = num_workers, train_flags
        self.launcher, self.launcher_options = launcher, launcher_options
        self.image, self.job_name, self.reuse_training = image, job_name, reuse_training
        self.gcp_conn_id, self.kubernetes_conn_id = gcp_conn_id, kubernetes_conn_id
        self.poll_interval = poll_interval
        self.custom_job: dict = {}

    def execute(self, context) -> dict:
        from orchestration.reuse import discard_stale_training

        job = TrainingJob(
            self.shards_dir, self.train_dir, int(self.num_workers), dict(self.train_flags)
        )
        try:
            options = launcher_options(self.launcher, self.launcher_options)
            if self.launcher == "vertex":
                from orchestration.launchers import vertex

                self.options = options
                self.custom_job = vertex.render(
                    job, options, display_name=self.job_name, image=self.image
                )
        except LauncherConfigError as err:
            raise AirflowFailException(str(err)) from None  # a setting to fix, not to retry
        if stale := discard_stale_training(job.output, job.data):
            self.log.info("%s", stale)
        if self.reuse_training and (reused := self._finished_run(job)):
            return self._result(job, reused)
        try:
            self._launch(job, options, context)
        except TrainingRefused as err:
            raise AirflowFailException(f"{err} (not retried: fix it and clear the task)") from None
        except TrainingPreempted as err:
            self.log.warning("%s; starting again from its checkpoint", err)
            raise AirflowRescheduleException(
                dt.datetime.now(tz=dt.UTC) + PREEMPTED_RESTART_DELAY
            ) from None
        return self._result(job, job.output)

    def _launch(self, job: TrainingJob, options, context) -> None:
        if self.launcher == "kubernetes":
            from orchestration.launchers import kubernetes

            manifests = kubernetes.render(job, options, name=self.job_name, image=self.image)
            kubernetes.submit(manifests, conn_id=self.kubernetes_conn_id)
        elif self.launcher == "vertex":
            self.execute_resumable(context)
        else:
            from orchestration.launchers import local

            local.run(job, options, emit=print)

    def _finished_run(self, job: TrainingJob) -> str | None:
        from orchestration.reuse import find_finished_training, shards_fingerprint

        reused = find_finished_training(
            self.output_root,
            fingerprint=shards_fingerprint(job.data),
            train_flags=job.train_flags,
            num_workers=job.num_workers,
            exclude=job.output,
        )
        if reused:
            print(f"reuse_training: {reused} trained on the same shards content with the "
                  "same parameters and finished; not training again")  # fmt: skip
        else:
            print("reuse_training: no finished run matches; training")
        return reused

    def _result(self, job: TrainingJob, train_dir: str) -> dict:
        result = read_training_result(train_dir)
        lineage.record(inputs=[job.data], outputs=[result["model_dir"]])
        return result

    # The vertex launcher's CustomJob, through RerunnableJobMixin.
    @cached_property
    def hook(self):
        from airflow.providers.google.cloud.hooks.vertex_ai.custom_job import CustomJobHook

        return CustomJobHook(gcp_conn_id=self.gcp_conn_id)

    def submit_job(self, context) -> str:
        from airflow.providers.google.cloud.hooks.vertex_ai.custom_job import CustomJobHook

        job = self.hook.create_custom_job(
            project_id=self.options.project,
            region=self.options.region,
            custom_job=self.custom_job,
        )
        self.log.info("submitted Vertex AI CustomJob %s", job.name)
        return CustomJobHook.extract_custom_job_id(job.name)

    def get_job_status(self, external_id, context) -> str:
        job = self.hook.get_custom_job(
            project_id=self.options.project, region=self.options.region, custom_job=external_id
        )
        return job.state.name

    def is_job_active(self, status: str) -> bool:
        from orchestration.launchers.vertex import ACTIVE_STATES

        return status in ACTIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status == "JOB_STATE_SUCCEEDED"

    def poll_until_complete(self, external_id, context) -> dict:
        from orchestration.launchers.vertex import failure_from_error

        try:
            self.hook.wait_for_custom_job(
                project_id=self.options.project,
                region=self.options.region,
                custom_job_id=external_id,
                poll_interval=self.poll_interval,
            )
        except RuntimeError as err:  # the hook's word for FAILED, CANCELLED, EXPIRED
            raise failure_from_error(str(err)) from None
        # The mixin returns this value when it reconnected (and calls get_job_result
        # itself only after a fresh submission).
        return self.get_job_result(external_id, context)

    def get_job_result(self, external_id, context) -> dict:
        context["ti"].xcom_push(key="custom_job_id", value=external_id)
        return {"custom_job_id": external_id}
