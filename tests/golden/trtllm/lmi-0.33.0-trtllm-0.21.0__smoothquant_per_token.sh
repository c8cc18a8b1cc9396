#!/bin/sh
# Written by lmi-build (script runner). Runs the TensorRT-LLM engine build steps.
# profile lmi-0.33.0-trtllm-0.21.0
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
    -v "${TRTLLM_EXAMPLES}:/work/trtllm-examples:ro" 763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.33.0-tensorrtllm0.21.0-cu128 python3 /work/trtllm-examples/llama/convert_checkpoint.py \
    --model_dir /work/model \
    --output_dir /work/checkpoint \
    --dtype float16 \
    --tp_size 1 \
    --pp_size 1 \
    --workers "${WORKERS}" \
    --smoothquant 0.8 \
    --per_token \
    --per_channel 2>&1 | tee "$LOG_DIR/checkpoint.log"

# step: engine (container)
mkdir -p "${ENGINE_DIR}"
docker run \
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
    --max_seq_len 1536 \
    --max_beam_width 1 \
    --gemm_plugin float16 \
    --gpt_attention_plugin float16 \
    --tokens_per_block 32 2>&1 | tee "$LOG_DIR/engine.log"
