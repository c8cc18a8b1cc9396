"""The ``hf`` target: a Hugging Face checkpoint (converted or quantized when the plan says so)."""

from lmi_build.targets.hf.plan import HF as TARGET

__all__ = ["TARGET"]
