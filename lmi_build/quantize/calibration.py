"""Calibration batches and the forward loop ModelOpt calls (imports torch/transformers lazily).

The samples are exactly the ones the plan describes: the same text (checked against the plan's
digest), the same seed-driven selection and order, the same truncation. Calibration runs in the
model's own dtype and on its devices (``placement.choose_placement``: the target dtype on GPUs,
float32 on CPU, cast to the target dtype before export so norms and config are the target's).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmi_build.core.errors import StepError
from lmi_build.core.types import FrozenModel
from lmi_build.planning import calibration_text
from lmi_build.planning.plan import CalibrationPlan
from lmi_build.reporting import output

if TYPE_CHECKING:
    import torch


class CalibrationSummary(FrozenModel):
    dataset: str
    dataset_digest: str
    samples: int
    tokens: int  # real (unpadded) tokens fed through the model
    max_seq_len: int
    batch_size: int
    seed: int
    seconds: float = 0.0


class CalibrationBatches:
    """Tokenised, padded batches in a fixed order; ``forward_loop`` feeds them to a model."""

    def __init__(self, plan: CalibrationPlan, batches: list[dict[str, torch.Tensor]], tokens: int) -> None:
        self.plan = plan
        self.batches = batches
        self.tokens = tokens
        self.seconds = 0.0
        self.passes = 0

    def summary(self) -> CalibrationSummary:
        return CalibrationSummary(
            dataset=self.plan.dataset,
            dataset_digest=self.plan.dataset_digest,
            samples=sum(int(b["input_ids"].shape[0]) for b in self.batches),
            tokens=self.tokens,
            max_seq_len=self.plan.max_seq_len,
            batch_size=self.plan.batch_size,
            seed=self.plan.seed,
            seconds=round(self.seconds, 3),
        )

    def forward_loop(self, model: Any) -> None:
        """Run every batch through ``model`` without gradients, with a progress bar that advances
        per decoder layer: one batch of a 7B model under AWQ's search takes minutes, and a bar
        that moves only per batch would look stuck. ModelOpt calls this once per calibration pass
        (AWQ: twice), so each pass is numbered."""
        import torch

        device = next(model.parameters()).device
        layers = decoder_layers(model)
        self.passes += 1
        started = time.perf_counter()
        label = "calibrating" if self.passes == 1 else f"calibrating, pass {self.passes}"
        with output.current().progress(unit="layers" if layers else "batches") as progress, torch.inference_mode():
            per_batch = max(len(layers), 1)
            total = len(self.batches) * per_batch
            task = progress.add_task(label, total=total) if progress else None
            done = [0]

            def layer_done(*_: Any) -> None:
                done[0] += 1
                if progress is not None and task is not None:
                    progress.update(task, completed=min(done[0], total))

            hooks = [layer.register_forward_hook(layer_done) for layer in layers]
            try:
                for number, batch in enumerate(self.batches, start=1):
                    if progress is not None and task is not None:
                        progress.update(task, description=f"{label}: batch {number}/{len(self.batches)}")
                    model(**{k: v.to(device) for k, v in batch.items()})
                    done[0] = number * per_batch  # a layer run more or fewer times still ends the batch here
                    if progress is not None and task is not None:
                        progress.update(task, completed=done[0])
            finally:
                for hook in hooks:
                    hook.remove()
        self.seconds += time.perf_counter() - started


def decoder_layers(model: Any) -> list[Any]:
    """The model's decoder layers: its longest ``ModuleList`` (``model.layers``, GPT-2's ``h``)."""
    import torch

    longest: list[Any] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > len(longest):
            longest = list(module)
    return longest


def load_samples(plan: CalibrationPlan, calib_file: Path | None) -> list[str]:
    """The plan's samples, in the plan's order; refuses text that changed since planning."""
    if plan.dataset.startswith("builtin:"):
        text = calibration_text.load_builtin(plan.dataset.removeprefix("builtin:"))
    else:
        expected = plan.dataset.removeprefix("file:")
        if calib_file is None:
            raise StepError(
                f"the plan calibrates with the file {expected}, but no calibration file was given",
                hint=f"pass --calib-data {expected} again",
            )
        text = calibration_text.load_file(calib_file)
    if text.digest != plan.dataset_digest:
        raise StepError(
            f"calibration text {text.dataset} changed since the plan was made "
            f"({text.digest[:19]}... != {plan.dataset_digest[:19]}...)",
            hint="re-run the plan with the current file, or restore the file the plan was made with",
        )
    return calibration_text.select(text.samples, plan.size, plan.seed)


def build_batches(plan: CalibrationPlan, tokenizer: Any, calib_file: Path | None) -> CalibrationBatches:
    """Tokenise the plan's samples (truncated to ``max_seq_len``) into right-padded batches."""
    samples = load_samples(plan, calib_file)
    if tokenizer.pad_token is None:
        # Padding is masked out of attention; any id works, eos is always present.
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
    tokenizer.padding_side = "right"
    batches: list[dict[str, torch.Tensor]] = []
    tokens = 0
    for start in range(0, len(samples), plan.batch_size):
        chunk = samples[start:start + plan.batch_size]
        encoded = tokenizer(chunk, return_tensors="pt", padding=len(chunk) > 1, truncation=True,
                            max_length=plan.max_seq_len)
        batch = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
        tokens += int(batch["attention_mask"].sum())
        batches.append(batch)
    return CalibrationBatches(plan, batches, tokens)


def load_tokenizer(model_dir: Path, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)
    except Exception as exc:  # transformers on files it did not write: no vocabulary is an AttributeError
        raise StepError(
            f"calibration needs the model's tokenizer, which cannot be loaded from {model_dir.name}: "
            f"{type(exc).__name__}: {str(exc)[:200]}",
            hint="make sure the model directory holds its tokenizer files (tokenizer.json or tokenizer.model)",
        ) from exc
