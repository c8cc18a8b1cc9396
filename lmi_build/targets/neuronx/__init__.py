"""The ``neuronx`` target: NEFFs for the LMI Neuron containers (planning exactly as DJL computes
it, the compile through the shared runners, the precompiled layouts the containers load)."""

from lmi_build.targets.neuronx.target import TARGET

__all__ = ["TARGET"]
