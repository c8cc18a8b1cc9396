# lmi-build developer targets. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: install demo test unit lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch first, pinned to the CPU wheel, so nothing later pulls the CUDA build.
install: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[convert,dev]'

# The main job on the built-in default: a tiny demo model that lmi-build generates itself.
demo:
	$(BIN)/lmi-build demo --output $(OUT)/demo

test: lint unit

unit:
	$(BIN)/python -m pytest -q

lint:
	$(BIN)/ruff check lmi_build tests benchmarks
	$(BIN)/mypy

bench:
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache
