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
for Dataflow; with `kubernetes` it reattaches to the Jobs named after the run.
With `deferrable` (the default) the wait for a Vertex AI or Kubernetes training
happens in the triggerer and holds no worker slot; `execute_complete` finishes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException

from orchestration import lineage
from orchestration.launchers import (
    LauncherConfigError,
    TrainingFailed,
    TrainingJob,
    TrainingPreempted,
    TrainingRefused,
    failure,
    launcher_options,
)
from orchestration.resumable import RerunnableJobMixin, default_deferrable
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
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.shards_dir, self.train_dir, self.output_root = shards_dir, train_dir, output_root
        self.num_workers, self.train_flags = num_workers, train_flags
        self.launcher, self.launcher_options = launcher, launcher_options
        self.image, self.job_name, self.reuse_training = image, job_name, reuse_training
        self.gcp_conn_id, self.kubernetes_conn_id = gcp_conn_id, kubernetes_conn_id
        self.poll_interval = poll_interval
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.custom_job: dict = {}

    def execute(self, context) -> dict:
        from orchestration.reuse import discard_stale_training

        job = self._job()
        options = self._options(job)
        if stale := discard_stale_training(job.output, job.data):
            self.log.info("%s", stale)
        if self.reuse_training and (reused := self._finished_run(job)):
            return self._result(job, reused)
        with self._outcomes():
            self._launch(job, options, context)
        return self._result(job, job.output)

    def execute_complete(self, context, event: dict, external_id=None) -> dict:
        """The task's second half after a wait in the triggerer."""
        job = self._job()
        options = self._options(job)
        with self._outcomes():
            if self.launcher == "kubernetes":
                self._finish_kubernetes(job, options, event)
            else:
                self.result_after_trigger(context, event, external_id)
        return self._result(job, job.output)

    def _job(self) -> TrainingJob:
        return TrainingJob(
            self.shards_dir, self.train_dir, int(self.num_workers), dict(self.train_flags)
        )

    def _options(self, job: TrainingJob):
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
        return options

    @contextlib.contextmanager
    def _outcomes(self):
        """The trainers' exit, as what Airflow should do next."""
        try:
            yield
        except TrainingRefused as err:
            raise AirflowFailException(f"{err} (not retried: fix it and clear the task)") from None
        except TrainingPreempted as err:
            self.log.warning("%s; starting again from its checkpoint", err)
            raise AirflowRescheduleException(
                dt.datetime.now(tz=dt.UTC) + PREEMPTED_RESTART_DELAY
            ) from None

    def _launch(self, job: TrainingJob, options, context) -> None:
        if self.launcher == "kubernetes":
            from orchestration.launchers import kubernetes

            manifests = kubernetes.render(job, options, name=self.job_name, image=self.image)
            if not self.deferrable:
                kubernetes.submit(manifests, conn_id=self.kubernetes_conn_id)
                return
            if kubernetes.start_jobs(manifests, **kubernetes.clients(self.kubernetes_conn_id)):
                return  # an earlier try's Jobs already succeeded
            from orchestration.triggers import KubernetesJobsTrigger

            jobs = [m for m in manifests if m["kind"] == "Job"]
            self.log.info("training jobs submitted: waiting in the triggerer (no worker slot held)")
            self.defer(
                trigger=KubernetesJobsTrigger(
                    jobs, conn_id=self.kubernetes_conn_id, poll_seconds=self.poll_interval
                ),
                method_name="execute_complete",
            )
        elif self.launcher == "vertex":
            self.execute_resumable(context)
        else:
            from orchestration.launchers import local

            local.run(job, options, emit=print)

    def _finish_kubernetes(self, job: TrainingJob, options, event: dict) -> None:
        """Remove the Services (as the in-worker wait does), then the Jobs' outcome."""
        from orchestration.launchers import kubernetes

        manifests = kubernetes.render(job, options, name=self.job_name, image=self.image)
        api = kubernetes.clients(self.kubernetes_conn_id)
        kubernetes.remove_support(manifests, core=api["core"], batch=api["batch"], apps=api["apps"])
        if (event or {}).get("status") != "success":
            message, code = (event or {}).get("message", "no detail"), (event or {}).get("code")
            raise failure(code, message) if code is not None else TrainingFailed(message)

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

        if self.deferrable:
            from airflow.providers.google.cloud.triggers.vertex_ai import CustomJobTrigger

            self.wait_in_triggerer(
                CustomJobTrigger(
                    project_id=self.options.project,
                    location=self.options.region,
                    custom_job_id=external_id,
                    gcp_conn_id=self.gcp_conn_id,
                    poll_interval=self.poll_interval,
                ),
                external_id,
            )
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

    def job_failure(self, external_id, message: str) -> Exception:
        from orchestration.launchers.vertex import failure_from_error

        return failure_from_error(message)
