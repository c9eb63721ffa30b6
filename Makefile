# Everything installs into .venv from pinned versions (constraints.txt); every
# target that needs it installs it first, so `make demo` and `make test` work
# on a fresh clone.
# Python 3.11 exactly (the pins are made for it): python3.11 when there is one, else python3;
# scripts/venv.sh refuses another version in one line.
PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= beam,cpu,airflow,postgres,celery,dev,bench
DEMO_DIR ?= demo-output
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install test test-fast test-slow test-images test-clusters lint format demo airflow airflow-postgres bench clean lock

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@scripts/venv.sh "$(PYTHON)" "$(VENV)"
	@echo "installing the pinned dependencies into $(VENV) (minutes on a fresh clone, ~4 GB)"
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

test: install
	$(BIN)/python -m pytest -m "not extended"

# Every save: the unit tests that start no process, no Airflow run and no training (the
# `slow` marker flags those); a few minutes on 2 cores. `make test` runs both.
test-fast: install
	$(BIN)/python -m pytest -m "not slow and not extended"

# Long fault-injection runs (killed processes, concurrent DAG runs): tests/reliability.
test-slow: install
	$(BIN)/python -m pytest -m "extended and not images and not clusters"

# The sharding job on a Flink cluster on localhost (scripts/clusters.sh: fetches Flink and
# Beam's job server once into .clusters/): tests/deploy/test_flink.py.
test-clusters: install
	$(BIN)/python -m pytest -m clusters

# The container images built with podman (scripts/images.sh: installs podman, makes local
# stand-ins of bases it cannot pull) and run as deployed: tests/deploy/test_images.py.
test-images: install
	scripts/images.sh build
	$(BIN)/python -m pytest -m images

# Benchmarks (not part of `make test`): bench/results/*.json, table, plot, docs/benchmarks.md.
bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint docker/*.Dockerfile docker/standin/*.Dockerfile

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

demo: install
	DEMO_DIR=$(abspath $(DEMO_DIR)) scripts/demo.sh

# A local Airflow with UI and REST API (http://127.0.0.1:8080), DAGs from dags/, state in
# .airflow/; Ctrl-C stops every process it started (orchestration/local_airflow.py).
airflow: install
	$(BIN)/python -m orchestration.local_airflow

# The same on PostgreSQL with the LocalExecutor, as deployed: a server in .airflow-postgres/
# (Debian's package, installed when missing) on a free port, stopped when Airflow stops.
PG_DIR ?= $(CURDIR)/.airflow-postgres
airflow-postgres: install
	bash -c 'url="$$(scripts/postgres.sh start $(PG_DIR))" && trap "scripts/postgres.sh stop $(PG_DIR)" EXIT \
	  && echo "Airflow metadata: $$url" \
	  && AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="$$url" AIRFLOW__CORE__EXECUTOR=LocalExecutor $(BIN)/python -m orchestration.local_airflow'

# Re-pin after changing dependencies in pyproject.toml.
lock: install
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^imagepipe' > constraints.txt

clean:
	rm -rf $(DEMO_DIR) .pytest_cache .ruff_cache
