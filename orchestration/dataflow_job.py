"""The sharding operator: a retried task reconnects to the Dataflow job an earlier try launched.

Beam's Python operator launches a new Dataflow job on every try (only its Java
twin checks for a running job, by name). If the Airflow worker dies while the
job shards, the retry would start a second job writing the same shards. Here
the job's id, known as soon as the launcher prints it, goes to the task's
state store before the wait starts; a retry waits for that job while it is
active, returns when it finished, and launches anew only after it failed or
was cancelled. The job's name is also fixed per DAG run
(`beam_options.dataflow_job_name`),
and Dataflow refuses a second active job of the same name in a region, which
closes the moment between launching and storing the id.

With `deferrable` (the default) the wait for a Dataflow job happens in the triggerer
(the Google provider's DataflowJobStatusTrigger) and holds no worker slot; the id is
stored before the task defers, so the reconnecting above holds for the second half too.
Beam's own `deferrable` is not used: for the runners below it would run the pipeline
inside the triggerer.

Other runners run inside the task's own process and have nothing to reattach
to: for them this is Beam's operator, with the job's exit code honoured
(stageconfig/exit_codes.py): a job that exits 1 (too many inputs rejected) or
2 (bad input) fails the task at once with the job's own one-line error, since a
retry would repeat it; any other failure is retried.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys

from airflow.providers.apache.beam.hooks.beam import BeamHook
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.google.cloud.hooks.dataflow import DataflowJobStatus
from airflow.providers.google.cloud.links.dataflow import DataflowJobLink
from airflow.providers.google.cloud.operators.dataflow import DataflowConfiguration
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from orchestration import lineage
from orchestration.resumable import RerunnableJobMixin, default_deferrable
from stageconfig import exit_codes

# How Beam's hook reports a pipeline process that exited non-zero.
_EXIT_CODE = re.compile(r"failed with return code (-?\d+)")

# Draining and cancelling jobs are ending, not working: a retry launches anew.
ACTIVE_STATES = frozenset(
    {
        DataflowJobStatus.JOB_STATE_PENDING,
        DataflowJobStatus.JOB_STATE_QUEUED,
        DataflowJobStatus.JOB_STATE_RUNNING,
        DataflowJobStatus.JOB_STATE_STOPPED,  # Dataflow: "not yet started"
    }
)


def _same_python(py_interpreter: str) -> bool:
    # Paths as given, not resolved: a virtual environment's python links to the system's.
    found = shutil.which(py_interpreter)
    return bool(found) and os.path.abspath(found) == os.path.abspath(sys.executable)


class JobOutputBeamHook(BeamHook):
    """Beam's hook, keeping the last `error: ...` line the job printed (its one-line
    reason for exit 1 or 2) for the task's failure message.

    When the job runs on the task's own Python, Beam's version is read from this
    environment's package metadata instead of the provider's probe, a second Python that
    imports Beam only to print its version: about 1.2 s of every sharding task, and the
    largest part of one whose shards are reused from the cache."""

    last_error = ""

    def start_python_pipeline(
        self,
        variables: dict,
        py_file: str,
        py_options: list[str],
        py_interpreter: str = "python3",
        py_requirements: list[str] | None = None,
        py_system_site_packages: bool = False,
        process_line_callback=None,
        is_dataflow_job_id_exist_callback=None,
    ):
        def keep_error_line(line: str) -> None:
            if line.startswith("error: "):
                self.last_error = line.strip()[len("error: ") :]
            if process_line_callback:
                process_line_callback(line)

        if py_requirements is not None or not _same_python(py_interpreter):
            return super().start_python_pipeline(
                variables=variables,
                py_file=py_file,
                py_options=py_options,
                py_interpreter=py_interpreter,
                py_requirements=py_requirements,
                py_system_site_packages=py_system_site_packages,
                process_line_callback=keep_error_line,
                is_dataflow_job_id_exist_callback=is_dataflow_job_id_exist_callback,
            )
        # What the provider's method does besides the probe (its check for Beam < 2.39
        # cannot fire here: this environment's Beam is the `beam` extra's pinned 2.77).
        if "labels" in variables:
            variables["labels"] = [f"{key}={value}" for key, value in variables["labels"].items()]
        self.log.info("Beam version: %s", importlib.metadata.version("apache-beam"))
        return self._start_pipeline(
            variables=variables,
            command_prefix=[py_interpreter, *py_options, py_file],
            process_line_callback=keep_error_line,
            is_dataflow_job_id_exist_callback=is_dataflow_job_id_exist_callback,
        )


def final_failure(err: Exception, last_error: str) -> AirflowFailException | None:
    """The task's no-retry failure for a job that exited with a final code, else None."""
    match = _EXIT_CODE.search(str(err))
    if not match or not exit_codes.is_final(int(match.group(1))):
        return None
    code = int(match.group(1))
    what = "too many inputs rejected" if code == exit_codes.TOO_MANY_REJECTED else "bad input"
    return AirflowFailException(
        f"the sharding job exited {code} ({what}; not retried): {last_error or 'see the log above'}"
    )


class ShardImagesOperator(RerunnableJobMixin, BeamRunPythonPipelineOperator):
    external_id_key = "dataflow_job_id"

    def __init__(self, *, deferrable: bool | None = None, **kwargs):
        super().__init__(deferrable=False, **kwargs)  # Beam's: see the module's docstring
        self.wait_deferred = default_deferrable() if deferrable is None else deferrable

    def execute(self, context):
        try:
            result = super().execute(context)
        except AirflowException as err:
            if final := final_failure(err, getattr(self.beam_hook, "last_error", "")):
                raise final from None
            raise
        return self._done(result)

    def execute_complete(self, context, event, external_id=None):
        """The task's second half after the Dataflow job's wait in the triggerer."""
        return self._done(self.result_after_trigger(context, event, external_id))

    def _done(self, result):
        lineage.record(
            inputs=[self.pipeline_options["input"]], outputs=[self.pipeline_options["output"]]
        )
        return result

    def job_failure(self, external_id, message: str) -> Exception:
        return AirflowException(f"Dataflow job {external_id}: {message}")  # retried

    def _init_pipeline_options(self, *args, **kwargs):
        options = super()._init_pipeline_options(*args, **kwargs)
        self.beam_hook = JobOutputBeamHook(runner=self.runner)  # the base sets a plain one
        return options

    def _cast_dataflow_config(self):
        # Beam's operator fills in a default configuration and then warns "dataflow_config is
        # defined but runner is different than DataflowRunner" on every run of another
        # runner; with none given there is nothing to warn about.
        if self.dataflow_config or self.runner.lower() == "dataflowrunner":
            return super()._cast_dataflow_config()
        self.dataflow_config = DataflowConfiguration(job_name=self.task_id)

    def execute_on_dataflow(self, context):
        return self.execute_resumable(context)

    def submit_job(self, context) -> str | None:
        # Returns as soon as the launcher has printed the job's id.
        self.beam_hook.start_python_pipeline(
            variables=self.snake_case_pipeline_options,
            py_file=self.py_file,
            py_options=self.py_options,
            py_interpreter=self.py_interpreter,
            py_requirements=self.py_requirements,
            py_system_site_packages=self.py_system_site_packages,
            process_line_callback=self.process_line_callback,
            is_dataflow_job_id_exist_callback=self.is_dataflow_job_id_exist_callback,
        )
        self.log.info("launched Dataflow job %s (%s)", self.dataflow_job_id, self.dataflow_job_name)
        return self.dataflow_job_id

    def get_job_status(self, external_id, context) -> str:
        job = self.dataflow_hook.get_job(
            job_id=external_id,
            project_id=self.dataflow_config.project_id,
            location=self.dataflow_config.location,
        )
        return job.get("currentState", DataflowJobStatus.JOB_STATE_UNKNOWN)

    def is_job_active(self, status: str) -> bool:
        return status in ACTIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status == DataflowJobStatus.JOB_STATE_DONE

    def poll_until_complete(self, external_id, context) -> dict:
        self.dataflow_job_id = external_id
        DataflowJobLink.persist(
            context=context,
            region=self.dataflow_config.location,
            job_id=external_id,
            project_id=self.dataflow_config.project_id,
        )
        if self.wait_deferred:
            from airflow.providers.google.cloud.triggers.dataflow import DataflowJobStatusTrigger

            self.wait_in_triggerer(
                DataflowJobStatusTrigger(
                    job_id=external_id,
                    expected_statuses={DataflowJobStatus.JOB_STATE_DONE},
                    project_id=self.dataflow_config.project_id,
                    location=self.dataflow_config.location,
                    gcp_conn_id=self.gcp_conn_id,
                    poll_sleep=self.dataflow_config.poll_sleep,
                ),
                external_id,
            )
        # Raises when the job fails or is cancelled.
        self.dataflow_hook.wait_for_done(
            job_name=self.dataflow_job_name,
            location=self.dataflow_config.location,
            job_id=external_id,
            project_id=self.dataflow_config.project_id,
        )
        return self.get_job_result(external_id, context)

    def get_job_result(self, external_id, context) -> dict:
        self.dataflow_job_id = external_id
        return {"dataflow_job_id": external_id}
