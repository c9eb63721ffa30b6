"""Images the DAG runs read (module-wide: generated once per test module), a running Airflow."""

import pytest

from beam_jobs import sample_data
from tests.dags.airflow_env import Standalone


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("dag_images")
    sample_data.generate(str(root), images_per_class=100, seed=21)
    sample_data.write_corrupt_files(str(root), seed=21)  # 4 of 404: under the 5% budget
    return root


@pytest.fixture
def standalone(tmp_path, free_port):
    """`airflow standalone` on SQLite in its own home, ready and logged in."""
    home = tmp_path / "airflow_home"
    home.mkdir()
    server = Standalone(home, free_port)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
