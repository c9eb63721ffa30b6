"""The DAG on the database its users deploy: Airflow on a real PostgreSQL server, LocalExecutor.

SQLite stays the embedded default (`make airflow`, the other tests); this runs the
same REST trigger against Debian's PostgreSQL server, started in a temporary
folder on a free port by `scripts/postgres.sh` (which installs the package when
it is missing). Slow tier: `make test-slow`.
"""

import shutil
import subprocess
import tempfile

import psycopg2
import pytest

from tests.dags.airflow_env import REPO, Standalone
from tests.dags.test_dag_runs import _conf

SCRIPT = str(REPO / "scripts" / "postgres.sh")


@pytest.fixture
def postgres_url():
    # Not under pytest's tmp_path: the server runs as the `postgres` user when the
    # tests run as root, and pytest's folders are private to their owner.
    folder = tempfile.mkdtemp(prefix="imagepipe-pg-")
    started = subprocess.run([SCRIPT, "start", folder], capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([SCRIPT, "stop", folder], capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.extended
def test_the_dag_runs_on_postgresql_with_the_local_executor(
    postgres_url,
    images,
    tmp_path,
    free_port,
):
    home = tmp_path / "airflow_home"
    home.mkdir()
    server = Standalone(
        home,
        free_port,
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgres_url,
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
    )
    try:
        server.wait_ready()
        conf = _conf(
            tmp_path, images, epochs=2, num_workers=1, accuracy_gate=0.0, model_name="pg-model"
        )
        run_id = server.trigger(conf)
        assert server.wait_run(run_id) == "success", server.tail()
    finally:
        server.stop()
    assert sorted(p.name for p in (tmp_path / "models" / "pg-model").iterdir()) == ["1", "LATEST"]
    # The run and its tasks were recorded in PostgreSQL, and no SQLite file was made.
    url = postgres_url.replace("postgresql+psycopg2", "postgresql")
    with psycopg2.connect(url) as db, db.cursor() as cursor:
        cursor.execute("select state from dag_run where run_id = %s", (run_id,))
        assert cursor.fetchall() == [("success",)]
        cursor.execute("select task_id, state from task_instance where run_id = %s", (run_id,))
        states = dict(cursor.fetchall())
    assert states["publish"] == "success" and states["shard_images"] == "success"
    assert not list(home.glob("*.db"))
