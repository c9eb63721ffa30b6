"""A retried `train` task reattaches to the Kubernetes Jobs an earlier try submitted.

The Kubernetes API is replaced by an in-memory cluster that records every call,
the calls the provider's client would send.
"""

from types import SimpleNamespace

import pytest
from kubernetes import client

from orchestration.launchers import TrainingJob, kubernetes
from orchestration.launchers.kubernetes import run_kubernetes_jobs
from tests.orchestration.trigger_events import first_event

MANIFESTS = kubernetes.render(
    TrainingJob(data="gs://b/shards", output="gs://b/runs/r1/train", num_workers=2),
    name="imagepipe-r1",
    image="trainer:1",
)
JOBS = [m["metadata"]["name"] for m in MANIFESTS if m["kind"] == "Job"]


class FakeCluster:
    """Jobs whose state advances one step per status poll: running until `polls_left` is 0."""

    def __init__(self, jobs: dict[str, str], polls_to_finish: int = 2):
        self.jobs = dict(jobs)  # name -> running | succeeded | failed
        self.services: set[str] = set()
        self.deployments: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.polls_left = {name: polls_to_finish for name in jobs}

    # BatchV1Api
    def read_namespaced_job_status(self, name, namespace):
        if name not in self.jobs:
            raise client.ApiException(status=404)
        state = self.jobs[name]
        if state == "running":
            self.polls_left[name] -= 1
            if self.polls_left[name] < 0:
                self.jobs[name] = state = "succeeded"
        conditions = {
            "succeeded": [SimpleNamespace(type="Complete", status="True", reason="")],
            "failed": [
                SimpleNamespace(type="Failed", status="True", reason="BackoffLimitExceeded")
            ],
            # podFailurePolicy's FailJob: a trainer exited 2.
            "refused": [SimpleNamespace(type="Failed", status="True", reason="PodFailurePolicy")],
        }.get(state, [])
        return SimpleNamespace(
            status=SimpleNamespace(succeeded=int(state == "succeeded"), conditions=conditions)
        )

    def delete_namespaced_job(self, name, namespace, propagation_policy=None):
        self.calls.append(("delete", name))
        if self.jobs.pop(name, None) is None:
            raise client.ApiException(status=404)

    # CoreV1Api
    def delete_namespaced_service(self, name, namespace):
        self.calls.append(("delete", name))
        if name not in self.services:
            raise client.ApiException(status=404)
        self.services.discard(name)

    # AppsV1Api
    def delete_namespaced_deployment(self, name, namespace):
        self.calls.append(("delete", name))
        if name not in self.deployments:
            raise client.ApiException(status=404)
        self.deployments.discard(name)

    # utils.create_from_dict
    def create(self, manifest):
        name, kind = manifest["metadata"]["name"], manifest["kind"]
        existing = {"Job": self.jobs, "Deployment": self.deployments}.get(kind, self.services)
        if name in existing:
            raise client.ApiException(status=409)
        self.calls.append(("create", name))
        if kind == "Job":
            self.jobs[name] = "running"
            self.polls_left[name] = 2
        else:
            existing.add(name)

    def run(self, manifests=MANIFESTS):
        run_kubernetes_jobs(
            manifests, core=self, batch=self, apps=self, create=self.create, poll_seconds=0
        )


def test_first_try_creates_the_service_and_every_job():
    cluster = FakeCluster({})
    cluster.run()
    assert [c for c in cluster.calls if c[0] == "create"] == [
        ("create", "imagepipe-r1"),
        *[("create", name) for name in JOBS],
    ]
    assert cluster.services == set()  # removed at the end


def test_a_retry_while_the_jobs_run_waits_for_them_without_submitting_again():
    cluster = FakeCluster(dict.fromkeys(JOBS, "running"))
    cluster.services.add("imagepipe-r1")
    cluster.run()
    assert not [c for c in cluster.calls if c[1] in JOBS]  # no job deleted or created
    assert ("delete", "imagepipe-r1") in cluster.calls[-1:]  # only the final clean-up
    assert set(cluster.jobs.values()) == {"succeeded"}


def test_a_retry_after_the_jobs_succeeded_returns_at_once():
    cluster = FakeCluster(dict.fromkeys(JOBS, "succeeded"))
    cluster.run()
    assert cluster.calls == []


def test_a_retry_after_a_job_failed_replaces_all_of_them():
    cluster = FakeCluster({JOBS[0]: "running", JOBS[1]: "failed"})
    cluster.run()
    for name in JOBS:
        assert ("delete", name) in cluster.calls and ("create", name) in cluster.calls


def test_a_job_failing_while_waited_on_fails_the_task():
    cluster = FakeCluster({})
    original = cluster.create

    def create_then_fail(manifest):
        original(manifest)
        if manifest["metadata"]["name"] == JOBS[1]:
            cluster.jobs[JOBS[1]] = "failed"

    with pytest.raises(RuntimeError, match=f"training job {JOBS[1]} failed"):
        run_kubernetes_jobs(
            MANIFESTS, core=cluster, batch=cluster, create=create_then_fail, poll_seconds=0
        )


def test_a_trainer_that_exits_2_fails_the_task_without_a_retry():
    from orchestration.launchers import TrainingRefused

    cluster = FakeCluster({})
    original = cluster.create

    def create_then_refuse(manifest):
        original(manifest)
        if manifest["metadata"]["name"] == JOBS[0]:
            cluster.jobs[JOBS[0]] = "refused"

    with pytest.raises(TrainingRefused, match="a trainer exited 2") as raised:
        run_kubernetes_jobs(
            MANIFESTS, core=cluster, batch=cluster, create=create_then_refuse, poll_seconds=0
        )
    assert raised.value.code == 2


def test_the_input_service_deployment_is_created_and_removed_with_the_run():
    manifests = kubernetes.render(
        TrainingJob(data="gs://b/s", output="gs://b/o", num_workers=2,
                    train_flags={"input_service": "local:2"}),
        name="imagepipe-r1", image="trainer:1",
    )  # fmt: skip
    cluster = FakeCluster({})
    cluster.run(manifests)
    assert ("create", "imagepipe-r1-input") in cluster.calls
    assert cluster.calls.count(("delete", "imagepipe-r1-input")) >= 2  # before, and at the end
    assert cluster.services == set() == cluster.deployments


# The wait in the triggerer (the operator's default): the task submits and defers, the
# trigger polls the same cluster, the task's second half cleans up and reports.


def _train_operator(cluster: FakeCluster, monkeypatch):
    """The DAG's `train` task (kubernetes launcher, default wait) against `cluster`; the
    run folder on gs:// (a stale-run check before, the run's result after) replaced."""
    from orchestration import train_operator
    from orchestration.train_operator import TrainModelOperator

    api = {"core": cluster, "batch": cluster, "apps": cluster, "create": cluster.create}
    monkeypatch.setattr(kubernetes, "clients", lambda conn_id="": api)
    monkeypatch.setattr("orchestration.reuse.discard_stale_training", lambda *_: "")
    monkeypatch.setattr(train_operator, "read_training_result", lambda d: {"model_dir": d})
    monkeypatch.setattr(train_operator.lineage, "record", lambda **_: None)
    operator = TrainModelOperator(
        task_id="train", shards_dir="gs://b/shards", train_dir="gs://b/runs/r1/train",
        output_root="gs://b", num_workers=2, train_flags={}, launcher="kubernetes",
        launcher_options={}, image="trainer:1", job_name="imagepipe-r1", poll_interval=0,
    )  # fmt: skip
    return operator


def _deferred_train(cluster: FakeCluster, monkeypatch, *, then=None):
    """Run the `train` task (kubernetes launcher) as Airflow would with a triggerer:
    execute until it defers, the trigger until its event, then execute_complete."""
    from airflow.sdk.exceptions import TaskDeferred

    from orchestration.triggers import KubernetesJobsTrigger

    operator = _train_operator(cluster, monkeypatch)
    assert operator.deferrable  # the default
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, KubernetesJobsTrigger)
    assert [j["metadata"]["name"] for j in trigger.jobs] == JOBS
    # What the triggerer stores and rebuilds: the trigger survives serialisation.
    path, kwargs = trigger.serialize()
    assert path == "orchestration.triggers.KubernetesJobsTrigger"
    trigger = KubernetesJobsTrigger(**kwargs)
    if then:
        then()
    cluster.calls.append(("trigger", "starts"))

    event = first_event(trigger)
    cluster.calls.append(("trigger", event["status"]))
    return operator.execute_complete({}, event, **(deferred.value.kwargs or {}))


def test_the_train_task_waits_for_the_jobs_in_the_triggerer(monkeypatch):
    cluster = FakeCluster({})
    assert _deferred_train(cluster, monkeypatch) == {"model_dir": "gs://b/runs/r1/train"}
    assert set(cluster.jobs.values()) == {"succeeded"}  # the trigger polled them to the end
    creates = [c for c in cluster.calls if c[0] == "create"]
    assert creates == [("create", "imagepipe-r1"), *[("create", name) for name in JOBS]]
    # The Service lives while the Jobs run: removed by the task's second half, after the event.
    fired = cluster.calls.index(("trigger", "success"))
    created = cluster.calls.index(("create", "imagepipe-r1"))
    assert ("delete", "imagepipe-r1") not in cluster.calls[created:fired]
    assert ("delete", "imagepipe-r1") in cluster.calls[fired:]
    assert cluster.services == set()


def test_a_job_failing_in_the_triggerer_fails_the_task_for_a_retry(monkeypatch):
    from orchestration.launchers import TrainingFailed

    cluster = FakeCluster({})
    with pytest.raises(TrainingFailed, match=f"training job {JOBS[1]} failed"):
        _deferred_train(cluster, monkeypatch, then=lambda: cluster.jobs.update({JOBS[1]: "failed"}))
    assert cluster.services == set()


def test_a_trainer_exiting_2_in_the_triggerer_fails_the_task_without_a_retry(monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    cluster = FakeCluster({})
    refuse = lambda: cluster.jobs.update({JOBS[0]: "refused"})  # noqa: E731
    with pytest.raises(AirflowFailException, match=r"a trainer exited 2.*not retried"):
        _deferred_train(cluster, monkeypatch, then=refuse)


def test_a_retry_after_the_jobs_succeeded_does_not_defer(monkeypatch):
    cluster = FakeCluster(dict.fromkeys(JOBS, "succeeded"))
    operator = _train_operator(cluster, monkeypatch)
    assert operator.execute({}) == {"model_dir": "gs://b/runs/r1/train"}
    assert cluster.calls == []
