"""The `vertex` launcher: a Vertex AI CustomJob, reconnected to when the task is retried.

What Vertex allows for the exit-code contract: its CustomJob API has no policy by
exit code (Kubernetes' podFailurePolicy has no counterpart): a replica that exits
non-zero is restarted by Vertex itself under `restart_job_on_worker_restart`, and a
job that keeps failing ends FAILED with an error message naming the replica's
status ("... exited with a non-zero status of 2"). The task reads the code from
that message: 2 fails it without retries, 75 restarts it without counting a
failure, anything else is retried.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestration.launchers import (
    INPUT_SERVICE_COMMAND,
    TRAIN_COMMAND,
    LauncherConfigError,
    TrainingFailed,
    TrainingJob,
    dns_name,
    failure,
)
from stageconfig import param
from training.config import CLUSTER_INPUT_SERVICE
from training.worker_env import worker_env_list

ACTIVE_STATES = frozenset(
    {"JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_UPDATING"}
)
_REPLICA_EXIT = re.compile(r"non-zero status of (-?\d+)")


@dataclass(frozen=True)
class Options:
    project: str = param(help="Google Cloud project of the CustomJob")
    region: str = param(help="Vertex AI region (europe-west4, ...)")
    machine_type: str = param("n1-standard-8", help="Machine of every training replica")
    accelerator_type: str | None = param(None, help="NVIDIA_L4, NVIDIA_TESLA_T4, ...")
    accelerator_count: int = param(0, minimum=0, maximum=16, help="Accelerators per replica")
    service_account: str | None = param(None, help="The job's service account")
    network: str | None = param(None, help="VPC network to peer with")
    boot_disk_size_gb: int = param(100, minimum=10, maximum=65536, help="Boot disk per replica")
    input_machine_type: str = param(
        "n1-highcpu-16", help="Machine of the tf.data service (input_service local:N)"
    )


def render(job: TrainingJob, options: Options, *, display_name: str, image: str) -> dict:
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
    o = options
    service_workers = job.local_service_workers
    if service_workers:
        job = job.with_input_service(CLUSTER_INPUT_SERVICE)
    machine: dict = {"machine_type": o.machine_type}
    if o.accelerator_count:
        if not o.accelerator_type:
            raise LauncherConfigError(
                "training_options.accelerator_count needs accelerator_type (NVIDIA_L4, ...)"
            )
        machine.update(accelerator_type=o.accelerator_type, accelerator_count=o.accelerator_count)
    container = {
        "image_uri": image,
        "command": TRAIN_COMMAND,
        "args": job.train_args(),
        "env": worker_env_list(),
    }
    pool = {
        "machine_spec": machine,
        "container_spec": container,
        "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": o.boot_disk_size_gb},
    }
    pools = [{**pool, "replica_count": 1}]
    if job.num_workers > 1:
        pools.append({**pool, "replica_count": job.num_workers - 1})
    if service_workers:
        if len(pools) == 1:
            pools.append({})  # Vertex AI: an empty spec leaves pool 1 out
        pools.append(
            {
                "machine_spec": {"machine_type": o.input_machine_type},
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
    if o.service_account:
        spec["service_account"] = o.service_account
    if o.network:
        spec["network"] = o.network
    return {
        "display_name": dns_name(display_name),
        "job_spec": spec,
        "labels": {"app": "imagepipe-trainer"},
    }


def failure_from_error(message: str):
    """The TrainingFailed (or its final/preempted kinds) for a FAILED job's error message."""
    match = _REPLICA_EXIT.search(message or "")
    code = int(match.group(1)) if match else None
    if code is None:
        return TrainingFailed(f"Vertex AI job failed: {message}")
    return failure(code, f"Vertex AI job failed: {message}")
