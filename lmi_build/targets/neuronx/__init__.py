"""The ``neuronx`` target: NEFFs for the LMI Neuron containers (planning; the compile step is
not built yet, so ``build`` refuses with a one-line error)."""

from lmi_build.targets.neuronx.plan import NEURONX as TARGET

__all__ = ["TARGET"]
