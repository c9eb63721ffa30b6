"""Submitting training to Kubernetes or Vertex AI from the Airflow task, and reading its result.

No TensorFlow; the Airflow providers are imported inside the functions that use them.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time

import fsspec

log = logging.getLogger(__name__)


def read_training_result(train_dir: str) -> dict:
    """The trained model's path and final metrics: what goes through XCom."""
    with fsspec.open(posixpath.join(train_dir, "metrics.json")) as handle:
        metrics = json.load(handle)
    final = metrics["epochs"][-1]
    return {
        "model_dir": posixpath.join(train_dir, "model"),
        "val_accuracy": final.get("val_accuracy"),
        "train_loss": final.get("train_loss"),
        "steps": final.get("step"),
        "resumed_from_step": metrics.get("resumed_from_step", 0),
    }


def submit_kubernetes(
    manifests: list[dict], *, conn_id: str = "kubernetes_default", poll_seconds: float = 30.0
) -> None:
    """Run the Service and worker Jobs with the cncf.kubernetes provider's connection."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes import client, utils

    api = KubernetesHook(conn_id=conn_id).get_conn()
    run_kubernetes_jobs(
        manifests,
        core=client.CoreV1Api(api),
        batch=client.BatchV1Api(api),
        apps=client.AppsV1Api(api),
        create=lambda manifest: utils.create_from_dict(api, manifest),
        poll_seconds=poll_seconds,
    )


def _job_state(batch, manifest: dict) -> str:
    """ "absent", "failed", "succeeded" or "running" for one worker Job."""
    from kubernetes import client

    meta = manifest["metadata"]
    try:
        status = batch.read_namespaced_job_status(meta["name"], meta["namespace"]).status
    except client.ApiException as err:
        if err.status == 404:
            return "absent"
        raise
    conditions = {c.type: c.status for c in (status.conditions or [])}
    if conditions.get("Failed") == "True":
        return "failed"
    if status.succeeded or conditions.get("Complete") == "True":
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

    jobs = [m for m in manifests if m["kind"] == "Job"]
    names = ", ".join(m["metadata"]["name"] for m in jobs)
    states = {_job_state(batch, m) for m in jobs}
    if states == {"succeeded"}:
        log.info("training jobs already succeeded in an earlier try: %s", names)
        return
    reattach = states <= {"running", "succeeded"}
    if reattach:
        log.info("reattaching to the training jobs an earlier try submitted: %s", names)
    if reattach:  # the running pods resolve each other through the Service: keep it
        for manifest in manifests:
            if manifest["kind"] != "Job":
                _create_if_absent(create, manifest)
    else:
        for manifest in manifests:
            _delete(manifest, core=core, batch=batch, apps=apps)
        for manifest in manifests:
            create(manifest)
    try:
        while True:
            states = [_job_state(batch, manifest) for manifest in jobs]
            for manifest, state in zip(jobs, states, strict=True):
                if state in ("failed", "absent"):
                    raise RuntimeError(f"training job {manifest['metadata']['name']} {state}")
            done = states.count("succeeded")
            if done == len(jobs):
                return
            log.info("training jobs: %d/%d done", done, len(jobs))
            time.sleep(poll_seconds)
    finally:  # the Services and the input service's Deployment; finished Jobs stay
        for manifest in manifests:
            if manifest["kind"] != "Job":
                _delete(manifest, core=core, batch=batch, apps=apps)


def submit_vertex(
    custom_job: dict,
    *,
    project: str,
    region: str,
    context,
    conn_id: str = "google_cloud_default",
) -> dict:
    """Run the rendered CustomJob and wait for it; a retry reconnects to a job an earlier
    try submitted (orchestration/vertex_job.py).

    Runs inside the `train` task (same task, same retries and Param) rather
    than as a separate DAG node, so the launcher stays one parameter and
    clearing `train` reruns training whichever launcher it used. Credentials
    come from the `google_cloud_default` connection or Application Default
    Credentials; none pass through here.
    """
    from orchestration.vertex_job import VertexTrainingJobOperator

    operator = VertexTrainingJobOperator(
        task_id="train_vertex_custom_job",
        project_id=project,
        region=region,
        custom_job=custom_job,
        gcp_conn_id=conn_id,
        poll_interval=30,
    )
    return operator.execute(context)  # the hook raises on FAILED, CANCELLED, EXPIRED
