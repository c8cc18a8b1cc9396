# lmi-build developer targets. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: install demo test unit test-fast lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch first, so that nothing later picks another build of it. TORCH=cpu: the CPU wheel from
# PyTorch's CPU index (a .venv of about 1.9 GB); TORCH=cuda: PyPI's default wheel, which on Linux
# x86-64 is the CUDA build with its NVIDIA libraries (several GB more). Default: cuda when this host
# has nvidia-smi, cpu otherwise. When the CPU index cannot be reached (a host that only sees a
# package registry), TORCH=cpu falls back to the registry's torch==$(TORCH_VERSION) and says so.
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
ifeq ($(origin TORCH),undefined)
TORCH := $(if $(shell command -v nvidia-smi 2>/dev/null),cuda,cpu)
endif

install: $(BIN)/python
	@case "$(TORCH)" in \
	  cpu) echo "installing torch==$(TORCH_VERSION), CPU wheel, from $(TORCH_CPU_INDEX) (TORCH=cuda for the CUDA build)"; \
	       $(BIN)/pip install -q --retries 1 --timeout 30 torch==$(TORCH_VERSION) --index-url $(TORCH_CPU_INDEX) || { \
	         echo "make install: $(TORCH_CPU_INDEX) could not be used; installing torch==$(TORCH_VERSION) from the package registry instead (its default wheel)" >&2; \
	         $(BIN)/pip install -q torch==$(TORCH_VERSION); } ;; \
	  cuda) echo "installing torch==$(TORCH_VERSION), the package registry's default (CUDA) wheel (TORCH=cpu for the CPU wheel)"; \
	       $(BIN)/pip install -q torch==$(TORCH_VERSION) ;; \
	  *) echo "make install: TORCH=$(TORCH): use TORCH=cpu or TORCH=cuda" >&2; exit 2 ;; \
	esac
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

# One worker per core. worksteal hands each worker a contiguous share of the tests (so a file's
# module fixtures mostly start once) and lets an idle worker take over the rest of a busy one's share.
WORKERS ?= auto
unit:
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist worksteal --durations=30

# The inner loop: everything that neither loads torch/transformers nor needs the S3 server. Two
# workers per core: these tests mostly wait, on the lmi-build processes they start and on the
# timeouts they provoke, and two per core kept the cores busy (111 s against 94 s on 2 cores).
FAST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(2 * (os.cpu_count() or 1))')
test-fast:
	$(BIN)/python -m pytest -q -n $(FAST_WORKERS) --dist worksteal -m "not slow and not s3"

lint:
	$(BIN)/ruff check lmi_build tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

bench:
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache
