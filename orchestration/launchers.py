"""How the orchestrator starts a multi-worker training job: here, on Kubernetes, or on Vertex AI.

`local` runs `python -m training.launch` (N processes on this machine) and
streams its output into the caller's log. `kubernetes` renders one Job per
worker (each a single pod with a stable DNS name through a headless Service
and its own `TF_CONFIG`), which the DAG submits with the cncf.kubernetes
provider. `vertex` renders a Vertex AI CustomJob (a chief pool and a worker
pool; Vertex sets `TF_CONFIG` itself), which the DAG submits with the Google
provider's `CreateCustomJobOperator`. All run the same `python -m
training.train` with the same flags, so the launcher is configuration.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from training.config import CLUSTER_INPUT_SERVICE, parse_input_service
from training.processes import die_with_parent
from training.worker_env import PREEMPTED_EXIT_CODE, worker_env_list

log = logging.getLogger(__name__)

LAUNCHERS = ("local", "kubernetes", "vertex")
TF_PORT = 2222
TRAIN_COMMAND = ["python", "-m", "training.train"]
INPUT_SERVICE_COMMAND = ["python", "-m", "training.input_service"]
INPUT_SERVICE_PORT = 5050


class TrainingFailed(RuntimeError):
    pass


class LauncherConfigError(ValueError):
    """Settings that do not fit the chosen launcher; a user mistake, not a crash."""


@dataclass(frozen=True)
class TrainingJob:
    data: str
    output: str
    num_workers: int = 2
    train_flags: dict = field(default_factory=dict)

    def train_args(self) -> list[str]:
        args = ["--data", self.data, "--output", self.output]
        for key, value in sorted(self.train_flags.items()):
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                if value:
                    args.append(flag)
            elif value is not None:
                args.extend([flag, str(value)])
        return args

    @property
    def local_service_workers(self) -> int:
        """N of `input_service: local:N` (0 otherwise): the service the launcher starts."""
        return parse_input_service(str(self.train_flags.get("input_service") or ""))[1]

    def with_input_service(self, address: str) -> TrainingJob:
        """The same job, its trainers pointed at a tf.data service the launcher started."""
        return replace(self, train_flags={**self.train_flags, "input_service": address})


def run_local(
    job: TrainingJob, *, emit: Callable[[str], None] = print, python: str = sys.executable
) -> None:
    """Run the job as N local processes; raise TrainingFailed with the launcher's verdict."""
    command = [
        python,
        "-m",
        "training.launch",
        "--num-workers",
        str(job.num_workers),
        *job.train_args(),
    ]
    emit("running: " + " ".join(command))
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=die_with_parent(),  # a killed task must not leave training running
    )
    tail: list[str] = []
    for line in process.stdout:
        emit(line.rstrip("\n"))
        tail = [*tail[-30:], line.rstrip("\n")]
    code = process.wait()
    if code != 0:
        raise TrainingFailed(f"training exited with code {code}:\n" + "\n".join(tail))


def _dns_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:40].rstrip("-") or "train"


def render_kubernetes(
    job: TrainingJob,
    *,
    name: str,
    image: str,
    namespace: str = "default",
    gpus_per_worker: int = 0,
    cpu: str = "2",
    memory: str = "8Gi",
    service_account: str | None = None,
    backoff_limit: int = 3,
) -> list[dict]:
    """Manifests for N workers: a headless Service and one single-pod Job per worker.

    Each pod gets `hostname`/`subdomain` so `<name>-worker-<i>.<name>` resolves,
    and a literal `TF_CONFIG`. Jobs replace failed pods (`backoffLimit`); a
    replacement resumes from the shared checkpoints under `job.output`, which
    must be storage every pod sees (gs:// or a shared volume). A preempted
    pod (evicted, its node drained or reclaimed: the `DisruptionTarget`
    condition) or one that exits PREEMPTED_EXIT_CODE (every worker saved on
    SIGTERM) is replaced without counting against `backoffLimit`
    (`podFailurePolicy`, which needs `restartPolicy: Never`).
    """
    base = _dns_name(name)
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
    resources: dict = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}}
    if gpus_per_worker:
        resources["limits"]["nvidia.com/gpu"] = gpus_per_worker
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
        if service_account:
            pod_spec["serviceAccountName"] = service_account
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
                    "backoffLimit": backoff_limit,
                    "podFailurePolicy": {
                        "rules": [
                            {
                                "action": "Ignore",
                                "onExitCodes": {
                                    "containerName": "trainer",
                                    "operator": "In",
                                    "values": [PREEMPTED_EXIT_CODE],
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


def render_vertex_custom_job(
    job: TrainingJob,
    *,
    display_name: str,
    image: str,
    machine_type: str = "n1-standard-8",
    accelerator_type: str | None = None,
    accelerator_count: int = 0,
    service_account: str | None = None,
    network: str | None = None,
    boot_disk_size_gb: int = 100,
    input_machine_type: str = "n1-highcpu-16",
) -> dict:
    """A Vertex AI CustomJob (as the API's JSON) for N workers.

    Pool 0 is one replica, which Vertex names `chief` in the `TF_CONFIG` it
    sets; pool 1 holds the other N-1 as `worker`s (`training.distribute`
    reads both). `restart_job_on_worker_restart` restarts every replica when
    one dies, which MultiWorkerMirroredStrategy needs (its collectives cannot
    take a lone newcomer); the restarted job resumes from the checkpoints
    under `job.output`, which must be gs://.

    `input_service: local:M` adds pool 2: one `input_machine_type` replica
    running the tf.data service's dispatcher and M workers. Vertex lists it in
    `TF_CONFIG` as the `ps` task; the trainers take `--input-service cluster`
    and read its address there (and keep it out of their collectives).
    """
    for path in (job.data, job.output):
        if not path.startswith("gs://"):
            raise LauncherConfigError(
                f"Vertex AI workers only see gs:// paths, not {path!r}: set output_root to gs://"
            )
    service_workers = job.local_service_workers
    if service_workers:
        job = job.with_input_service(CLUSTER_INPUT_SERVICE)
    machine: dict = {"machine_type": machine_type}
    if accelerator_count:
        if not accelerator_type:
            raise LauncherConfigError("accelerator_count needs accelerator_type (NVIDIA_L4, ...)")
        machine.update(accelerator_type=accelerator_type, accelerator_count=accelerator_count)
    container = {
        "image_uri": image,
        "command": TRAIN_COMMAND,
        "args": job.train_args(),
        "env": worker_env_list(),
    }
    pool = {
        "machine_spec": machine,
        "container_spec": container,
        "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": boot_disk_size_gb},
    }
    pools = [{**pool, "replica_count": 1}]
    if job.num_workers > 1:
        pools.append({**pool, "replica_count": job.num_workers - 1})
    if service_workers:
        if len(pools) == 1:
            pools.append({})  # Vertex AI: an empty spec leaves pool 1 out
        pools.append(
            {
                "machine_spec": {"machine_type": input_machine_type},
                "replica_count": 1,
                "container_spec": {
                    "image_uri": image,
                    "command": INPUT_SERVICE_COMMAND,
                    "args": ["--workers", str(service_workers), "--from-tf-config"],
                    "env": worker_env_list(),
                },
                "disk_spec": pool["disk_spec"],
            }
        )
    spec: dict = {
        "worker_pool_specs": pools,
        "scheduling": {"restart_job_on_worker_restart": True},
    }
    if service_account:
        spec["service_account"] = service_account
    if network:
        spec["network"] = network
    return {
        "display_name": _dns_name(display_name),
        "job_spec": spec,
        "labels": {"app": "imagepipe-trainer"},
    }


# What a user may set in the DAG's `training_options` for each launcher.
LAUNCHER_OPTIONS = {
    "local": set(),
    "kubernetes": {
        "namespace",
        "gpus_per_worker",
        "cpu",
        "memory",
        "service_account",
        "backoff_limit",
    },
    "vertex": {
        "project",
        "region",
        "machine_type",
        "accelerator_type",
        "accelerator_count",
        "service_account",
        "network",
        "boot_disk_size_gb",
        "input_machine_type",
    },
}


def check_launcher_options(launcher: str, options: dict) -> dict:
    """Reject unknown settings and missing required ones with a message a user can act on."""
    if launcher not in LAUNCHER_OPTIONS:
        raise LauncherConfigError(f"unknown training launcher {launcher!r}; one of {LAUNCHERS}")
    unknown = set(options) - LAUNCHER_OPTIONS[launcher]
    if unknown:
        allowed = sorted(LAUNCHER_OPTIONS[launcher]) or "none"
        raise LauncherConfigError(
            f"training_options {sorted(unknown)} do not apply to the {launcher!r} launcher "
            f"(allowed: {allowed})"
        )
    if launcher == "vertex":
        missing = {"project", "region"} - set(options)
        if missing:
            raise LauncherConfigError(
                f"the vertex launcher needs training_options {sorted(missing)}"
            )
    return dict(options)
