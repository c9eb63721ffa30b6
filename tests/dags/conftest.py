"""Images the DAG runs read (module-wide: generated once per test module)."""

import pytest

from beam_jobs import sample_data


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("dag_images")
    sample_data.generate(str(root), images_per_class=100, seed=21)
    sample_data.write_corrupt_files(str(root), seed=21)  # 4 of 404: under the 5% budget
    return root
