"""OpenLineage events for a run: images -> shards -> model -> published version.

The OpenLineage provider is installed but sends nothing until a transport is
configured; here its file transport is, and `airflow dags test` runs the DAG.
`dags test` runs every task in one process, where Airflow's hook-lineage
collector keeps the earlier tasks' entries, so each task's datasets are
checked as "contains" (each task runs in its own process in a deployment).
"""

import json

import pytest

from orchestration.lineage import as_uri
from tests.dags.airflow_env import DAG_ID, airflow, airflow_env
from tests.dags.test_dag_runs import _conf


@pytest.mark.extended
def test_lineage_events_go_from_images_to_shards_to_model_to_the_published_version(
    images, tmp_path
):
    events_file = tmp_path / "openlineage.jsonl"
    transport = {"type": "file", "log_file_path": str(events_file), "append": True}
    env = airflow_env(
        tmp_path / "airflow_home",
        AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(transport),
        AIRFLOW__OPENLINEAGE__NAMESPACE="imagepipe",
    )
    conf = _conf(tmp_path, images, epochs=1, num_workers=1, accuracy_gate=0.0, model_name="ol")
    assert airflow(env, "db", "migrate").returncode == 0
    run = airflow(env, "dags", "test", DAG_ID, "-c", json.dumps(conf))
    assert run.returncode == 0, run.stderr[-3000:]

    done: dict[str, dict] = {}
    for line in events_file.read_text().splitlines():
        event = json.loads(line)
        if event["eventType"] == "COMPLETE":
            done[event["job"]["name"].removeprefix(f"{DAG_ID}.")] = {
                side: {f"{d['namespace']}://{d['name']}" for d in event.get(side, [])}
                for side in ("inputs", "outputs")
            }
    [run_dir] = (tmp_path / "out" / "runs").iterdir()
    shards, model = as_uri(str(run_dir / "shards")), as_uri(str(run_dir / "train" / "model"))
    published = as_uri(str(tmp_path / "models" / "ol" / "1"))
    assert as_uri(str(images)) in done["shard_images"]["inputs"]
    assert shards in done["shard_images"]["outputs"]
    assert shards in done["train"]["inputs"] and model in done["train"]["outputs"]
    assert model in done["publish"]["inputs"] and published in done["publish"]["outputs"]
