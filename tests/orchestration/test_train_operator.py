"""The trainers' exit code reaches the DAG through every launcher: 2 fails the `train`
task without retries, 75 reschedules it without counting a try, anything else is an
ordinary (retried) failure."""

from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
)

from orchestration import train_operator
from orchestration.launchers import (
    TrainingFailed,
    TrainingJob,
    TrainingPreempted,
    TrainingRefused,
    failure,
    local,
)
from orchestration.train_operator import TrainModelOperator


def _operator(tmp_path, launcher="local", options=None) -> TrainModelOperator:
    return TrainModelOperator(
        task_id="train",
        shards_dir=str(tmp_path / "not-shards"),
        train_dir=str(tmp_path / "train"),
        output_root=str(tmp_path),
        num_workers=1,
        train_flags={"epochs": 1},
        launcher=launcher,
        launcher_options=options or {},
        image="trainer:1",
        job_name="imagepipe-r1",
        deferrable=False,  # the wait in the worker; tests/orchestration/test_deferred_waits.py
    )


CONTEXT = {"ti": SimpleNamespace(stats_tags={}, xcom_push=lambda *_: None)}


@pytest.mark.slow
def test_a_typo_in_the_data_path_fails_the_task_once_with_the_trainers_line(tmp_path):
    """The real local launcher and trainer: exit 2 is not a retryable failure."""
    with pytest.raises(AirflowFailException) as raised:
        _operator(tmp_path).execute(CONTEXT)
    message = str(raised.value)
    assert message.startswith("training exited with code 2: ")
    assert "not-shards" in message and "not retried" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (failure(2, "bad flags"), AirflowFailException),
        (failure(75, "preempted"), AirflowRescheduleException),
        (failure(1, "crashed"), TrainingFailed),
        (failure(-9, "killed"), TrainingFailed),
    ],
    ids=["2", "75", "1", "signal"],
)
def test_each_exit_code_maps_to_what_airflow_does_next(tmp_path, monkeypatch, raised, expected):
    def run(job, options, emit):
        raise raised

    monkeypatch.setattr(local, "run", run)
    with pytest.raises(expected) as caught:
        _operator(tmp_path).execute(CONTEXT)
    if expected is TrainingFailed:  # an ordinary exception: Airflow retries it
        assert not isinstance(caught.value, AirflowException)


def test_bad_training_options_fail_the_task_once(tmp_path):
    with pytest.raises(AirflowFailException, match=r"training_options\.gpus_per_worker must"):
        _operator(tmp_path, "kubernetes", {"gpus_per_worker": "two"}).execute(CONTEXT)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "kind"),
    [(2, TrainingRefused), (75, TrainingPreempted), (1, TrainingFailed), (0, None)],
)
def test_the_local_launcher_maps_the_launchers_exit_code(tmp_path, code, kind):
    fake = tmp_path / "fake_python"
    fake.write_text(f'#!/bin/sh\necho "[worker 0] error: reason {code}"\nexit {code}\n')
    fake.chmod(0o755)
    job = TrainingJob(data="/d", output="/o", num_workers=1)
    if kind is None:
        local.run(job, emit=lambda _: None, python=str(fake))
        return
    with pytest.raises(kind) as raised:
        local.run(job, emit=lambda _: None, python=str(fake))
    assert type(raised.value) is kind and raised.value.code == code
    assert str(raised.value) == f"training exited with code {code}: reason {code}"


@pytest.mark.parametrize(
    ("status", "expected"),
    [(2, AirflowFailException), (75, AirflowRescheduleException), (1, TrainingFailed)],
)
def test_a_failed_vertex_job_maps_its_replicas_status(tmp_path, monkeypatch, status, expected):
    class FailingHook:
        def create_custom_job(self, project_id, region, custom_job):
            return SimpleNamespace(name=f"projects/{project_id}/locations/{region}/customJobs/9")

        def wait_for_custom_job(self, **_):
            raise RuntimeError(
                f"The replica workerpool0-0 exited with a non-zero status of {status}."
            )

    operator = _operator(tmp_path, "vertex", {"project": "p", "region": "r"})
    operator.shards_dir, operator.train_dir = "gs://b/shards", "gs://b/train"
    operator.__dict__["hook"] = FailingHook()
    monkeypatch.setattr("orchestration.reuse.discard_stale_training", lambda *_: "")
    store = {}
    context = {**CONTEXT, "task_state_store": SimpleNamespace(
        get=store.get, set=store.__setitem__, delete=lambda k: store.pop(k, None))}  # fmt: skip
    with pytest.raises(expected):
        operator.execute(context)
    assert train_operator.PREEMPTED_RESTART_DELAY.total_seconds() > 0
