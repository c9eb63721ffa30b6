"""A retried `train` task (vertex launcher) reconnects to the CustomJob an earlier try
submitted, and a failed job's exit status decides whether the task is retried.

The provider's hook is replaced by recorders (the calls it would send); the task's
state store is Airflow's interface held in a dict, as the task runner provides it.
The run folder's result (gs://, read after the job) is replaced too.
"""

from types import SimpleNamespace

import pytest
from airflow.providers.google.cloud.triggers.vertex_ai import CustomJobTrigger
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException, TaskDeferred
from google.cloud.aiplatform_v1.types import CustomJob, JobState

from orchestration import train_operator
from orchestration.launchers import TrainingFailed
from orchestration.train_operator import TrainModelOperator
from tests.orchestration.state_store import StateStore
from tests.orchestration.trigger_events import first_event


class FakeHook:
    def __init__(self, states: dict[str, str], calls: list):
        self.states = states  # job id -> JOB_STATE_*
        self.calls = calls

    def create_custom_job(self, project_id, region, custom_job):
        job_id = str(100 + len(self.states))
        self.states[job_id] = "JOB_STATE_PENDING"
        self.calls.append(("create", custom_job["display_name"]))
        return SimpleNamespace(name=f"projects/{project_id}/locations/{region}/customJobs/{job_id}")

    def get_custom_job(self, project_id, region, custom_job):
        return SimpleNamespace(state=SimpleNamespace(name=self.states[custom_job]))

    def wait_for_custom_job(self, project_id, region, custom_job_id, poll_interval):
        self.calls.append(("wait", custom_job_id))
        self.states[custom_job_id] = "JOB_STATE_SUCCEEDED"


class FakeAsyncHook:
    """What the provider's CustomJobTrigger asks, answered from the same jobs: its
    wait polls until the job ends, then returns it or raises with the job's error."""

    def __init__(self, hook: FakeHook, error: str = ""):
        self.hook, self.error = hook, error

    async def wait_for_custom_job(self, project_id, location, job_id, poll_interval):
        assert (project_id, location) == ("p", "europe-west4")
        self.hook.calls.append(("wait", job_id))
        if self.error:
            self.hook.states[job_id] = "JOB_STATE_FAILED"
            raise RuntimeError(self.error)
        self.hook.states[job_id] = "JOB_STATE_SUCCEEDED"
        return CustomJob(name=job_id, state=JobState.JOB_STATE_SUCCEEDED)


@pytest.fixture(params=["worker", "triggerer"])
def waits_in(request):
    """The wait in a worker slot, and in the triggerer (the default): the calls to
    Vertex AI are the same, in the same order."""
    return request.param


def _execute(
    states: dict[str, str],
    store: StateStore,
    monkeypatch,
    waits_in: str = "worker",
    job_error: str = "",
) -> tuple[FakeHook, str]:
    operator = TrainModelOperator(
        task_id="train",
        shards_dir="gs://b/runs/r1/shards",
        train_dir="gs://b/runs/r1/train",
        output_root="gs://b",
        num_workers=2,
        train_flags={},
        launcher="vertex",
        launcher_options={"project": "p", "region": "europe-west4"},
        image="trainer:1",
        job_name="imagepipe-r1",
        deferrable=waits_in == "triggerer",
    )
    hook = FakeHook(states, store.events)
    operator.__dict__["hook"] = hook  # the cached_property's slot
    monkeypatch.setattr("orchestration.reuse.discard_stale_training", lambda *_: "")
    monkeypatch.setattr(train_operator, "read_training_result", lambda d: {"model_dir": d})
    monkeypatch.setattr(train_operator.lineage, "record", lambda **_: None)
    pushed: dict = {}
    ti = SimpleNamespace(stats_tags={}, xcom_push=lambda key, value: pushed.update({key: value}))
    context = {"task_state_store": store, "ti": ti}
    try:
        result = operator.execute(context)
    except TaskDeferred as deferred:
        assert waits_in == "triggerer"
        trigger = deferred.trigger
        assert isinstance(trigger, CustomJobTrigger)
        assert (
            trigger.custom_job_id == deferred.kwargs["external_id"] == store["vertex_custom_job_id"]
        )
        trigger.__dict__["async_hook"] = FakeAsyncHook(hook, job_error)
        result = operator.execute_complete(context, first_event(trigger), **deferred.kwargs)
    assert result == {"model_dir": "gs://b/runs/r1/train"}
    return hook, pushed["custom_job_id"]


FORGET = ("forget", "vertex_custom_job_id")


def test_first_try_stores_the_job_id_before_waiting_and_forgets_it_on_success(
    monkeypatch, waits_in
):
    store = StateStore()
    hook, job_id = _execute({}, store, monkeypatch, waits_in)
    assert hook.calls == [("create", "imagepipe-r1"), ("store", "100"), ("wait", "100"), FORGET]
    assert job_id == "100" and store == {}


@pytest.mark.parametrize("state", ["JOB_STATE_RUNNING", "JOB_STATE_PENDING", "JOB_STATE_QUEUED"])
def test_a_retry_reconnects_to_the_active_job_instead_of_submitting_another(
    state, monkeypatch, waits_in
):
    store = StateStore(vertex_custom_job_id="7")
    hook, job_id = _execute({"7": state}, store, monkeypatch, waits_in)
    assert hook.calls == [("wait", "7"), FORGET]
    assert job_id == "7"


def test_a_retry_after_the_job_succeeded_neither_submits_nor_waits(monkeypatch, waits_in):
    store = StateStore(vertex_custom_job_id="7")
    hook, job_id = _execute({"7": "JOB_STATE_SUCCEEDED"}, store, monkeypatch, waits_in)
    assert hook.calls == [FORGET] and job_id == "7"


def test_a_retry_after_the_job_failed_submits_a_new_one(monkeypatch, waits_in):
    store = StateStore(vertex_custom_job_id="7")
    hook, job_id = _execute({"7": "JOB_STATE_FAILED"}, store, monkeypatch, waits_in)
    new = job_id
    assert new != "7"
    assert hook.calls == [("create", "imagepipe-r1"), ("store", new), ("wait", new), FORGET]


def test_clearing_a_succeeded_task_trains_again(monkeypatch, waits_in):
    store = StateStore()
    states: dict[str, str] = {}
    _execute(states, store, monkeypatch, waits_in)
    # The same task instance, cleared by a user.
    hook, job_id = _execute(states, store, monkeypatch, waits_in)
    assert job_id == "101"
    assert hook.calls.count(("create", "imagepipe-r1")) == 2


@pytest.mark.parametrize(
    ("status", "expected"),
    [(2, AirflowFailException), (75, AirflowRescheduleException), (1, TrainingFailed)],
)
def test_a_job_failing_in_the_triggerer_fails_the_task_as_a_wait_in_a_worker_does(
    monkeypatch, status, expected
):
    """The trigger's error event carries the job's message; its replica's exit status
    decides, as in the worker: 2 not retried, 75 rescheduled, others retried."""
    message = f"The replica workerpool0-0 exited with a non-zero status of {status}."
    store = StateStore()
    with pytest.raises(expected) as raised:
        _execute({}, store, monkeypatch, waits_in="triggerer", job_error=message)
    assert "non-zero status of" in str(raised.value) or expected is AirflowRescheduleException
    assert "vertex_custom_job_id" in store  # kept: a retry reconnects or resubmits
