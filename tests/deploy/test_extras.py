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


def _installed_extras(dockerfile: str, build_args: dict | None = None) -> set[str]:
    """The extras `pip install "${WHEEL}[...]"` installs, an ARG resolved to its default
    or to the build argument given."""
    text = (REPO / "docker" / dockerfile).read_text()
    (extras,) = re.findall(r'"\$\{WHEEL\}(?:\[([a-z,${}A-Z_]*)\])?"', text)
    for name, default in re.findall(r"^ARG ([A-Z_]+)=(\S*)$", text, re.M):
        extras = extras.replace(f"${{{name}}}", (build_args or {}).get(name, default))
    assert "$" not in extras, extras
    return set(filter(None, extras.split(",")))


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
    training = _packages(_installed_extras("airflow.Dockerfile", build["args"]))
    assert {"apache-airflow", "apache-beam", "tensorflow-cpu"} <= training
