#!/bin/sh
# Written by lmi-build (script runner). Runs the TensorRT-LLM engine build steps.
# profile lmi-0.33.0-trtllm-0.21.0
# Usage: ./build-engines.sh [--check]
#   --check: only check this host: each requirement ok or missing, with its fix (exit 1: one is missing).
#   Every run starts with the same check and stops before any step when something is missing.
set -eu
# the bundle is the directory this script lies in, wherever it is run from: a relative default
# below is a path in it (a relative path set by the caller stays relative to the current directory)
case "$0" in */*) BUNDLE_DIR=${0%/*} ;; *) BUNDLE_DIR=. ;; esac
BUNDLE_DIR=$(CDPATH="" cd -- "$BUNDLE_DIR" && pwd)
: "${MODEL_DIR:=/models/llama}"
: "${CHECKPOINT_DIR:=/work/ckpt}"
: "${ENGINE_DIR:=/work/engine}"
: "${TRTLLM_EXAMPLES:=/src/TensorRT-LLM/examples}"
# RUNNER=docker runs each step in the image above; RUNNER=local runs the tools on PATH
# (e.g. inside that container, or on a host with the same toolchain installed)
: "${RUNNER:=docker}"
[ -n "${LOG_DIR:-}" ] || LOG_DIR="$BUNDLE_DIR"/build-logs
# check WHAT FIX TEST...: run TEST, print "ok" or "missing" with the fix
check() {
  what=$1; fix=$2; shift 2; found=""
  if "$@" >/dev/null 2>&1; then
    echo "ok       $what${found:+ ($found)}"
  else
    echo "missing  $what${found:+ ($found)}"
    echo "         fix: $fix"
    check_failed=1
  fi
}
on_path() { command -v "$1"; }
docker_daemon() { docker info; }
nvidia_runtime() { docker info 2>/dev/null | grep -i 'runtimes:' | grep -q nvidia; }
# registry_login IMAGE REGISTRY: the image is here already, or docker keeps a login for its registry
registry_login() {
  if docker image inspect "$1"; then found="image already pulled"; return 0; fi
  grep -qF "$2" "${DOCKER_CONFIG:-${HOME:-}/.docker}/config.json"
}
# dir_has DIR: a directory with something in it
dir_has() { found=$1; [ -d "$1" ] && [ -n "$(ls -A "$1")" ]; }
# gpu_sm WANT: GPU 0's SM is WANT (smNN), at least WANT (>=smNN), or any GPU ("")
gpu_sm() {
  line=$(nvidia-smi --query-gpu=compute_cap,name --format=csv,noheader 2>/dev/null | head -n 1)
  [ -n "$line" ] || return 1
  have="sm$(printf '%s' "${line%%,*}" | tr -d ' .')"
  found="found $have,${line#*,}"
  case "$1" in
    "") [ "$have" != sm ] ;;
    ">="*) [ "${have#sm}" -ge "${1#>=sm}" ] ;;
    *) [ "$have" = "$1" ] ;;
  esac
}
# devices_present ARG...: each docker --device=PATH[:...] argument names a device this host has
devices_present() {
  [ "$#" -ge 1 ] || return 1
  for arg in "$@"; do
    dev=${arg#--device=}; dev=${dev%%:*}
    [ -e "$dev" ] || { found="no $dev"; return 1; }
  done
}
# check_host: every requirement of this host, ok or missing with its fix; false if one is missing
check_host() {
  check_failed=0
  echo "build-engines.sh: checking this host (RUNNER=${RUNNER:-local})"
  if [ "$RUNNER" = docker ]; then
    check 'docker installed' 'install Docker Engine (https://docs.docker.com/engine/install/), or run with RUNNER=local inside the image' on_path docker
    check 'the docker daemon reachable (docker info)' 'start the daemon (sudo systemctl start docker) and give your user access (sudo usermod -aG docker $USER, then log in again)' docker_daemon
    check 'a docker login for 763104351884.dkr.ecr.us-west-2.amazonaws.com (or the image pulled already)' 'aws ecr get-login-password --region us-west-2 | docker login --username AWS --password-stdin 763104351884.dkr.ecr.us-west-2.amazonaws.com' registry_login 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.33.0-tensorrtllm0.21.0-cu128 763104351884.dkr.ecr.us-west-2.amazonaws.com
    check 'the NVIDIA container runtime (docker info lists the nvidia runtime)' 'install the NVIDIA Container Toolkit, then: sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker' nvidia_runtime
  else
    check 'python3 on PATH' 'run inside 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.33.0-tensorrtllm0.21.0-cu128 (RUNNER=docker does), or install TensorRT-LLM 0.21.0rc1 on this host' on_path python3
    check 'trtllm-build on PATH' 'run inside 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.33.0-tensorrtllm0.21.0-cu128 (RUNNER=docker does), or install TensorRT-LLM 0.21.0rc1 on this host' on_path trtllm-build
  fi
  check 'the model directory MODEL_DIR' 'the model travels in the bundle'"'"'s model/: copy the whole bundle directory, or set MODEL_DIR to the model'"'"'s directory' dir_has "$MODEL_DIR"
  check 'the examples directory TRTLLM_EXAMPLES' 'a checkout of TensorRT-LLM 0.21.0rc1 (its tag): clone it to ./TensorRT-LLM beside this script, or set TRTLLM_EXAMPLES to its examples/' dir_has "$TRTLLM_EXAMPLES"
  check 'a GPU (nvidia-smi)' 'run on a host with an NVIDIA GPU and its driver (nvidia-smi lists it)' gpu_sm ''
  return "$check_failed"
}
case "${1:-}" in
  --check) check_host; exit $? ;;
  "") check_host || { echo "this host lacks what is marked missing above: fix it, then run ./build-engines.sh --check" >&2; exit 1; } ;;
  *) echo "usage: ./build-engines.sh [--check]" >&2; exit 2 ;;
esac
# docker bind mounts need absolute paths; a relative one would name a volume instead: every
# directory a step writes exists before it is made absolute, and a relative path that does not
# exist is made absolute against the current directory
abspath() { if [ -d "$1" ]; then (cd "$1" && pwd); else case "$1" in ""|/*) printf "%s" "$1" ;; *) printf "%s/%s" "$(pwd)" "$1" ;; esac; fi; }
mkdir -p "$ENGINE_DIR"
mkdir -p "$CHECKPOINT_DIR"
MODEL_DIR=$(abspath "$MODEL_DIR")
CHECKPOINT_DIR=$(abspath "$CHECKPOINT_DIR")
ENGINE_DIR=$(abspath "$ENGINE_DIR")
TRTLLM_EXAMPLES=$(abspath "$TRTLLM_EXAMPLES")
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

# step: checkpoint (container)
mkdir -p "${CHECKPOINT_DIR}"
if [ "$RUNNER" = docker ]; then
  run_step checkpoint docker run \
      --rm \
      --gpus all \
      --ipc=host \
      --ulimit memlock=-1 \
      --user "$(id -u):$(id -g)" \
      -v "${MODEL_DIR}:/work/model:ro" \
      -v "${CHECKPOINT_DIR}:/work/checkpoint" \
      -v "${TRTLLM_EXAMPLES}:/work/trtllm-examples:ro" 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.33.0-tensorrtllm0.21.0-cu128 python3 /work/trtllm-examples/models/core/llama/convert_checkpoint.py \
      --model_dir /work/model \
      --output_dir /work/checkpoint \
      --dtype float16 \
      --tp_size 1 \
      --pp_size 1 \
      --workers "${WORKERS}" \
      --smoothquant 0.8 \
      --per_token \
      --per_channel
else
  run_step checkpoint python3 "${TRTLLM_EXAMPLES}/models/core/llama/convert_checkpoint.py" \
      --model_dir "${MODEL_DIR}" \
      --output_dir "${CHECKPOINT_DIR}" \
      --dtype float16 \
      --tp_size 1 \
      --pp_size 1 \
      --workers "${WORKERS}" \
      --smoothquant 0.8 \
      --per_token \
      --per_channel
fi

# step: engine (container)
mkdir -p "${ENGINE_DIR}"
if [ "$RUNNER" = docker ]; then
  run_step engine docker run \
      --rm \
      --gpus all \
      --ipc=host \
      --ulimit memlock=-1 \
      --user "$(id -u):$(id -g)" \
      -v "${CHECKPOINT_DIR}:/work/checkpoint:ro" \
      -v "${ENGINE_DIR}:/work/engine" 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.33.0-tensorrtllm0.21.0-cu128 trtllm-build \
      --checkpoint_dir /work/checkpoint \
      --output_dir /work/engine \
      --workers "${WORKERS}" \
      --max_batch_size 32 \
      --max_input_len 1024 \
      --max_seq_len 4096 \
      --max_beam_width 1 \
      --max_num_tokens 8192 \
      --gemm_plugin float16 \
      --gpt_attention_plugin float16 \
      --tokens_per_block 32
else
  run_step engine trtllm-build \
      --checkpoint_dir "${CHECKPOINT_DIR}" \
      --output_dir "${ENGINE_DIR}" \
      --workers "${WORKERS}" \
      --max_batch_size 32 \
      --max_input_len 1024 \
      --max_seq_len 4096 \
      --max_beam_width 1 \
      --max_num_tokens 8192 \
      --gemm_plugin float16 \
      --gpt_attention_plugin float16 \
      --tokens_per_block 32
fi
