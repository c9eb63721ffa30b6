import json

import kubernetes_validate
import pytest

from orchestration.launchers import TrainingJob, render_kubernetes, render_vertex_custom_job
from tests.dags.airflow_env import REPO
from training.worker_env import PREEMPTED_EXIT_CODE

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
    return render_kubernetes(
        JOB,
        name="imagepipe-manual__2026-12-01T00:00:00+00:00",
        image="europe-docker.pkg.dev/p/r/trainer:1.0",
        namespace="ml",
        gpus_per_worker=1,
        service_account="trainer",
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
        assert ignored[0]["onExitCodes"]["values"] == [PREEMPTED_EXIT_CODE]
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
    from orchestration.launchers import render_vertex_custom_job
    from training.launch import launch

    expected = {"name": "TF_CPU_ALLOCATOR_USE_BFC", "value": "true"}
    for job in manifests[1:]:
        assert expected in job["spec"]["template"]["spec"]["containers"][0]["env"]
    vertex = render_vertex_custom_job(JOB, display_name="run", image="trainer:1")
    for pool in vertex["job_spec"]["worker_pool_specs"]:
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
    manifests = render_kubernetes(job, name="run-1", image="trainer:1", namespace="ml")
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
    custom_job = render_vertex_custom_job(
        job, display_name="run-1", image="trainer:1", input_machine_type="n2-highcpu-8"
    )
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
    pools = render_vertex_custom_job(job, display_name="r", image="t:1")["job_spec"][
        "worker_pool_specs"
    ]
    assert len(pools) == 1 and "--input-service" not in pools[0]["container_spec"]["args"]
