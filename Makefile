# Everything installs into .venv from pinned versions (constraints.txt); every
# target that needs it installs it first, so `make demo` and `make test` work
# on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= cpu,airflow,dev
DEMO_DIR ?= demo-output
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install test lint format demo clean lock

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

demo: install
	rm -rf $(DEMO_DIR)
	$(BIN)/python -m beam_jobs.sample_data $(DEMO_DIR)/images --with-corrupt
	$(BIN)/python -m beam_jobs.shard_images --input $(DEMO_DIR)/images --output $(DEMO_DIR)/shards
	$(BIN)/python -m training.launch --num-workers 2 --data $(DEMO_DIR)/shards --output $(DEMO_DIR)/run --epochs 8

# Re-pin after changing dependencies in pyproject.toml.
lock: install
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^imagepipe' > constraints.txt

clean:
	rm -rf $(DEMO_DIR) .pytest_cache .ruff_cache
