# The two commands a fresh clone needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck layers pytest proto clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[cli,dev]'
	touch $(STAMP)

# The main job: the embedded server in a subprocess and messages pushed through it end to end.
run: $(STAMP)
	$(BIN)/python -m thrust.cli.demo

lint: $(STAMP)
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts

typecheck: $(STAMP)
	$(BIN)/mypy src/thrust

layers: $(STAMP)
	$(BIN)/lint-imports

pytest: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

test: lint typecheck layers pytest

# Regenerate the protobuf/gRPC modules from src/thrust/_proto/apache/rocketmq/v2/*.proto.
proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

clean:
	rm -rf $(VENV) build src/*.egg-info
