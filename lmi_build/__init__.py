"""lmi-build: compile LLMs ahead of time for the LMI (DJL Serving) containers."""

__version__ = "0.1.0"
