#!/bin/sh
# Written by lmi-build (script runner). Runs the TensorRT-LLM engine build steps.
# profile lmi-0.26.0-trtllm-0.7.1
set -eu
# pipefail where the shell has it, so a failing tool fails the script despite tee
(set -o pipefail) 2>/dev/null && set -o pipefail
: "${MODEL_DIR:=/models/llama}"
: "${CHECKPOINT_DIR:=/work/ckpt}"
: "${ENGINE_DIR:=/work/engine}"
: "${TRTLLM_EXAMPLES:=/src/TensorRT-LLM/examples}"
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

# step: checkpoint (container)
mkdir -p "${CHECKPOINT_DIR}"
docker run \
    --rm \
    --gpus all \
    --ipc=host \
    --ulimit memlock=-1 \
    --user "$(id -u):$(id -g)" \
    -v "${MODEL_DIR}:/work/model:ro" \
    -v "${CHECKPOINT_DIR}:/work/checkpoint" \
    -v "${TRTLLM_EXAMPLES}:/work/trtllm-examples:ro" 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.26.0-tensorrtllm0.7.1-cu122 python3 /work/trtllm-examples/llama/hf_llama_convert.py \
    -i /work/model \
    -o /work/checkpoint \
    -sq 0.8 \
    --tensor-parallelism 1 \
    --storage-type fp16 2>&1 | tee "$LOG_DIR/checkpoint.log"

# step: engine (container)
mkdir -p "${ENGINE_DIR}"
docker run \
    --rm \
    --gpus all \
    --ipc=host \
    --ulimit memlock=-1 \
    --user "$(id -u):$(id -g)" \
    -v "${MODEL_DIR}:/work/model:ro" \
    -v "${CHECKPOINT_DIR}:/work/checkpoint:ro" \
    -v "${ENGINE_DIR}:/work/engine" \
    -v "${TRTLLM_EXAMPLES}:/work/trtllm-examples:ro" 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.26.0-tensorrtllm0.7.1-cu122 python3 /work/trtllm-examples/llama/build.py \
    --bin_model_dir /work/checkpoint/1-gpu \
    --use_smooth_quant \
    --per_token \
    --per_channel \
    --dtype float16 \
    --output_dir /work/engine \
    --world_size 1 \
    --tp_size 1 \
    --pp_size 1 \
    --max_batch_size 32 \
    --max_input_len 1024 \
    --max_output_len 512 \
    --max_beam_width 1 \
    --use_gpt_attention_plugin float16 \
    --use_gemm_plugin float16 \
    --use_inflight_batching \
    --paged_kv_cache \
    --remove_input_padding \
    --enable_context_fmha \
    --tokens_per_block 64 \
    --rotary_base 10000.0 2>&1 | tee "$LOG_DIR/engine.log"
