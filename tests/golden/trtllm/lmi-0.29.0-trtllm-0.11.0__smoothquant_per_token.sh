#!/bin/sh
# Written by lmi-build (script runner). Runs the TensorRT-LLM engine build steps.
# profile lmi-0.29.0-trtllm-0.11.0
set -eu
: "${MODEL_DIR:=/models/llama}"
: "${CHECKPOINT_DIR:=/work/ckpt}"
: "${ENGINE_DIR:=/work/engine}"
: "${TRTLLM_EXAMPLES:=/src/TensorRT-LLM/examples}"
# RUNNER=docker runs each step in the image above; RUNNER=local runs the tools on PATH
# (e.g. inside that container, or on a host with the same toolchain installed)
: "${RUNNER:=docker}"
: "${LOG_DIR:=build-logs}"
# docker bind mounts need absolute paths; a relative one would name a volume instead
abspath() { if [ -d "$1" ]; then (cd "$1" && pwd); else printf "%s" "$1"; fi; }
mkdir -p "$ENGINE_DIR"
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
      -v "${TRTLLM_EXAMPLES}:/work/trtllm-examples:ro" 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.29.0-tensorrtllm0.11.0-cu124 python3 /work/trtllm-examples/llama/convert_checkpoint.py \
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
  run_step checkpoint python3 "${TRTLLM_EXAMPLES}/llama/convert_checkpoint.py" \
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
      -v "${ENGINE_DIR}:/work/engine" 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.29.0-tensorrtllm0.11.0-cu124 trtllm-build \
      --checkpoint_dir /work/checkpoint \
      --output_dir /work/engine \
      --workers "${WORKERS}" \
      --max_batch_size 256 \
      --max_input_len 1024 \
      --max_seq_len 1536 \
      --max_beam_width 1 \
      --max_num_tokens 16384 \
      --gemm_plugin float16 \
      --gpt_attention_plugin float16 \
      --context_fmha enable \
      --paged_kv_cache enable \
      --remove_input_padding enable \
      --tokens_per_block 128 \
      --multi_block_mode disable \
      --use_custom_all_reduce disable
else
  run_step engine trtllm-build \
      --checkpoint_dir "${CHECKPOINT_DIR}" \
      --output_dir "${ENGINE_DIR}" \
      --workers "${WORKERS}" \
      --max_batch_size 256 \
      --max_input_len 1024 \
      --max_seq_len 1536 \
      --max_beam_width 1 \
      --max_num_tokens 16384 \
      --gemm_plugin float16 \
      --gpt_attention_plugin float16 \
      --context_fmha enable \
      --paged_kv_cache enable \
      --remove_input_padding enable \
      --tokens_per_block 128 \
      --multi_block_mode disable \
      --use_custom_all_reduce disable
fi
