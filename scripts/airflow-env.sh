# Source me: the settings of a local Airflow (SQLite, this repository's dags/), defined once
# in orchestration/local_airflow.py. AIRFLOW_HOME defaults to .airflow/ in the repository
# (git-ignored).
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$REPO/.venv/bin:$PATH"
eval "$(PYTHONPATH="$REPO" python -m orchestration.local_airflow --print-env)"
