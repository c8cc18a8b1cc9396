"""Benchmark: wall time and peak host RAM of checkpoint conversion and each quantization, on CPU.

Builds a random-weight Llama of about 1.1 GB (fp16 safetensors; hidden 2048, 10 layers, GQA 16/4,
vocab 32000) once, then runs every case in its own subprocess through the real path
(``plan_request`` for the build, ``plan_quantization`` for the method, then the target's checkpoint step), so each peak RSS belongs to one case alone
(``os.wait4`` returns that child's ``ru_maxrss``). A ``baseline`` child that only imports what a case
imports (torch, transformers, ModelOpt, lmi-build's step) gives the interpreter's own peak, so the
table reports both the raw peak and the peak above that baseline, each against the model's size on
disk. One JSON line per case goes to ``<out>/results.jsonl`` (for ``lmi_build/data/quantize_rates.toml``).

Calibration is kept small on purpose (``--calib-size 8 --calib-max-seq-len 128`` by default, vs the
planner's 32-64 samples of up to 512 tokens), so that a run fits on a small CPU host. Calibration time
grows linearly with samples x tokens; RAM does not.

    python benchmarks/quantize.py --out /tmp/lmi-bench
    python benchmarks/quantize.py --out /tmp/lmi-bench --cases fp16,awq --calib-size 32
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# name -> (method, dtype, tp, target)
CASES: dict[str, tuple[str | None, str, int, str]] = {
    "fp16": (None, "float16", 1, "trtllm"),  # llama: streamed tensor by tensor (quantize/trtllm_stream.py)
    "fp16-tp2": (None, "float16", 2, "trtllm"),
    # The peer: the same checkpoint through ModelOpt's exporter with the model loaded.
    "fp16-modelopt": (None, "float16", 1, "trtllm"),
    "fp16-tp2-modelopt": (None, "float16", 2, "trtllm"),
    "int8_wo": ("int8_wo", "float16", 1, "trtllm"),
    "int4_wo": ("int4_wo", "float16", 1, "trtllm"),
    "smoothquant": ("smoothquant", "bfloat16", 1, "trtllm"),
    "smoothquant-fp16": ("smoothquant", "float16", 1, "trtllm"),
    "fp8": ("fp8", "bfloat16", 1, "trtllm"),
    "awq": ("awq", "bfloat16", 1, "trtllm"),
    # The hf target: an unquantized dtype conversion (streamed) and its quantized checkpoints.
    "hf-bf16": (None, "bfloat16", 1, "hf"),
    "hf-bf16-tp2": (None, "bfloat16", 2, "hf"),
    "hf-fp8": ("fp8", "float16", 1, "hf"),
    "hf-awq": ("awq", "float16", 1, "hf"),
    # GPTQ only here: the trtllm target refuses it (TensorRT-LLM converts GPTQ checkpoints, never makes them).
    "hf-gptq": ("gptq", "float16", 1, "hf"),
    # The peer of "awq": a direct ModelOpt script (load, mtq.quantize with INT4_AWQ_CFG on the same
    # samples, export_tensorrt_llm_checkpoint), with none of lmi-build's planning, staging or manifest.
    "awq-direct": ("awq", "bfloat16", 1, "trtllm"),
}
SHAPES = {
    "small": {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 10, "num_attention_heads": 16,
              "num_key_value_heads": 4, "vocab_size": 32000},
    # Llama-2-7B's shape (meta-llama/Llama-2-7b-hf config.json): 6.7 B parameters, 12.6 GiB in fp16.
    "7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 32, "vocab_size": 32000},
}


def make_model(model_dir: Path, shape: str) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmi_build.planning import calibration_text

    torch.manual_seed(0)
    config = LlamaConfig(**SHAPES[shape], max_position_embeddings=4096, bos_token_id=0, eos_token_id=1,
                         tie_word_embeddings=False, torch_dtype="float16")
    # On a GPU the random initialisation of a 7B takes seconds instead of minutes of CPU.
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).half()
    model.save_pretrained(model_dir, safe_serialization=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(calibration_text.load_builtin().samples, trainer)
    tokenizer.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}))


def _existing_model(reference: str) -> Path:
    if reference.startswith("demo:"):
        from lmi_build.sources.demo import ensure_demo_model

        return ensure_demo_model(reference.removeprefix("demo:"), with_weights=True)
    return Path(reference)


def run_case(name: str, model_dir: Path, work_dir: Path, calib_size: int, calib_len: int,
             calib_batch: int) -> dict[str, Any]:
    from lmi_build.planner.make import plan_request
    from lmi_build.planning.quantization import plan_quantization, split_messages
    from lmi_build.planning.request import PlanRequest
    from lmi_build.reporting import output
    from lmi_build.reporting.output import Mode
    from lmi_build.targets import get_target
    from lmi_build.targets.hf.checkpoint import build_hf_checkpoint
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    output.set_mode(Mode.QUIET)
    method, dtype, tp, target = CASES[name]
    lmi_dtype = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    options: tuple[str, ...] = ()
    if calib_size:  # 0: the planner's defaults, as a plain build would calibrate
        options += (f"calib_size={calib_size}", f"awq_calib_size={calib_size}", f"calib_max_seq_len={calib_len}")
    if calib_batch:  # 0: each method's default batch size
        options += (f"calib_batch_size={calib_batch}",)
    target = "hf" if target == "hf" else "trtllm"
    plan = plan_request(PlanRequest(model=str(model_dir), dtype=lmi_dtype, tp=str(tp), option=options),
                        get_target(target)).plan
    if not plan.valid:
        raise SystemExit(f"{name}: invalid plan: {[e.message for e in plan.errors]}")
    # The recipes may not offer every method for llama yet; the step itself is what is measured.
    quantization, messages = plan_quantization(method, resolved_options_of(plan), plan.spec,
                                                 get_target(target).quantization, None)
    errors, _ = split_messages(messages)
    if errors:
        raise SystemExit(f"{name}: {[e.message for e in errors]}")
    plan = plan.model_copy(update={"quantization": quantization})
    if name.endswith("-direct"):
        return run_direct(plan, quantization, model_dir, work_dir / "direct-checkpoint")
    if name.endswith("-modelopt") and plan.build is not None:
        plan = plan.model_copy(update={"build": plan.build.model_copy(update={"checkpoint_writer": "modelopt"})})
    if target == "hf" and plan.build is not None:
        from lmi_build.targets.hf.plan import export_format

        plan = plan.model_copy(update={"build": plan.build.model_copy(
            update={"export_format": export_format(quantization)})})
    step = build_hf_checkpoint if target == "hf" else build_trtllm_checkpoint
    result = step(plan, model_dir, work_dir / f"{target}-checkpoint")
    size = sum((result.out_dir / f).stat().st_size for f in result.files)
    calibration = result.calibration
    return {"quant_algo": result.quant_algo, "out_bytes": size, "step_seconds": result.seconds,
            "calib_tokens": calibration.tokens if calibration else 0,
            "calib_seconds": calibration.seconds if calibration else 0.0,
            "params": plan.spec.num_parameters,
            "writer": result.writer,
            "device": result.placement.describe() if result.placement else "-"}


def run_direct(plan: Any, quantization: Any, model_dir: Path, out_dir: Path) -> dict[str, Any]:
    """The peer: what a user would script with ModelOpt alone, on the plan's samples and knobs."""
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lmi_build.planning import calibration_text

    started = time.perf_counter()
    calibration = quantization.calibration
    model = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.bfloat16, low_cpu_mem_usage=True,
        device_map="auto" if torch.cuda.is_available() else None).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    samples = calibration_text.select(calibration_text.load_builtin().samples, calibration.size, calibration.seed)
    batches = [tokenizer(samples[i:i + calibration.batch_size], return_tensors="pt", padding=True, truncation=True,
                         max_length=calibration.max_seq_len) for i in range(0, len(samples), calibration.batch_size)]
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    device = next(model.parameters()).device
    calib_seconds = [0.0]

    def forward_loop(quantized: Any) -> None:
        begun = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                quantized(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
        calib_seconds[0] += time.perf_counter() - begun

    config = mtq.INT4_AWQ_CFG
    mtq.quantize(model, config, forward_loop=forward_loop)
    export_tensorrt_llm_checkpoint(model, "llama", torch.bfloat16, export_dir=out_dir, inference_tensor_parallel=1)
    size = sum(f.stat().st_size for f in out_dir.iterdir() if f.is_file())
    return {"quant_algo": "W4A16_AWQ", "out_bytes": size, "step_seconds": time.perf_counter() - started,
            "calib_tokens": tokens, "calib_seconds": calib_seconds[0], "params": plan.spec.num_parameters,
            "writer": "modelopt (direct script)", "device": str(device)}


def import_baseline() -> dict[str, Any]:
    """Import what every case imports, and nothing else: the interpreter's own peak RSS."""
    import modelopt.torch.export
    import modelopt.torch.quantization  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import lmi_build.planner.make
    import lmi_build.quantize.export  # noqa: F401

    return {}


def resolved_options_of(plan: Any) -> Any:
    from lmi_build.options.resolve import written_options

    return written_options(plan.options, {k: plan.option_sources.get(k, "cli") for k in plan.options})


def _child(argv: list[str], log_dir: Path) -> tuple[float, int, str]:
    """Run one case; return (wall seconds, this child's peak RSS in bytes, its stdout)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    name = argv[-1].lstrip("-")
    out_path, err_path = log_dir / f"{name}.out", log_dir / f"{name}.err"
    started = time.perf_counter()
    # Files, not pipes: a child that logs a lot would block on a full pipe while we sit in wait4.
    with open(out_path, "w") as out, open(err_path, "w") as err:
        process = subprocess.Popen(argv, stdout=out, stderr=err)
        # wait4 reports this child's own rusage (RUSAGE_CHILDREN would accumulate the maximum).
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{name} failed; see {err_path}:\n{err_path.read_text()[-3000:]}")
    return seconds, usage.ru_maxrss * 1024, out_path.read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/lmi-bench"))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--model", help="demo:NAME or a model directory (default: generate a Llama of --shape)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small",
                        help="the generated model: small (1.1 GB) or 7b (Llama-2-7B's shape, 12.6 GiB)")
    parser.add_argument("--calib-size", type=int, default=8, help="0: the planner's defaults")
    parser.add_argument("--calib-max-seq-len", type=int, default=128)
    parser.add_argument("--calib-batch-size", type=int, default=0, help="0: each method's default")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--make-model", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    model_dir = args.out / "model"
    if args.model is not None:  # an existing model (demo:NAME or a directory) instead of the generated one
        model_dir = _existing_model(args.model)

    if args.make_model:
        make_model(model_dir, args.shape)
        return
    if args.baseline:
        print(json.dumps(import_baseline()))
        return
    if args.child:
        print(json.dumps(run_case(args.child, model_dir, args.out / "work" / args.child,
                                  args.calib_size, args.calib_max_seq_len, args.calib_batch_size)))
        return

    me = [sys.executable, __file__, "--out", str(args.out), "--shape", args.shape,
          *(["--model", args.model] if args.model else []),
          "--calib-size", str(args.calib_size),
          "--calib-max-seq-len", str(args.calib_max_seq_len), "--calib-batch-size", str(args.calib_batch_size)]
    if args.model is None and not any(model_dir.glob("*.safetensors")):
        seconds, _, _ = _child([*me, "--make-model"], args.out / "logs")
        print(f"made {model_dir} in {seconds:.1f}s", file=sys.stderr)
    disk = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    _, baseline, _ = _child([*me, "--baseline"], args.out / "logs")
    shape = SHAPES[args.shape] if args.model is None else args.model
    print(f"model: {disk / 2**30:.2f} GiB fp16 on disk, {shape}; calibration {args.calib_size} samples "
          f"x <= {args.calib_max_seq_len} tokens, batch {args.calib_batch_size or 'default'}; {os.cpu_count()} CPUs; "
          f"import baseline {baseline / 2**30:.2f} GiB peak RSS (python + torch + transformers + ModelOpt)")
    print(f"{'case':18} {'dtype':9} {'tp':>2} {'quant_algo':20} {'wall s':>8} {'calib s':>8} {'peak GiB':>9} "
          f"{'x disk':>7} {'-base GiB':>9} {'x disk':>7} {'out GiB':>8} {'calib tok':>9}")
    results = args.out / "results.jsonl"
    for name in args.cases.split(","):
        _, dtype, tp, _ = CASES[name]
        seconds, rss, out_text = _child([*me, "--child", name], args.out / "logs")
        info = json.loads(out_text.strip().splitlines()[-1])
        above = rss - baseline
        print(f"{name:18} {dtype:9} {tp:>2} {info['quant_algo'] or '-':20} {seconds:8.1f} {info['calib_seconds']:8.1f} "
              f"{rss / 2**30:9.2f} {rss / disk:7.2f} {above / 2**30:9.2f} {above / disk:7.2f} "
              f"{info['out_bytes'] / 2**30:8.2f} {info['calib_tokens']:9}", flush=True)
        record = {"case": name, "dtype": dtype, "tp": tp, "wall_seconds": round(seconds, 2), "peak_rss_bytes": rss,
                  "baseline_rss_bytes": baseline, "disk_bytes": disk, "load_average": os.getloadavg()[0], **info}
        with open(results, "a") as handle:
            handle.write(json.dumps(record) + "\n")

if __name__ == "__main__":
    main()
