"""The `kubernetes` launcher: one single-pod Job per worker behind a headless Service.

Each pod gets a stable DNS name through the Service and its own `TF_CONFIG`;
the task submits them with the cncf.kubernetes provider's connection and waits.
A trainer that exits 2 (bad parameters or unusable shards) fails its Job at once
(`podFailurePolicy` FailJob) and the task without retries; one that exits 75
(preempted, checkpoint saved) or is evicted is replaced without counting against
`backoff_limit`; any other failure is retried by the Job, then by the task.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from orchestration.launchers import (
    INPUT_SERVICE_COMMAND,
    INPUT_SERVICE_PORT,
    TRAIN_COMMAND,
    TrainingFailed,
    TrainingJob,
    TrainingRefused,
    dns_name,
)
from stageconfig import exit_codes, param
from training.worker_env import worker_env_list

log = logging.getLogger(__name__)

TF_PORT = 2222


@dataclass(frozen=True)
class Options:
    namespace: str = param("default", help="Namespace of the Service and Jobs")
    gpus_per_worker: int = param(0, minimum=0, maximum=16, help="nvidia.com/gpu per pod")
    cpu: str = param("2", help="CPU request per pod")
    memory: str = param("8Gi", help="Memory request and limit per pod")
    service_account: str | None = param(None, help="The pods' service account")
    backoff_limit: int = param(3, minimum=0, maximum=20, help="Pod failures a Job retries")


def render(
    job: TrainingJob, options: Options | None = None, *, name: str, image: str
) -> list[dict]:
    """Manifests for N workers: a headless Service and one single-pod Job per worker.

    Each pod gets `hostname`/`subdomain` so `<name>-worker-<i>.<name>` resolves,
    and a literal `TF_CONFIG`. Jobs replace failed pods (`backoffLimit`); a
    replacement resumes from the shared checkpoints under `job.output`, which
    must be storage every pod sees (gs:// or a shared volume). A preempted
    pod (evicted, its node drained or reclaimed: the `DisruptionTarget`
    condition) or one that exits 75 (every worker saved on SIGTERM) is replaced
    without counting against `backoffLimit`, and one that exits 2 fails the Job
    at once (`podFailurePolicy`, which needs `restartPolicy: Never`).
    """
    options = options or Options()
    namespace, memory = options.namespace, options.memory
    base = dns_name(name)
    hosts = [f"{base}-worker-{i}.{base}.{namespace}.svc:{TF_PORT}" for i in range(job.num_workers)]
    labels = {"app.kubernetes.io/name": "imagepipe-trainer", "imagepipe/job": base}
    service_workers = job.local_service_workers
    input_manifests: list[dict] = []
    if service_workers:  # local:N -> its own Deployment + Service beside the trainers
        input_manifests = _input_service_manifests(
            f"{base}-input", namespace, image, service_workers, memory
        )
        job = job.with_input_service(f"{base}-input.{namespace}.svc:{INPUT_SERVICE_PORT}")
    manifests: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": base, "namespace": namespace, "labels": labels},
            "spec": {
                "clusterIP": "None",
                "selector": labels,
                "ports": [{"name": "grpc", "port": TF_PORT, "targetPort": TF_PORT}],
                "publishNotReadyAddresses": True,
            },
        }
    ]
    resources: dict = {
        "requests": {"cpu": options.cpu, "memory": memory},
        "limits": {"memory": memory},
    }
    if options.gpus_per_worker:
        resources["limits"]["nvidia.com/gpu"] = options.gpus_per_worker
    for index in range(job.num_workers):
        tf_config = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
        pod_spec: dict = {
            "hostname": f"{base}-worker-{index}",
            "subdomain": base,
            "restartPolicy": "Never",
            # SIGTERM -> finish the current call into the graph, save, exit.
            "terminationGracePeriodSeconds": 120,
            "containers": [
                {
                    "name": "trainer",
                    "image": image,
                    "command": TRAIN_COMMAND,
                    "args": job.train_args(),
                    "env": [
                        {"name": "TF_CONFIG", "value": json.dumps(tf_config)},
                        *worker_env_list(),
                    ],
                    "ports": [{"containerPort": TF_PORT, "name": "grpc"}],
                    "resources": resources,
                }
            ],
        }
        if options.service_account:
            pod_spec["serviceAccountName"] = options.service_account
        manifests.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{base}-worker-{index}",
                    "namespace": namespace,
                    "labels": labels,
                },
                "spec": {
                    "backoffLimit": options.backoff_limit,
                    "podFailurePolicy": {
                        "rules": [
                            {
                                "action": "FailJob",
                                "onExitCodes": {
                                    "containerName": "trainer",
                                    "operator": "In",
                                    "values": [exit_codes.BAD_INPUT],
                                },
                            },
                            {
                                "action": "Ignore",
                                "onExitCodes": {
                                    "containerName": "trainer",
                                    "operator": "In",
                                    "values": [exit_codes.PREEMPTED],
                                },
                            },
                            {
                                "action": "Ignore",
                                "onPodConditions": [{"type": "DisruptionTarget"}],
                            },
                        ]
                    },
                    "template": {
                        "metadata": {"labels": {**labels, "imagepipe/worker": str(index)}},
                        "spec": pod_spec,
                    },
                },
            }
        )
    return [*input_manifests, *manifests]


def _input_service_manifests(
    name: str, namespace: str, image: str, workers: int, memory: str
) -> list[dict]:
    """The tf.data service (`--input-service local:N`) as one pod: a dispatcher behind a
    Service, N workers that register with the pod's IP (the trainers read from them).

    A crashed container restarts in the same pod at the same addresses (the workers'
    ports follow the dispatcher's) with the dispatcher's journal, so the trainers carry
    on, losing at most the unread part of the files the workers had in hand."""
    labels = {"app.kubernetes.io/name": "imagepipe-input-service", "imagepipe/job": name}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "selector": labels,
                "ports": [
                    {"name": "dispatcher", "port": INPUT_SERVICE_PORT,
                     "targetPort": INPUT_SERVICE_PORT}
                ],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "input-service",
                                "image": image,
                                "command": INPUT_SERVICE_COMMAND,
                                "args": [
                                    "--workers", str(workers),
                                    "--port", str(INPUT_SERVICE_PORT),
                                    "--worker-host", "$(POD_IP)",
                                    "--work-dir", "/journal",
                                ],
                                "volumeMounts": [{"name": "journal", "mountPath": "/journal"}],
                                "env": [
                                    {"name": "POD_IP",
                                     "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                                    *worker_env_list(),
                                ],
                                "ports": [{"containerPort": INPUT_SERVICE_PORT,
                                           "name": "dispatcher"}],
                                "resources": {
                                    "requests": {"cpu": str(workers), "memory": memory},
                                    "limits": {"memory": memory},
                                },
                            }
                        ],
                        # Outlives a container restart (same pod, same IP, same ports):
                        # the restarted dispatcher resumes from it and the trainers
                        # carry on (tests/training/test_input_service.py).
                        "volumes": [{"name": "journal", "emptyDir": {}}],
                    },
                },
            },
        },
    ]  # fmt: skip


def submit(
    manifests: list[dict], *, conn_id: str = "kubernetes_default", poll_seconds: float = 30.0
) -> None:
    """Run the Service and worker Jobs with the cncf.kubernetes provider's connection."""
    run_kubernetes_jobs(manifests, **clients(conn_id), poll_seconds=poll_seconds)


def clients(conn_id: str = "kubernetes_default") -> dict:
    """The API clients run_kubernetes_jobs and its parts take, from the provider's
    connection."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes import client, utils

    api = KubernetesHook(conn_id=conn_id).get_conn()
    return {
        "core": client.CoreV1Api(api),
        "batch": client.BatchV1Api(api),
        "apps": client.AppsV1Api(api),
        "create": lambda manifest: utils.create_from_dict(api, manifest),
    }


def _job_state(batch, manifest: dict) -> str:
    """ "absent", "refused", "failed", "succeeded" or "running" for one worker Job."""
    from kubernetes import client

    meta = manifest["metadata"]
    try:
        status = batch.read_namespaced_job_status(meta["name"], meta["namespace"]).status
    except client.ApiException as err:
        if err.status == 404:
            return "absent"
        raise
    conditions = {c.type: c for c in (status.conditions or [])}
    failed = conditions.get("Failed")
    if failed is not None and failed.status == "True":
        # podFailurePolicy's FailJob (a trainer exited 2): retrying cannot help.
        return "refused" if failed.reason == "PodFailurePolicy" else "failed"
    complete = conditions.get("Complete")
    if status.succeeded or (complete is not None and complete.status == "True"):
        return "succeeded"
    return "running"


def _create_if_absent(create, manifest: dict) -> None:
    try:
        create(manifest)
    except Exception as err:
        # utils.create_from_dict wraps the API's errors in FailToCreateError.api_exceptions.
        statuses = [getattr(e, "status", None) for e in getattr(err, "api_exceptions", [err])]
        if not statuses or any(status != 409 for status in statuses):
            raise


def _delete(manifest: dict, *, core, batch, apps) -> None:
    """Remove one object; absent already is fine."""
    from kubernetes import client

    meta, kind = manifest["metadata"], manifest["kind"]
    try:
        if kind == "Job":
            batch.delete_namespaced_job(
                meta["name"], meta["namespace"], propagation_policy="Foreground"
            )
        elif kind == "Deployment":
            apps.delete_namespaced_deployment(meta["name"], meta["namespace"])
        else:
            core.delete_namespaced_service(meta["name"], meta["namespace"])
    except client.ApiException as err:
        if err.status != 404:
            raise


def run_kubernetes_jobs(
    manifests: list[dict], *, core, batch, create, apps=None, poll_seconds: float = 30.0
) -> None:
    """Create the Service and worker Jobs, wait for every Job to succeed, clean up.

    The Jobs are named after the DAG run, so a retry of the task finds what an
    earlier try submitted: when that is still running (the Airflow worker died,
    not the training) it waits for it instead of starting a second training
    on the same checkpoints; when it already succeeded it returns at once; only
    when a Job failed or is missing are they all replaced (MultiWorkerMirrored
    workers must start together), and the new ones resume from the checkpoints.
    """
    if start_jobs(manifests, core=core, batch=batch, create=create, apps=apps):
        return
    try:
        while not jobs_done(batch, manifests):
            time.sleep(poll_seconds)
    finally:
        remove_support(manifests, core=core, batch=batch, apps=apps)


def start_jobs(manifests: list[dict], *, core, batch, create, apps=None) -> bool:
    """Submit the Jobs, or reattach to those an earlier try submitted (see
    run_kubernetes_jobs); True when they all succeeded already (nothing to wait for)."""
    jobs = [m for m in manifests if m["kind"] == "Job"]
    names = ", ".join(m["metadata"]["name"] for m in jobs)
    states = {_job_state(batch, m) for m in jobs}
    if states == {"succeeded"}:
        log.info("training jobs already succeeded in an earlier try: %s", names)
        return True
    if states <= {"running", "succeeded"}:
        log.info("reattaching to the training jobs an earlier try submitted: %s", names)
        # The running pods resolve each other through the Service: keep it.
        for manifest in manifests:
            if manifest["kind"] != "Job":
                _create_if_absent(create, manifest)
    else:
        for manifest in manifests:
            _delete(manifest, core=core, batch=batch, apps=apps)
        for manifest in manifests:
            create(manifest)
    return False


def jobs_done(batch, manifests: list[dict]) -> bool:
    """One look at the worker Jobs: True when all succeeded, False while any runs;
    TrainingRefused (a trainer exited 2) or TrainingFailed when one failed or is gone."""
    jobs = [m for m in manifests if m["kind"] == "Job"]
    states = [_job_state(batch, manifest) for manifest in jobs]
    for manifest, state in zip(jobs, states, strict=True):
        name = manifest["metadata"]["name"]
        if state == "refused":
            raise TrainingRefused(
                f"training job {name}: a trainer exited {exit_codes.BAD_INPUT} (bad "
                "parameters or unusable shards; its pod's log says which)",
                exit_codes.BAD_INPUT,
            )
        if state in ("failed", "absent"):
            raise TrainingFailed(f"training job {name} {state}")
    done = states.count("succeeded")
    if done < len(jobs):
        log.info("training jobs: %d/%d done", done, len(jobs))
    return done == len(jobs)


def remove_support(manifests: list[dict], *, core, batch, apps=None) -> None:
    """The Services and the input service's Deployment; finished Jobs stay (their pods'
    logs)."""
    for manifest in manifests:
        if manifest["kind"] != "Job":
            _delete(manifest, core=core, batch=batch, apps=apps)
