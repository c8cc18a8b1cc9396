#!/bin/sh
# Written by lmi-build (script runner). Runs the Neuron NEFF compile (transformers-neuronx).
# profile lmi-0.27.0-neuronx-sdk2.18.0
# Usage: ./build-neffs.sh [--check]
#   --check: only check this host: each requirement ok or missing, with its fix (exit 1: one is missing).
#   Every run starts with the same check and stops before any step when something is missing.
set -eu
# the bundle is the directory this script lies in, wherever it is run from: a relative default
# below is a path in it (a relative path set by the caller stays relative to the current directory)
case "$0" in */*) BUNDLE_DIR=${0%/*} ;; *) BUNDLE_DIR=. ;; esac
BUNDLE_DIR=$(CDPATH="" cd -- "$BUNDLE_DIR" && pwd)
[ -n "${DRIVER_DIR:-}" ] || DRIVER_DIR="$BUNDLE_DIR"/driver
[ -n "${MODEL_DIR:-}" ] || MODEL_DIR="$BUNDLE_DIR"/model
[ -n "${COMPILED_DIR:-}" ] || COMPILED_DIR="$BUNDLE_DIR"/compiled
[ -n "${NEURON_CACHE_DIR:-}" ] || NEURON_CACHE_DIR="$BUNDLE_DIR"/neuron-cache
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
  echo "build-neffs.sh: checking this host (RUNNER=${RUNNER:-local})"
  if [ "$RUNNER" = docker ]; then
    check 'docker installed' 'install Docker Engine (https://docs.docker.com/engine/install/), or run with RUNNER=local inside the image' on_path docker
    check 'the docker daemon reachable (docker info)' 'start the daemon (sudo systemctl start docker) and give your user access (sudo usermod -aG docker $USER, then log in again)' docker_daemon
    check 'a docker login for 763104351884.dkr.ecr.us-west-2.amazonaws.com (or the image pulled already)' 'aws ecr get-login-password --region us-west-2 | docker login --username AWS --password-stdin 763104351884.dkr.ecr.us-west-2.amazonaws.com' registry_login 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.27.0-neuronx-sdk2.18.1 763104351884.dkr.ecr.us-west-2.amazonaws.com
  else
    check 'python3 on PATH' 'run inside 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.27.0-neuronx-sdk2.18.1 (RUNNER=docker does), or use a host whose python3 has Neuron SDK 2.18.1 (transformers-neuronx)' on_path python3
  fi
  check 'the driver directory DRIVER_DIR' 'the compile driver travels in the bundle'"'"'s driver/: copy the whole bundle directory, or set DRIVER_DIR to it' dir_has "$DRIVER_DIR"
  check 'the model directory MODEL_DIR' 'the model travels in the bundle'"'"'s model/: copy the whole bundle directory, or set MODEL_DIR to it' dir_has "$MODEL_DIR"
  check 'the Neuron devices the compile loads onto (NEURON_DOCKER_DEVICES, default --device=/dev/neuron0)' 'run on an inf2/trn1 host with the Neuron driver; set NEURON_DOCKER_DEVICES to its --device=/dev/neuronN arguments (one per device the compile uses)' devices_present ${NEURON_DOCKER_DEVICES:---device=/dev/neuron0}
  return "$check_failed"
}
case "${1:-}" in
  --check) check_host; exit $? ;;
  "") check_host || { echo "this host lacks what is marked missing above: fix it, then run ./build-neffs.sh --check" >&2; exit 1; } ;;
  *) echo "usage: ./build-neffs.sh [--check]" >&2; exit 2 ;;
esac
# docker bind mounts need absolute paths; a relative one would name a volume instead: every
# directory a step writes exists before it is made absolute, and a relative path that does not
# exist is made absolute against the current directory
abspath() { if [ -d "$1" ]; then (cd "$1" && pwd); else case "$1" in ""|/*) printf "%s" "$1" ;; *) printf "%s/%s" "$(pwd)" "$1" ;; esac; fi; }
mkdir -p "$COMPILED_DIR"
mkdir -p "$NEURON_CACHE_DIR"
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
      -v "${NEURON_CACHE_DIR}:/work/neuron-cache" 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.27.0-neuronx-sdk2.18.1 python3 /work/driver/lmi_neuronx_compile.py \
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
