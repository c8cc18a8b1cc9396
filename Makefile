# lmi-build developer targets. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: install demo test unit test-fast lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch first, pinned to the CPU wheel, so nothing later pulls the CUDA build.
install: $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[convert,dev,fleet]'

# The main job on the built-in default: a tiny demo model that lmi-build generates itself.
# Plan it (saving the plan), build an hf artifact and verify it, then build the saved TensorRT-LLM
# plan: the checkpoint (real, on CPU) and the engine build written as a script for a GPU host.
DEMO_MODEL ?= demo:tiny-llama
demo:
	mkdir -p $(OUT)
	$(BIN)/lmi-build plan trtllm --model $(DEMO_MODEL) --tp 1 --max-input-len 512 --max-output-len 256 \
		--save $(OUT)/demo-trtllm-plan.json
	$(BIN)/lmi-build hf --model $(DEMO_MODEL) --output $(OUT)/demo-hf --overwrite
	$(BIN)/lmi-build verify $(OUT)/demo-hf
	$(BIN)/lmi-build inspect $(OUT)/demo-hf
	$(BIN)/lmi-build trtllm --plan $(OUT)/demo-trtllm-plan.json --runner script --output $(OUT)/demo-trtllm --overwrite

test: lint unit

# One worker per core; a test file stays on one worker so its module-scoped servers start once.
WORKERS ?= auto
unit:
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile

# The inner loop: everything that neither loads torch/transformers nor needs the S3 server.
test-fast:
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile -m "not slow and not s3"

lint:
	$(BIN)/ruff check lmi_build tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

bench:
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache
