"""The import graph goes one way: contract and config at the bottom, stages above them,
orchestration above the stages, DAG files on top. Checked statically, every import
statement including those inside functions."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = {"tensorflow", "keras", "apache_beam", "airflow"}
FIRST_PARTY = {
    "shardspec",
    "runspec",
    "stageconfig",
    "beam_jobs",
    "datacheck",
    "training",
    "orchestration",
    "dags",
}

FORBIDDEN = {
    "shardspec": HEAVY | FIRST_PARTY - {"shardspec"},
    "runspec": HEAVY | FIRST_PARTY - {"runspec"},
    "stageconfig": HEAVY | FIRST_PARTY - {"stageconfig"},
    "beam_jobs": {"tensorflow", "keras", "airflow", "training", "orchestration", "dags"},
    "datacheck": HEAVY | {"beam_jobs", "training", "orchestration", "dags"},
    "training": {"apache_beam", "airflow", "beam_jobs", "orchestration", "dags"},
    "orchestration": {"dags"},
}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_downward(package):
    files = sorted((REPO / package).rglob("*.py"))
    assert files
    wrong = {
        f"{path.relative_to(REPO)} imports {name}"
        for path in files
        for name in imported_modules(path) & FORBIDDEN[package]
    }
    assert not wrong, sorted(wrong)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from airflow.sdk import dag\n    import tensorflow as tf\n")
    assert imported_modules(module) == {"airflow", "tensorflow"}
