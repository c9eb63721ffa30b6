"""Each container installs one extra: its stage's engine and nothing heavy besides.

Checked on the repository's own files (pyproject.toml and the Dockerfiles), so an
image that would pull TensorFlow into Beam workers or Beam into trainers fails here,
before anyone builds it.
"""

import re
import tomllib

import yaml

from tests.dags.airflow_env import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
HEAVY = {"tensorflow", "tensorflow-cpu", "apache-beam", "apache-airflow"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


# How a Dockerfile installs the project: `pip install "${WHEEL}[extras]"` or, in a stage built
# on another, `pip install "$(ls /wheels/*.whl)[extras]"`.
_INSTALL = re.compile(r'"(?:\$\{WHEEL\}|\$\(ls /wheels/\*\.whl\))(?:\[([A-Za-z_,${}]*)\])?"')


def _installed_extras(dockerfile: str, target: str | None = None) -> set[str]:
    """The extras an image built to `target` (default: the last stage) installs: those of its
    stage and of every stage of the same file it is built FROM, an ARG resolved to its default."""
    text = (REPO / "docker" / dockerfile).read_text()
    stages: dict[str, tuple[str, str]] = {}  # name -> (what it is FROM, its instructions)
    for index, stage in enumerate(re.split(r"^(?=FROM )", text, flags=re.M)[1:]):
        base, name = re.match(r"FROM (\S+)(?: AS (\S+))?", stage).groups()
        last = name or str(index)
        stages[last] = (base, stage)
    args = re.findall(r"^ARG ([A-Z_]+)=(\S*)$", text, re.M)
    extras: set[str] = set()
    stage = target or last
    while stage in stages:
        base, body = stages[stage]
        for found in _INSTALL.findall(body):
            for name, default in args:
                found = found.replace(f"${{{name}}}", default)
            assert "$" not in found, found
            extras |= set(filter(None, found.split(",")))
        stage = base
    return extras


def _packages(extras: set[str]) -> set[str]:
    names = _names(PROJECT["dependencies"])
    for extra in extras:
        names |= _names(PROJECT["optional-dependencies"][extra])
    return names


def test_the_base_install_pulls_no_engine():
    assert not _names(PROJECT["dependencies"]) & HEAVY


def test_beam_workers_get_beam_and_no_tensorflow():
    packages = _packages(_installed_extras("beam.Dockerfile"))
    assert "apache-beam" in packages
    assert not packages & {"tensorflow", "tensorflow-cpu", "apache-airflow"}


def test_trainers_get_tensorflow_and_no_beam_or_airflow():
    packages = _packages(_installed_extras("trainer.Dockerfile"))
    assert "tensorflow" in packages
    assert not packages & {"apache-beam", "apache-airflow"}


def test_the_airflow_image_has_no_tensorflow_unless_built_for_the_training_queue():
    # shard_images runs Beam's local runner or submits to Dataflow; publish uses fsspec.
    packages = _packages(_installed_extras("airflow.Dockerfile"))
    assert {"apache-airflow", "apache-beam"} <= packages
    assert not packages & {"tensorflow", "tensorflow-cpu"}
    compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
    build = compose["services"]["airflow-worker-training"]["build"]
    assert build["dockerfile"] == "docker/airflow.Dockerfile"
    training = _packages(_installed_extras("airflow.Dockerfile", build["target"]))
    assert {"apache-airflow", "apache-beam", "tensorflow-cpu"} <= training
