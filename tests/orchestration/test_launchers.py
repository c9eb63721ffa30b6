import json

import kubernetes_validate
import pytest

from orchestration.launchers import TrainingJob, kubernetes, vertex
from tests.dags.airflow_env import REPO
from training.worker_env import PREEMPTED_EXIT_CODE

VERTEX = vertex.Options(project="p", region="europe-west4")
JOB = TrainingJob(
    data="gs://bucket/shards",
    output="gs://bucket/runs/r1/train",
    num_workers=3,
    train_flags={"epochs": 4, "per_replica_batch_size": 48, "mixed_precision": True},
)


def test_train_args_are_the_cli_flags():
    assert JOB.train_args() == [
        "--data",
        "gs://bucket/shards",
        "--output",
        "gs://bucket/runs/r1/train",
        "--epochs",
        "4",
        "--mixed-precision",
        "--per-replica-batch-size",
        "48",
    ]


@pytest.fixture
def manifests():
    return kubernetes.render(
        JOB,
        kubernetes.Options(namespace="ml", gpus_per_worker=1, service_account="trainer"),
        name="imagepipe-manual__2026-12-01T00:00:00+00:00",
        image="europe-docker.pkg.dev/p/r/trainer:1.0",
    )


def test_manifests_validate_against_the_kubernetes_schema(manifests):
    version = kubernetes_validate.latest_version()
    for manifest in manifests:
        kubernetes_validate.validate(manifest, version, strict=True)


def test_one_job_per_worker_behind_a_headless_service_with_its_own_tf_config(manifests):
    service, *jobs = manifests
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert [j["kind"] for j in jobs] == ["Job"] * 3
    name = service["metadata"]["name"]
    configs = []
    for index, job in enumerate(jobs):
        pod = job["spec"]["template"]["spec"]
        assert pod["subdomain"] == name and pod["hostname"] == f"{name}-worker-{index}"
        assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
        ignored = job["spec"]["podFailurePolicy"]["rules"]
        assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]} in ignored
        assert ignored[1]["onExitCodes"]["values"] == [PREEMPTED_EXIT_CODE]  # [0]: exit 2
        container = pod["containers"][0]
        assert container["command"] == ["python", "-m", "training.train"]
        assert container["args"] == JOB.train_args()
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        config = json.loads(container["env"][0]["value"])
        assert config["task"] == {"type": "worker", "index": index}
        configs.append(config)
        assert set(service["spec"]["selector"].items()) <= set(
            job["spec"]["template"]["metadata"]["labels"].items()
        )
    hosts = configs[0]["cluster"]["worker"]
    assert hosts == [f"{name}-worker-{i}.{name}.ml.svc:2222" for i in range(3)]
    assert all(c["cluster"]["worker"] == hosts for c in configs)


def test_a_broken_manifest_fails_validation(manifests):
    manifests[1]["spec"]["backoffLimit"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            manifests[1], kubernetes_validate.latest_version(), strict=True
        )


def test_every_way_a_worker_starts_sets_the_worker_environment(manifests, tmp_path):
    """TensorFlow reads TF_CPU_ALLOCATOR_USE_BFC at start-up: each launcher must set it."""
    from training.launch import launch

    expected = {"name": "TF_CPU_ALLOCATOR_USE_BFC", "value": "true"}
    for job in manifests[1:]:
        assert expected in job["spec"]["template"]["spec"]["containers"][0]["env"]
    custom_job = vertex.render(JOB, VERTEX, display_name="run", image="trainer:1")
    for pool in custom_job["job_spec"]["worker_pool_specs"]:
        assert expected in pool["container_spec"]["env"]
    dockerfile = (REPO / "docker" / "trainer.Dockerfile").read_text()
    assert "TF_CPU_ALLOCATOR_USE_BFC=true" in dockerfile
    # The local launcher: a stand-in worker prints the variable it was started with.
    fake = tmp_path / "fake_python"
    fake.write_text('#!/bin/sh\necho "bfc=$TF_CPU_ALLOCATOR_USE_BFC"\n')
    fake.chmod(0o755)
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        assert launch(1, [], python=str(fake), sink=sink) == 0
    assert "bfc=true" in out.read_text()


def test_input_service_local_n_becomes_a_deployment_and_service_beside_the_trainers():
    job = TrainingJob(
        data="gs://b/shards", output="gs://b/out", num_workers=2,
        train_flags={"input_service": "local:3"},
    )  # fmt: skip
    manifests = kubernetes.render(
        job, kubernetes.Options(namespace="ml"), name="run-1", image="trainer:1"
    )
    version = kubernetes_validate.latest_version()
    for manifest in manifests:
        kubernetes_validate.validate(manifest, version, strict=True)
    service, deployment = manifests[:2]
    assert (service["kind"], deployment["kind"]) == ("Service", "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "training.input_service"]
    assert container["args"][:2] == ["--workers", "3"]
    args = container["args"]
    assert args[args.index("--worker-host") + 1] == "$(POD_IP)"  # reachable by trainers
    # The dispatcher's journal outlives a container restart: the trainers carry on.
    assert args[args.index("--work-dir") + 1] == "/journal"
    volume = deployment["spec"]["template"]["spec"]["volumes"][0]
    assert volume == {"name": "journal", "emptyDir": {}}
    assert container["volumeMounts"] == [{"name": "journal", "mountPath": "/journal"}]
    for job_manifest in (m for m in manifests if m["kind"] == "Job"):
        args = job_manifest["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--input-service") + 1] == "run-1-input.ml.svc:5050"


@pytest.mark.parametrize("num_workers", [1, 3])
def test_input_service_local_n_becomes_vertex_pool_2_which_the_trainers_find_as_ps(num_workers):
    from google.cloud.aiplatform_v1.types import CustomJob

    job = TrainingJob(
        data="gs://b/shards", output="gs://b/out", num_workers=num_workers,
        train_flags={"input_service": "local:4"},
    )  # fmt: skip
    options = vertex.Options(project="p", region="r", input_machine_type="n2-highcpu-8")
    custom_job = vertex.render(job, options, display_name="run-1", image="trainer:1")
    CustomJob(custom_job)  # the API's own message type accepts it
    pools = custom_job["job_spec"]["worker_pool_specs"]
    assert len(pools) == 3  # Vertex lists pool 2 in TF_CONFIG as `ps`, whatever pool 1 holds
    if num_workers == 1:
        assert pools[1] == {}  # an empty spec leaves pool 1 out
    service = pools[2]
    assert service["replica_count"] == 1
    assert service["machine_spec"] == {"machine_type": "n2-highcpu-8"}
    assert service["container_spec"]["command"] == ["python", "-m", "training.input_service"]
    assert service["container_spec"]["args"] == ["--workers", "4", "--from-tf-config"]
    for trainers in filter(None, pools[:2]):
        args = trainers["container_spec"]["args"]
        assert args[args.index("--input-service") + 1] == "cluster"


def test_vertex_without_input_service_has_no_service_pool():
    job = TrainingJob(data="gs://b/shards", output="gs://b/out", num_workers=1)
    pools = vertex.render(job, VERTEX, display_name="r", image="t:1")["job_spec"][
        "worker_pool_specs"
    ]
    assert len(pools) == 1 and "--input-service" not in pools[0]["container_spec"]["args"]


def test_exit_code_2_fails_a_kubernetes_job_at_once_and_75_is_not_counted(manifests):
    for job in (m for m in manifests if m["kind"] == "Job"):
        rules = job["spec"]["podFailurePolicy"]["rules"]
        by_code = {
            code: rule["action"] for rule in rules if "onExitCodes" in rule
            for code in rule["onExitCodes"]["values"]
        }  # fmt: skip
        assert by_code == {2: "FailJob", PREEMPTED_EXIT_CODE: "Ignore"}
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # the policy needs it


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"gpus_per_worker": "two"},
            "training_options.gpus_per_worker must be a number, got 'two'",
        ),
        ({"gpus_per_worker": True}, "must be a number"),
        ({"backoff_limit": -1}, "training_options.backoff_limit must be"),
        ({"memory": 8}, "training_options.memory must be text, got 8"),
        ({"gpus": 1}, r"training_options \['gpus'\] are not settings here"),
    ],
)
def test_kubernetes_options_are_type_checked_in_one_line(options, message):
    from orchestration.launchers import LauncherConfigError, launcher_options

    with pytest.raises(LauncherConfigError, match=message):
        launcher_options("kubernetes", options)
    assert launcher_options("kubernetes", {"gpus_per_worker": 2}).gpus_per_worker == 2


@pytest.mark.parametrize(
    ("message", "kind", "code"),
    [
        ("The replica workerpool0-0 exited with a non-zero status of 2.", "TrainingRefused", 2),
        ("The replica workerpool1-0 exited with a non-zero status of 75.", "TrainingPreempted", 75),
        ("The replica workerpool0-0 exited with a non-zero status of 1.", "TrainingFailed", 1),
        ("The CustomJob has been cancelled.", "TrainingFailed", None),
    ],
)
def test_a_failed_vertex_job_is_mapped_by_its_replicas_exit_status(message, kind, code):
    failure = vertex.failure_from_error(message)
    assert (type(failure).__name__, failure.code) == (kind, code)


@pytest.mark.parametrize(
    ("launcher", "options", "replicas"),
    [
        ("local", {}, 1),
        ("kubernetes", {"gpus_per_worker": 4}, 4),
        ("kubernetes", {}, 1),
        ("vertex", {"project": "p", "region": "r", "accelerator_count": 2}, 2),
        ("kubernetes", {"gpus_per_worker": "two"}, 1),  # refused later, by the train task
    ],
)
def test_the_dags_batch_pre_check_counts_the_replicas_the_trainer_will_have(
    launcher, options, replicas
):
    from orchestration.launchers import replicas_per_worker
    from training.config import min_train_records

    assert replicas_per_worker(launcher, options) == replicas
    # 2 workers of 32 images a replica: one global batch is what the trainer needs.
    assert min_train_records(32, 2 * replicas) == 64 * replicas
