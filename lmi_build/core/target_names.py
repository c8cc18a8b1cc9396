"""The names of lmi-build's targets: the one place they are spelled (a new target adds its name here and
its package to ``lmi_build.targets.TARGETS``). No imports, so the command line can read it at start-up."""

from __future__ import annotations

from typing import Literal, get_args

TargetName = Literal["trtllm", "neuronx", "hf"]
TARGET_NAMES: tuple[TargetName, ...] = get_args(TargetName)
