#!/bin/sh
# Written by lmi-build (script runner). Runs the Neuron NEFF compile (transformers-neuronx).
# profile lmi-0.27.0-neuronx-sdk2.18.0
set -eu
: "${DRIVER_DIR:=driver}"
: "${MODEL_DIR:=model}"
: "${COMPILED_DIR:=compiled}"
: "${NEURON_CACHE_DIR:=neuron-cache}"
# RUNNER=docker runs each step in the image above; RUNNER=local runs the tools on PATH
# (e.g. inside that container, or on a host with the same toolchain installed)
: "${RUNNER:=docker}"
: "${LOG_DIR:=build-logs}"
# docker bind mounts need absolute paths; a relative one would name a volume instead
abspath() { if [ -d "$1" ]; then (cd "$1" && pwd); else printf "%s" "$1"; fi; }
mkdir -p "$COMPILED_DIR"
DRIVER_DIR=$(abspath "$DRIVER_DIR")
MODEL_DIR=$(abspath "$MODEL_DIR")
COMPILED_DIR=$(abspath "$COMPILED_DIR")
NEURON_CACHE_DIR=$(abspath "$NEURON_CACHE_DIR")
if [ -z "${WORKERS:-}" ]; then
  WORKERS=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU " || true)
  [ "$WORKERS" -ge 1 ] 2>/dev/null || WORKERS=1
fi
mkdir -p "$LOG_DIR"
# run_step NAME COMMAND...: stream and log one step; its failure fails the script
# (POSIX sh has no pipefail, so the exit status travels through a file past tee)
run_step() {
  step=$1; shift
  { if "$@" 2>&1; then rc=0; else rc=$?; fi; echo "$rc" > "$LOG_DIR/$step.status"; } | tee "$LOG_DIR/$step.log"
  status=$(cat "$LOG_DIR/$step.status"); rm -f "$LOG_DIR/$step.status"
  if [ "$status" -ne 0 ]; then
    echo "step $step failed (exit $status); log: $LOG_DIR/$step.log" >&2
    exit "$status"
  fi
}

# step: compile (container)
mkdir -p "${COMPILED_DIR}"
mkdir -p "${NEURON_CACHE_DIR}"
if [ "$RUNNER" = docker ]; then
  run_step compile docker run \
      --rm ${NEURON_DOCKER_DEVICES:---device=/dev/neuron0} \
      --ipc=host \
      --ulimit memlock=-1 \
      --user "$(id -u):$(id -g)" \
      -v "${DRIVER_DIR}:/work/driver:ro" \
      -v "${MODEL_DIR}:/work/model:ro" \
      -v "${COMPILED_DIR}:/work/compiled" \
      -v "${NEURON_CACHE_DIR}:/work/neuron-cache" 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.27.0-neuronx-sdk2.18.0 python3 /work/driver/lmi_neuronx_compile.py \
      --kwargs /work/driver/compile.json \
      --model /work/model \
      --output /work/compiled \
      --cache /work/neuron-cache
else
  run_step compile python3 "${DRIVER_DIR}/lmi_neuronx_compile.py" \
      --kwargs "${DRIVER_DIR}/compile.json" \
      --model "${MODEL_DIR}" \
      --output "${COMPILED_DIR}" \
      --cache "${NEURON_CACHE_DIR}"
fi
