"""Parse the DAG folder the way Airflow does and print what the tests check, as JSON."""

import json
import sys
import time

import airflow.sdk  # noqa: F401  (Airflow itself is loaded before any DAG file is parsed)
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.param import ParamValidationError

started = time.perf_counter()
bag = DagBag(sys.argv[1])
seconds = time.perf_counter() - started
dag = bag.dags["image_model_pipeline"]

BAD = {
    "epochs": 0,
    "num_workers": 100,
    "learning_rate": 0,
    "accuracy_gate": 1.5,
    "architecture": "vgg",
    "model_name": "../etc",
    "beam_runner": "MyRunner",
    "beam_options": "not-an-object",
    "image_size": "big",
    "training_launcher": "slurm",
    "training_options": ["not", "an", "object"],
}
rejected = {}
for name, value in BAD.items():
    try:
        dag.params.get_param(name).resolve(value)
        rejected[name] = False
    except ParamValidationError:
        rejected[name] = True

print(
    json.dumps(
        {
            "import_errors": {k: str(v) for k, v in bag.import_errors.items()},
            "dag_ids": sorted(bag.dags),
            "tasks": {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks},
            "heavy_modules": sorted(
                m for m in ("tensorflow", "keras", "apache_beam") if m in sys.modules
            ),
            "parse_seconds": seconds,
            "params": {k: dag.params.get_param(k).resolve() for k in dag.params},
            "param_schemas": {
                k: {
                    "default": dag.params.get_param(k).value,
                    "description": dag.params.get_param(k).description,
                    **dag.params.get_param(k).schema,
                }
                for k in dag.params
            },
            "params_described": all(dag.params.get_param(k).description for k in dag.params),
            "rejected": rejected,
            "schedule": str(dag.schedule),
            "catchup": dag.catchup,
            "max_active_runs": dag.max_active_runs,
            "retries": {t.task_id: t.retries for t in dag.tasks},
            "timeouts": {
                t.task_id: t.execution_timeout.total_seconds() if t.execution_timeout else None
                for t in dag.tasks
            },
            "queues": {t.task_id: t.queue for t in dag.tasks},
            "outlets": {t.task_id: [a.name for a in t.outlets] for t in dag.tasks},
            "shard_operator": [c.__name__ for c in type(dag.get_task("shard_images")).__mro__],
            "consumer_schedule": [a.name for a in bag.dags["model_published"].schedule],
        }
    )
)
