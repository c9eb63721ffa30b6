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
    """Create the Service and worker Jobs, wait for every Job to succeed, clean up.

    Uses the cncf.kubernetes provider's connection; existing objects of the same
    name (from a previous try) are replaced, and the trainers resume from their
    checkpoints.
    """
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes import client, utils

    api = KubernetesHook(conn_id=conn_id).get_conn()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    jobs = [m for m in manifests if m["kind"] == "Job"]
    for manifest in manifests:
        meta = manifest["metadata"]
        try:
            if manifest["kind"] == "Job":
                batch.delete_namespaced_job(
                    meta["name"], meta["namespace"], propagation_policy="Foreground"
                )
            else:
                core.delete_namespaced_service(meta["name"], meta["namespace"])
        except client.ApiException as err:
            if err.status != 404:
                raise
    for manifest in manifests:
        utils.create_from_dict(api, manifest)
    try:
        while True:
            states = []
            for manifest in jobs:
                meta = manifest["metadata"]
                status = batch.read_namespaced_job_status(meta["name"], meta["namespace"]).status
                if status.failed and status.failed > manifest["spec"]["backoffLimit"]:
                    raise RuntimeError(f"training job {meta['name']} failed")
                states.append(bool(status.succeeded))
            if all(states):
                return
            log.info("training jobs: %d/%d done", sum(states), len(states))
            time.sleep(poll_seconds)
    finally:
        for manifest in manifests:
            if manifest["kind"] == "Service":
                meta = manifest["metadata"]
                core.delete_namespaced_service(meta["name"], meta["namespace"])


def submit_vertex(
    custom_job: dict,
    *,
    project: str,
    region: str,
    context,
    conn_id: str = "google_cloud_default",
) -> dict:
    """Run the rendered CustomJob with the Google provider's operator and wait for it.

    Runs inside the `train` task (same task, same retries and Param) rather
    than as a separate DAG node, so the launcher stays one parameter and
    clearing `train` reruns training whichever launcher it used. Credentials
    come from the `google_cloud_default` connection or Application Default
    Credentials; none pass through here.
    """
    from airflow.providers.google.cloud.operators.vertex_ai.custom_job import (
        CreateCustomJobOperator,
    )

    operator = CreateCustomJobOperator(
        task_id="train_vertex_custom_job",
        project_id=project,
        region=region,
        custom_job=custom_job,
        gcp_conn_id=conn_id,
        poll_interval=30,
    )
    return operator.execute(context)  # the hook raises on FAILED, CANCELLED, EXPIRED
