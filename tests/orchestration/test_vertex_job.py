"""A retried `train` task reconnects to the Vertex AI CustomJob an earlier try submitted.

The provider's hook is replaced by recorders (the calls it would send); the task's
state store is Airflow's interface held in a dict, as the task runner provides it.
"""

from types import SimpleNamespace

import pytest

from orchestration.vertex_job import VertexTrainingJobOperator
from tests.orchestration.state_store import StateStore

JOB = {"display_name": "imagepipe-r1", "job_spec": {"worker_pool_specs": []}}


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


def _execute(states: dict[str, str], store: StateStore) -> tuple[FakeHook, dict]:
    operator = VertexTrainingJobOperator(
        task_id="t", custom_job=JOB, project_id="p", region="europe-west4"
    )
    hook = FakeHook(states, store.events)
    operator.__dict__["hook"] = hook  # the cached_property's slot
    pushed: dict = {}
    ti = SimpleNamespace(stats_tags={}, xcom_push=lambda key, value: pushed.update({key: value}))
    result = operator.execute({"task_state_store": store, "ti": ti})
    assert pushed["custom_job_id"] == result["custom_job_id"]
    return hook, result


FORGET = ("forget", "vertex_custom_job_id")


def test_first_try_stores_the_job_id_before_waiting_and_forgets_it_on_success():
    store = StateStore()
    hook, result = _execute({}, store)
    assert hook.calls == [("create", "imagepipe-r1"), ("store", "100"), ("wait", "100"), FORGET]
    assert result["custom_job_id"] == "100" and store == {}


@pytest.mark.parametrize("state", ["JOB_STATE_RUNNING", "JOB_STATE_PENDING", "JOB_STATE_QUEUED"])
def test_a_retry_reconnects_to_the_active_job_instead_of_submitting_another(state):
    hook, result = _execute({"7": state}, StateStore(vertex_custom_job_id="7"))
    assert hook.calls == [("wait", "7"), FORGET]
    assert result["custom_job_id"] == "7"


def test_a_retry_after_the_job_succeeded_neither_submits_nor_waits():
    store = StateStore(vertex_custom_job_id="7")
    hook, result = _execute({"7": "JOB_STATE_SUCCEEDED"}, store)
    assert hook.calls == [FORGET] and result["custom_job_id"] == "7"


def test_a_retry_after_the_job_failed_submits_a_new_one():
    store = StateStore(vertex_custom_job_id="7")
    hook, result = _execute({"7": "JOB_STATE_FAILED"}, store)
    new = result["custom_job_id"]
    assert new != "7"
    assert hook.calls == [("create", "imagepipe-r1"), ("store", new), ("wait", new), FORGET]


def test_clearing_a_succeeded_task_trains_again():
    store = StateStore()
    states: dict[str, str] = {}
    _execute(states, store)
    hook, result = _execute(states, store)  # the same task instance, cleared by a user
    assert result["custom_job_id"] == "101"
    assert hook.calls.count(("create", "imagepipe-r1")) == 2
