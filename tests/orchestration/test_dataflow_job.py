"""A retried `shard_images` task reconnects to the Dataflow job an earlier try launched.

Beam's own operator is run with its two network edges replaced by recorders:
the launcher subprocess (which prints the new job's id, as Beam's Dataflow
runner does) and the Dataflow API (job state, wait). The task's state store is
the dict the task runner would hand over.
"""

import logging
import sys
from types import SimpleNamespace

import pytest
from airflow.providers.apache.beam.hooks.beam import BeamHook
from airflow.providers.google.cloud.hooks.dataflow import DataflowHook
from airflow.providers.google.cloud.links.dataflow import DataflowJobLink
from airflow.providers.google.cloud.triggers.dataflow import DataflowJobStatusTrigger
from airflow.sdk.exceptions import TaskDeferred

from orchestration.beam_options import dataflow_config, dataflow_job_name
from orchestration.dataflow_job import ACTIVE_STATES, ShardImagesOperator
from tests.orchestration.state_store import StateStore
from tests.orchestration.trigger_events import first_event

RUN_ID = "scheduled__2026-12-03T00:00:00+00:00"
PARAMS = {
    "beam_runner": "DataflowRunner",
    "beam_options": {"project": "acme", "region": "europe-west1", "temp_location": "gs://t/tmp"},
}
FORGET = ("forget", "dataflow_job_id")


class FakeDataflow:
    """Jobs by id -> state; launching prints the id the way Beam's Dataflow runner logs it."""

    def __init__(self, states: dict[str, str], events: list):
        self.states = states
        self.events = events
        self.names: list[str] = []

    def launch(self, *, variables, process_line_callback, **_):
        job_id = f"2026-12-03_00_00_00-{len(self.states)}"
        self.states[job_id] = "JOB_STATE_PENDING"
        self.names.append(variables["job_name"])
        self.events.append(("launch", variables["job_name"]))
        process_line_callback(f"INFO:apache_beam.runners.dataflow: Created job with id: [{job_id}]")

    def get_job(self, *, job_id, project_id, location):
        assert (project_id, location) == ("acme", "europe-west1")
        return {"id": job_id, "currentState": self.states[job_id]}

    def wait_for_done(self, *, job_name, location, job_id, project_id, **_):
        self.events.append(("wait", job_id))
        self.states[job_id] = "JOB_STATE_DONE"


class FakeAsyncDataflow:
    """What the provider's DataflowJobStatusTrigger asks, answered from the same jobs."""

    def __init__(self, fake: FakeDataflow):
        self.fake = fake

    async def get_job_status(self, job_id, project_id, location):
        assert (project_id, location) == ("acme", "europe-west1")
        if self.fake.states[job_id] in ACTIVE_STATES:  # the job runs to its end
            self.fake.wait_for_done(job_name="", location=location, job_id=job_id, project_id="")
        return SimpleNamespace(name=self.fake.states[job_id])


# The wait in a worker slot (deferrable off), and in the triggerer (the default): the
# same calls to Dataflow, in the same order, either way.
@pytest.fixture(params=["worker", "triggerer"])
def run(monkeypatch, request):
    waits_in = request.param

    def run(states: dict[str, str], store: StateStore) -> tuple[FakeDataflow, dict]:
        fake = FakeDataflow(states, store.events)
        # A keyless connection (credentials would come from ADC), as on Composer/GKE.
        monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", "google-cloud-platform://")
        monkeypatch.setattr(BeamHook, "_start_pipeline", fake.launch)
        monkeypatch.setattr(DataflowHook, "get_job", fake.get_job)
        monkeypatch.setattr(DataflowHook, "wait_for_done", fake.wait_for_done)
        monkeypatch.setattr(DataflowJobLink, "persist", lambda **_: None)
        operator = ShardImagesOperator(
            task_id="shard_images",
            py_file="beam_jobs.shard_images",
            py_options=["-m"],
            py_interpreter=sys.executable,  # as the DAG gives it
            runner="DataflowRunner",
            pipeline_options={"input": "gs://in", "output": "gs://out"},
            dataflow_config=dataflow_config(PARAMS, RUN_ID),
            deferrable=waits_in == "triggerer",
        )
        pushed: dict = {}
        push = lambda key, value: pushed.update({key: value})  # noqa: E731
        context = {"task_state_store": store, "ti": SimpleNamespace(stats_tags={}, xcom_push=push)}
        try:
            result = operator.execute(context)
            deferred = None
        except TaskDeferred as err:
            deferred = err
            assert isinstance(err.trigger, DataflowJobStatusTrigger)
            assert err.trigger.job_id == err.kwargs["external_id"] == store["dataflow_job_id"]
            err.trigger.__dict__["async_hook"] = FakeAsyncDataflow(fake)
            result = operator.execute_complete(context, first_event(err.trigger), **err.kwargs)
        # Deferred exactly when it waits for a job, and only in the triggerer mode.
        waited = any(event[0] == "wait" for event in store.events)
        assert (deferred is not None) == (waits_in == "triggerer" and waited)
        # The job's id also goes to XCom, where the UI's Dataflow link reads it.
        assert pushed == {"dataflow_job_id": result["dataflow_job_id"]}
        return fake, result

    return run


def test_first_try_stores_the_job_id_before_waiting(run):
    store = StateStore()
    _, result = run({}, store)
    job = result["dataflow_job_id"]
    name = dataflow_job_name(RUN_ID)
    assert store.events == [("launch", name), ("store", job), ("wait", job), FORGET]


@pytest.mark.parametrize("state", ["JOB_STATE_RUNNING", "JOB_STATE_PENDING", "JOB_STATE_QUEUED"])
def test_a_retry_waits_for_the_active_job_instead_of_launching_another(run, state):
    store = StateStore(dataflow_job_id="j1")
    _, result = run({"j1": state}, store)
    assert store.events == [("wait", "j1"), FORGET] and result["dataflow_job_id"] == "j1"


def test_a_retry_after_the_job_finished_neither_launches_nor_waits(run):
    store = StateStore(dataflow_job_id="j1")
    _, result = run({"j1": "JOB_STATE_DONE"}, store)
    assert store.events == [FORGET] and result["dataflow_job_id"] == "j1"


@pytest.mark.parametrize("state", ["JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_DRAINING"])
def test_a_retry_after_the_job_failed_launches_a_new_one(run, state):
    store = StateStore(dataflow_job_id="j1")
    _, result = run({"j1": state}, store)
    job = result["dataflow_job_id"]
    assert job != "j1"
    name = dataflow_job_name(RUN_ID)  # the same name: the failed job is no longer active
    assert store.events == [("launch", name), ("store", job), ("wait", job), FORGET]


def test_clearing_a_succeeded_task_shards_again_under_the_same_name(run):
    store, states = StateStore(), {}
    first, _ = run(states, store)
    second, _ = run(states, store)
    assert len(states) == 2 and first.names == second.names == [dataflow_job_name(RUN_ID)]


def test_job_names_are_valid_for_dataflow_and_one_per_run():
    names = {
        dataflow_job_name(run_id)
        for run_id in (RUN_ID, "manual__2026-12-03T00:00:00+00:00", "Ünïcode run", "___", "x" * 300)
    }
    assert len(names) == 5
    for name in names:
        assert DataflowHook.build_dataflow_job_name(name, append_job_name=False) == name
        assert len(name) <= 64
    assert dataflow_job_name(RUN_ID) == dataflow_job_name(RUN_ID)


def test_a_local_run_does_not_warn_about_a_dataflow_config_it_was_not_given(
    monkeypatch, caplog, capsys
):
    launched = []
    monkeypatch.setattr(BeamHook, "_start_pipeline", lambda _, **kw: launched.append(kw))
    operator = ShardImagesOperator(
        task_id="shard_images",
        py_file="beam_jobs.shard_images",
        py_options=["-m"],
        py_interpreter=sys.executable,
        runner="DirectRunner",
        pipeline_options={"input": "/in", "output": "/out"},
        dataflow_config=dataflow_config({"beam_runner": "DirectRunner"}, RUN_ID),
    )
    with caplog.at_level(logging.WARNING):
        operator.execute({"ti": SimpleNamespace(stats_tags={}, xcom_push=lambda *_: None)})
    assert len(launched) == 1 and launched[0]["variables"]["output"] == "/out"
    logged = caplog.text + capsys.readouterr().out  # Airflow's task logger is structlog
    assert "Task Runner" in logged  # (this test calls execute directly: the logger is seen)
    assert "dataflow_config is defined" not in logged


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "final"), [(1, True), (2, True), (3, False), (-9, False)], ids=str
)
def test_the_jobs_exit_code_decides_whether_the_task_is_retried(tmp_path, code, final):
    """1 (too many rejected) and 2 (bad input) fail at once with the job's own line; a
    crash (3, or a kill) stays an ordinary failure, which Airflow retries."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    job = tmp_path / "job.py"
    job.write_text(
        "import os, sys\n"
        "print('sharding...')\n"
        f"print('error: the reason for {code}', file=sys.stderr)\n"
        f"sys.stdout.flush(); sys.stderr.flush(); os._exit({code} % 256)\n"
    )
    operator = ShardImagesOperator(
        task_id="shard_images",
        py_file=str(job),
        py_options=[],
        py_interpreter=sys.executable,
        runner="DirectRunner",
        pipeline_options={"input": "/in", "output": "/out"},
    )
    with pytest.raises(AirflowException) as raised:
        operator.execute({"ti": SimpleNamespace(stats_tags={}, xcom_push=lambda *_: None)})
    assert isinstance(raised.value, AirflowFailException) == final
    if final:
        assert str(raised.value) == (
            f"the sharding job exited {code} ("
            + ("too many inputs rejected" if code == 1 else "bad input")
            + f"; not retried): the reason for {code}"
        )


def test_a_job_failing_in_the_triggerer_fails_the_task_for_a_retry_and_keeps_its_id(
    monkeypatch,
):
    """The trigger reports a failed job; the task fails (retried, as a failed wait in a
    worker is) with the job's state in its message, and the id stays for the retry."""
    from airflow.sdk.exceptions import AirflowException

    store = StateStore()
    fake = FakeDataflow({}, store.events)
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", "google-cloud-platform://")
    monkeypatch.setattr(BeamHook, "_start_pipeline", fake.launch)
    monkeypatch.setattr(DataflowJobLink, "persist", lambda **_: None)
    operator = ShardImagesOperator(
        task_id="shard_images", py_file="beam_jobs.shard_images", py_options=["-m"],
        py_interpreter=sys.executable, runner="DataflowRunner",
        pipeline_options={"input": "gs://in", "output": "gs://out"},
        dataflow_config=dataflow_config(PARAMS, RUN_ID),
    )  # fmt: skip
    ti = SimpleNamespace(stats_tags={}, xcom_push=lambda key, value: None)
    context = {"task_state_store": store, "ti": ti}
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)
    job = deferred.value.kwargs["external_id"]
    fake.states[job] = "JOB_STATE_FAILED"
    deferred.value.trigger.__dict__["async_hook"] = FakeAsyncDataflow(fake)
    event = first_event(deferred.value.trigger)
    with pytest.raises(AirflowException, match=f"Dataflow job {job}:.*JOB_STATE_FAILED"):
        operator.execute_complete(context, event, **deferred.value.kwargs)
    assert store["dataflow_job_id"] == job


def test_a_job_on_the_tasks_own_python_starts_no_version_probe(monkeypatch):
    """The provider's hook starts a Python that imports Beam only to print its version
    (1.2 s of every sharding task); on the task's own interpreter the version is this
    environment's and the only process started is the job's, with the provider's labels."""
    import airflow.providers.apache.beam.hooks.beam as provider

    from orchestration.dataflow_job import JobOutputBeamHook

    probes, started = [], []
    monkeypatch.setattr(
        provider.subprocess, "check_output", lambda *a, **_: probes.append(a) or b"2.99.0\n"
    )
    monkeypatch.setattr(BeamHook, "_start_pipeline", lambda _, **kw: started.append(kw))
    hook = JobOutputBeamHook(runner="DirectRunner")
    variables = {"output": "/out", "labels": {"team": "vision"}}
    hook.start_python_pipeline(
        variables=dict(variables),
        py_file="beam_jobs.shard_images",
        py_options=["-m"],
        py_interpreter=sys.executable,
    )
    assert probes == []
    assert started[0]["command_prefix"] == [sys.executable, "-m", "beam_jobs.shard_images"]
    assert started[0]["variables"]["labels"] == ["team=vision"]
    # Another interpreter may hold another Beam: the provider's own path, probe included.
    hook.start_python_pipeline(
        variables=dict(variables),
        py_file="beam_jobs.shard_images",
        py_options=["-m"],
        py_interpreter="/opt/other/bin/python3",
    )
    assert len(probes) == 1 and started[1]["command_prefix"][0] == "/opt/other/bin/python3"
