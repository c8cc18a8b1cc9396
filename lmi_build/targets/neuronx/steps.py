"""From a Neuron plan and profile to the compile step: the driver script, its ``compile.json``
(the plan's TNX kwargs, NeuronConfig and flags string) and the argv every runner binds.

Directories are placeholders (``{driver}``, ``{model}``, ``{compiled}``, ``{cache}``) that each
runner binds to host paths, container mounts, or the variables of ``build-neffs.sh``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from lmi_build.planning.plan import BuildPlan
from lmi_build.runners.bundle import BundleSpec, Requirement
from lmi_build.runners.step import Dir, Paths, Step
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.profiles import NeuronProfile

DRIVER_SOURCE = Path(__file__).resolve().parent / "driver.py"
DRIVER_NAME = "lmi_neuronx_compile.py"
SPEC_NAME = "compile.json"
COMPILE_TIMEOUT_S = 4 * 3600  # the container itself needs about an hour for 70B
DIRS = {
    "driver": Dir(mount="/work/driver", variable="DRIVER_DIR"),
    "model": Dir(mount="/work/model", variable="MODEL_DIR"),
    "compiled": Dir(mount="/work/compiled", variable="COMPILED_DIR"),
    "cache": Dir(mount="/work/neuron-cache", variable="NEURON_CACHE_DIR"),
}


# build-neffs.sh gives the container the host's Neuron devices; override with NEURON_DOCKER_DEVICES
# (e.g. "--device=/dev/neuron0 --device=/dev/neuron1") for more than one device.
SCRIPT_DEVICES = ("${NEURON_DOCKER_DEVICES:---device=/dev/neuron0}",)


def host_neuron_devices(dev: Path = Path("/dev")) -> tuple[str, ...]:
    """docker arguments for every Neuron device of this host (TNX loads the NEFFs onto them)."""
    return tuple(f"--device={path}" for path in sorted(dev.glob("neuron[0-9]*")))


def neuronx_paths(*, driver: Path, model: Path | None, compiled: Path, cache: Path) -> Paths:
    return Paths(DIRS, driver=driver, model=model, compiled=compiled, cache=cache)


def compile_spec(plan: BuildPlan, profile: NeuronProfile) -> dict[str, Any]:
    """What the driver reads: exactly the plan's values, nothing re-derived."""
    build = _build(plan)
    return {"profile": profile.name, "neuronx_cc": profile.neuronx_cc, "neuron_sdk": profile.neuron_sdk,
            "loader": build.loader, "layout": build.layout, "compiler_flags": build.compiler_flags,
            "tnx_kwargs": build.tnx_kwargs, "neuron_config": build.neuron_config,
            **({"optimum_kwargs": build.optimum_kwargs} if build.loader == "optimum" else {}),
            **({"split_class": build.split_class} if build.split_class else {})}


def write_driver(directory: Path, plan: BuildPlan, profile: NeuronProfile) -> None:
    """The driver script and its compile.json, self-contained (no lmi-build needed where it runs)."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DRIVER_SOURCE, directory / DRIVER_NAME)
    (directory / SPEC_NAME).write_text(json.dumps(compile_spec(plan, profile), indent=2, sort_keys=True) + "\n",
                                       encoding="utf-8")


def compile_step(python: str, *, timeout_s: int | None = None) -> Step:
    """The one step: the driver compiles with the Neuron SDK of ``python`` (the container's python3
    for docker and scripts, this host's Neuron python for local)."""
    return Step(name="compile",
                argv=[python, f"{{driver}}/{DRIVER_NAME}", "--kwargs", f"{{driver}}/{SPEC_NAME}",
                      "--model", "{model}", "--output", "{compiled}", "--cache", "{cache}"],
                where="container", inputs=["driver", "model"], outputs=["compiled", "cache"],
                timeout_s=timeout_s or COMPILE_TIMEOUT_S)


BUNDLE_SCRIPT = "build-neffs.sh"


def neff_bundle(image: str | None, *, header: str = "", profile: NeuronProfile | None = None) -> BundleSpec:
    """build-neffs.sh as the shared bundle writer's data: the Neuron devices the compile uses."""
    sdk = f"Neuron SDK {profile.neuron_sdk}" if profile is not None else "the profile's Neuron SDK"
    bundled = "travels in the bundle's {0}/: copy the whole bundle directory, or set {1} to it"
    return BundleSpec(
        script=BUNDLE_SCRIPT, purpose="Neuron NEFF compile (transformers-neuronx)", final="compiled", image=image,
        devices=SCRIPT_DEVICES, header=header,
        dir_fixes={"driver": "the compile driver " + bundled.format("driver", "DRIVER_DIR"),
                   "model": "the model " + bundled.format("model", "MODEL_DIR")},
        tool_fix=(f"run inside {image} (RUNNER=docker does), or " if image else "")
                 + f"use a host whose python3 has {sdk} (transformers-neuronx)",
        requirements=(Requirement(
            what="the Neuron devices the compile loads onto (NEURON_DOCKER_DEVICES, default --device=/dev/neuron0)",
            test=f"devices_present {SCRIPT_DEVICES[0]}",
            fix="run on an inf2/trn1 host with the Neuron driver; set NEURON_DOCKER_DEVICES to its "
                "--device=/dev/neuronN arguments (one per device the compile uses)"),))


def _build(plan: BuildPlan) -> NeuronxBuild:
    return plan.knobs(NeuronxBuild)
