"""How the orchestrator starts a multi-worker training job: locally or on Kubernetes.

`local` runs `python -m training.launch` (N processes on this machine) and
streams its output into the caller's log. `kubernetes` renders one Job per
worker (each a single pod with a stable DNS name through a headless Service
and its own `TF_CONFIG`), which the DAG submits with the cncf.kubernetes
provider. Both run the same `python -m training.train` with the same flags.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

LAUNCHERS = ("local", "kubernetes")
TF_PORT = 2222


class TrainingFailed(RuntimeError):
    pass


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
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
    and a literal `TF_CONFIG`. Jobs restart failed pods (`backoffLimit`); a
    restarted worker resumes from the shared checkpoints under `job.output`,
    which must be storage every pod sees (gs:// or a shared volume).
    """
    base = _dns_name(name)
    hosts = [f"{base}-worker-{i}.{base}.{namespace}.svc:{TF_PORT}" for i in range(job.num_workers)]
    labels = {"app.kubernetes.io/name": "imagepipe-trainer", "imagepipe/job": base}
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
            "restartPolicy": "OnFailure",
            "containers": [
                {
                    "name": "trainer",
                    "image": image,
                    "command": ["python", "-m", "training.train"],
                    "args": job.train_args(),
                    "env": [{"name": "TF_CONFIG", "value": json.dumps(tf_config)}],
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
                    "template": {
                        "metadata": {"labels": {**labels, "imagepipe/worker": str(index)}},
                        "spec": pod_spec,
                    },
                },
            }
        )
    return manifests
