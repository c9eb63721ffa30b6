"""A retried `train` task (vertex launcher) reconnects to the CustomJob an earlier try
submitted, and a failed job's exit status decides whether the task is retried.

The provider's hook is replaced by recorders (the calls it would send); the task's
state store is Airflow's interface held in a dict, as the task runner provides it.
The run folder's result (gs://, read after the job) is replaced too.
"""

from types import SimpleNamespace

import pytest

from orchestration import train_operator
from orchestration.train_operator import TrainModelOperator
from tests.orchestration.state_store import StateStore


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


def _execute(states: dict[str, str], store: StateStore, monkeypatch) -> tuple[FakeHook, str]:
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
    )
    hook = FakeHook(states, store.events)
    operator.__dict__["hook"] = hook  # the cached_property's slot
    monkeypatch.setattr("orchestration.reuse.discard_stale_training", lambda *_: "")
    monkeypatch.setattr(train_operator, "read_training_result", lambda d: {"model_dir": d})
    monkeypatch.setattr(train_operator.lineage, "record", lambda **_: None)
    pushed: dict = {}
    ti = SimpleNamespace(stats_tags={}, xcom_push=lambda key, value: pushed.update({key: value}))
    result = operator.execute({"task_state_store": store, "ti": ti})
    assert result == {"model_dir": "gs://b/runs/r1/train"}
    return hook, pushed["custom_job_id"]


FORGET = ("forget", "vertex_custom_job_id")


def test_first_try_stores_the_job_id_before_waiting_and_forgets_it_on_success(monkeypatch):
    store = StateStore()
    hook, job_id = _execute({}, store, monkeypatch)
    assert hook.calls == [("create", "imagepipe-r1"), ("store", "100"), ("wait", "100"), FORGET]
    assert job_id == "100" and store == {}


@pytest.mark.parametrize("state", ["JOB_STATE_RUNNING", "JOB_STATE_PENDING", "JOB_STATE_QUEUED"])
def test_a_retry_reconnects_to_the_active_job_instead_of_submitting_another(state, monkeypatch):
    hook, job_id = _execute({"7": state}, StateStore(vertex_custom_job_id="7"), monkeypatch)
    assert hook.calls == [("wait", "7"), FORGET]
    assert job_id == "7"


def test_a_retry_after_the_job_succeeded_neither_submits_nor_waits(monkeypatch):
    store = StateStore(vertex_custom_job_id="7")
    hook, job_id = _execute({"7": "JOB_STATE_SUCCEEDED"}, store, monkeypatch)
    assert hook.calls == [FORGET] and job_id == "7"


def test_a_retry_after_the_job_failed_submits_a_new_one(monkeypatch):
    store = StateStore(vertex_custom_job_id="7")
    hook, job_id = _execute({"7": "JOB_STATE_FAILED"}, store, monkeypatch)
    new = job_id
    assert new != "7"
    assert hook.calls == [("create", "imagepipe-r1"), ("store", new), ("wait", new), FORGET]


def test_clearing_a_succeeded_task_trains_again(monkeypatch):
    store = StateStore()
    states: dict[str, str] = {}
    _execute(states, store, monkeypatch)
    hook, job_id = _execute(states, store, monkeypatch)  # the same task instance, cleared by a user
    assert job_id == "101"
    assert hook.calls.count(("create", "imagepipe-r1")) == 2
