#!/usr/bin/env bash
# make demo: sample dataset -> the whole Airflow DAG (airflow dags test, SQLite) -> report.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
DEMO_DIR="${DEMO_DIR:-$REPO/demo-output}"
export AIRFLOW_HOME="$DEMO_DIR/airflow"
source "$REPO/scripts/airflow-env.sh"

# Nothing here is removed: a second demo is the next scheduled run of the first one. It
# compares its model with the one served (LATEST) and publishes only if not worse; runs,
# models published from the UI, and the Airflow database stay (remove demo-output/ to
# start over).
mkdir -p "$DEMO_DIR"
if [ ! -d "$DEMO_DIR/images" ]; then
  python -m beam_jobs.sample_data "$DEMO_DIR/images.partial" --images-per-class 250 --with-corrupt
  mv "$DEMO_DIR/images.partial" "$DEMO_DIR/images"
fi
airflow db migrate > "$DEMO_DIR/airflow-db-migrate.log" 2>&1
CONF=$(cat <<JSON
{"input_uri": "$DEMO_DIR/images", "output_root": "$DEMO_DIR/pipeline",
 "model_root": "$DEMO_DIR/models", "model_name": "shapes", "num_workers": 2}
JSON
)
echo "running the DAG image_model_pipeline (full log: $DEMO_DIR/dag-run.log)"
airflow dags test image_model_pipeline -c "$CONF" > "$DEMO_DIR/dag-run.log" 2>&1 &
DAG_PID=$!
# One line per task start and end (and per training epoch), read from Airflow's database
# and the run folder while the run goes on.
python -m orchestration.progress --db "$AIRFLOW_HOME/airflow.db" --pid "$DAG_PID" \
  --output-root "$DEMO_DIR/pipeline" || true
if ! wait "$DAG_PID"; then
  tail -n 60 "$DEMO_DIR/dag-run.log"
  echo "demo: the DAG run failed; full log in $DEMO_DIR/dag-run.log" >&2
  exit 1
fi
python -m orchestration.summary --model-root "$DEMO_DIR/models" --model-name shapes \
  --output-root "$DEMO_DIR/pipeline"
