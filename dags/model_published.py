"""model_published: runs whenever image_model_pipeline publishes a model (Asset schedule).

An example consumer: it reports the published version. Replace the task body
with what should follow a new model (canary deploy, batch scoring, a notice).
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import Asset, dag, task

MODEL = Asset.ref(name="imagepipe_model")  # published by image_model_pipeline


@dag(
    dag_id="model_published",
    schedule=[MODEL],
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["imagepipe"],
    doc_md=__doc__,
)
def model_published():
    @task
    def report_new_model(**context) -> dict:
        events = [e for batch in context["triggering_asset_events"].values() for e in batch]
        for event in events:
            print(f"new model from {event.source_dag_id} run {event.source_run_id}")
        return {"events": len(events)}

    report_new_model()


model_published()
