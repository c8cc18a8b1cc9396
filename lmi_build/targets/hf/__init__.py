"""The ``hf`` target: a Hugging Face checkpoint (converted or quantized when the plan says so)."""

from lmi_build.targets.hf.target import TARGET

__all__ = ["TARGET"]
