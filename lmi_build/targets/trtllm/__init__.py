"""The ``trtllm`` target: TensorRT-LLM engines for the LMI TensorRT-LLM containers (checkpoint on
this host, engines by the profile's TensorRT-LLM through the shared runners)."""

from lmi_build.targets.trtllm.target import TARGET

__all__ = ["TARGET"]
