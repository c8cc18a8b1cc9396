"""Execute DJL Serving's Neuron handler (issue 31 item 1) on the artifacts lmi-build builds, and record
what each release does at start-up: tests/vendor/djl/neuron_handler.json.

    .venv/bin/python tests/vendor/djl/execute_neuron_handler.py /path/to/djl-serving.git > tests/vendor/djl/neuron_handler.json

The corpus is ``execute_properties.corpus`` for the Neuron releases (every fixture config.json x option
set, planned with the release's profile). Each entry lmi-build plans is BUILT here, with the Neuron SDK
stand-in (tests/standins/neuron-python: the layout's real tree - config.json with the neuron block,
compiled/ with NEFF-named placeholders, VERSION, presharded safetensors or checkpoint/ - but placeholder
graphs), with ``lmi-build neuronx`` as a user runs it. Each release branch is then executed in a fresh
interpreter (``--execute``, the branch's engines/python/setup from ``git archive`` first on sys.path):
``TransformersNeuronXService().set_configs(properties)``, ``set_model_loader()``, ``load_model()`` - the
handler's own ``initialize`` less the tokenizer (``set_tokenizer``: not read by the loaders) and the
rolling-batch scheduler built after loading - on the artifact directory as ``model_dir``, with the
artifact's serving.properties as the Java front-end passes them (``execute_properties.java_fills``).

Real: djl_python (properties manager, handler, ``neuron_utils/model_loader.py``: loader choice, the
NeuronConfig and from_pretrained kwargs it builds, the directory checks that choose between loading
compiled/ and compiling), transformers' AutoConfig and GenerationConfig on the artifact's config.json,
os.path/os.listdir on the built tree. Recorders (every attribute a recorder, every call recorded with
its arguments): torch, transformers_neuronx, tensorrt_llm, vllm, lmi_dist, optimum, neuronx_distributed,
neuronxcc, PIL, diffusers; the model adapter classes DJL wraps the loaded model in (``ADAPTERS``: their
base classes are recorders). Real torch (CPU) and transformers are imported. 0.30's smart defaults run
``neuron-ls`` through a shell; it is absent here (it sets nothing the written properties do not).

Recorded per entry: the loader class, the calls into transformers_neuronx (``from_pretrained`` with the
directory relative to the artifact and its kwargs, ``NeuronConfig`` with its kwargs, ``load`` of the
compiled directory, ``to_neuron``), and ``compiled``: the directory ``load`` was given, or None (then
``to_neuron`` compiles); or the exception text. What is NOT executed: transformers-neuronx itself, so
whether the NEFFs in compiled/ are found by their HLO hash is not observed here - it follows from the
kwargs and NeuronConfig being the ones the NEFFs were compiled with, which the comparison test checks
(tests/targets/test_djl_neuron_handler.py).

Nothing here copies DJL code into the repository: the facts are.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.vendor.djl.execute_properties import BRANCHES, RECORDED, _message, corpus, java_fills

HANDLED = ("transformers_neuronx", "tensorrt_llm", "vllm", "lmi_dist", "optimum", "neuronx_distributed",
           "neuronxcc", "PIL", "diffusers")  # PIL, diffusers: the stable-diffusion handler the module imports
# branch -> (profile, the rolling batch the image's recommender picks: "" where lmi-build writes it): the
# Neuron branches of execute_properties from 0.27 (0.27 to 0.30, 0.32/0.33/0.34-dlc). 0.26's handler is
# not executed: lmi-build builds no 0.26 artifact (every corpus plan is neuron_unbuilt: its split layout
# is not built), so there is nothing for it to load; its properties are executed (verdicts.json).
NEURON_BRANCHES: dict[str, tuple[str, str]] = {key: (value[0], value[4]) for key, value in BRANCHES.items()
                                               if value[1] == "neuronx" and key != "0.26.0-dlc"}
STANDIN = Path(__file__).resolve().parents[2] / "standins" / "neuron-python"
ADAPTERS = ("NeuronXModelAdapter", "NeuronXRollingBatchModelAdapter", "NeuronXDynamicBatchModelAdapter")
ROOT: list[str] = [""]  # the artifact directory of the entry being executed (paths are recorded relative to it)


class Recorder:
    """Any attribute is a recorder; any call is recorded with its arguments and answered by a recorder
    that shows the call (``NeuronConfig(continuous_batching=ContinuousBatchingConfig(...))``)."""

    calls: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, name: str, shown: str | None = None) -> None:
        self._name = name
        self._shown = shown or name

    def __getattr__(self, attribute: str) -> Recorder:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return Recorder(f"{self._name}.{attribute}")

    def __call__(self, *args: Any, **kwargs: Any) -> Recorder:
        shown_args = [_shown(a) for a in args]
        shown_kwargs = {key: _shown(value) for key, value in sorted(kwargs.items())}
        Recorder.calls.append({"call": self._name.split(".")[-1] if "()" in self._name else self._name,
                               "args": shown_args, "kwargs": shown_kwargs})
        text = ", ".join([*map(str, shown_args), *(f"{k}={v}" for k, v in shown_kwargs.items())])
        return Recorder(f"{self._name}()", f"{self._name.split('.')[-1]}({text})")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (_Base,)

    def __repr__(self) -> str:
        return self._shown


class _Base:
    """The base class of a class DJL derives from a recorded one (the model adapters)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Recorder.calls.append({"call": f"{type(self).__name__}.__init__", "args": [], "kwargs": {}})


def _shown(value: Any) -> Any:
    if isinstance(value, str) and ROOT[0] and value.startswith(ROOT[0]):
        return "<artifact>" + value[len(ROOT[0]):]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_shown(item) for item in value]
    if hasattr(value, "value") and isinstance(value.value, (str, int)):
        return value.value
    return repr(value) if isinstance(value, Recorder) else type(value).__name__


def install_recorders() -> None:
    import importlib.abc
    import importlib.machinery

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if name.split(".")[0] in HANDLED:
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec: Any) -> Any:
            module = types.ModuleType(spec.name)
            module.__path__ = []  # type: ignore[attr-defined]
            module.__all__ = []  # type: ignore[attr-defined]  # ``from optimum... import *`` imports nothing
            module.__getattr__ = lambda attribute: Recorder(f"{spec.name}.{attribute}")  # type: ignore[method-assign]
            if spec.name == "vllm":  # vllm_rolling_batch (0.32+) lists SamplingParams' fields at import
                module.SamplingParams = type("SamplingParams", (), {"__struct_fields__": ()})  # type: ignore[attr-defined]
            if spec.name == "neuronxcc":
                module.__version__ = "recorded"  # type: ignore[attr-defined]
            return module

        def exec_module(self, module: Any) -> None:
            return None

    sys.meta_path.insert(0, Finder())


def execute(setup: Path, rolling_batch: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sys.path.insert(0, str(setup))
    install_recorders()
    import importlib
    import logging

    logging.disable(logging.CRITICAL)
    import transformers.generation

    if not hasattr(transformers.generation, "LogitsWarper"):  # gone from this transformers; only subclassed
        transformers.generation.LogitsWarper = type("LogitsWarper", (), {})  # by the scheduler, unused here
    handler = importlib.import_module("djl_python.transformers_neuronx")
    loaders = importlib.import_module("djl_python.neuron_utils.model_loader")
    for adapter in ADAPTERS:  # the wrappers around the loaded model: their bases are recorders
        if hasattr(loaders, adapter):
            setattr(loaders, adapter, Recorder(adapter))
    results = []
    for entry in entries:
        ROOT[0] = entry["dir"]
        given = java_fills(entry["properties"], rolling_batch)
        given["model_dir"] = entry["dir"]
        Recorder.calls = []
        service = handler.TransformersNeuronXService()
        record: dict[str, Any] = {}
        cwd = os.getcwd()
        try:
            service.set_configs(dict(given))
            config = service.config
            record["resolved"] = {key: _shown(getattr(config, key, None)) for key in
                                  ("rolling_batch", "rolling_batch_strategy", "model_loader", "batch_size",
                                   "max_rolling_batch_size", "n_positions", "context_length_estimate")}
            deferred = config.rolling_batch == "vllm" and config.model_loader == "vllm"
            record["loader"] = "vllm (deferred to vLLM)" if deferred else service._model_loader_class.__name__
            service.set_model_loader()
            if hasattr(service, "load_model"):
                service.load_model()
            else:  # 0.26/0.27: initialize calls the loader itself (transformers_neuronx.py@0.27.0-dlc:123-127)
                service.model = service.model_loader.load_model()
            record["outcome"] = "loaded"
        except Exception as error:  # the release's own refusal is the fact recorded
            record["outcome"] = "raised"
            record["error"] = _message(error)
        finally:
            os.chdir(cwd)
        loader = service.model_loader
        record["compiled"] = _shown(getattr(loader, "compiled_graph_path", None)) if loader is not None else None
        record.update(_summary(Recorder.calls))
        results.append({"model": entry["model"], "fields": entry["fields"], "handler": record})
    return results


def _summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The transformers_neuronx calls, compact: NeuronConfig's kwargs, the from_pretrained (the class,
    the directory, the kwargs but the NeuronConfig, recorded above), the directory ``load`` was given
    (the NEFF lookup) and whether ``to_neuron`` ran."""
    found: dict[str, Any] = {"neuron_config": None, "from_pretrained": None, "load": None, "to_neuron": False}
    for call in calls:
        name = call["call"]
        if name == "transformers_neuronx.config.NeuronConfig":
            found["neuron_config"] = call["kwargs"]
        elif name.startswith("transformers_neuronx") and name.endswith(".from_pretrained"):
            kwargs = {key: value for key, value in call["kwargs"].items() if key != "neuron_config"}
            found["from_pretrained"] = {"class": name.removeprefix("transformers_neuronx.").removesuffix(
                ".from_pretrained"), "path": call["args"][0] if call["args"] else None, "kwargs": kwargs}
        elif name == "load":
            found["load"] = call["args"][0] if call["args"] else None
        elif name == "to_neuron":
            found["to_neuron"] = True
    return found


# ------------------------------------------------------------------ lmi-build's side: build each entry
def build(entry: dict[str, Any], profile: str, work: Path) -> Path | None:
    """The artifact ``lmi-build neuronx`` builds for the entry, with the Neuron SDK stand-in; None when
    lmi-build refuses to build it (its plan has errors)."""
    from tests.paths import FIXTURES_DIR

    source = work / "source"
    if not source.exists():
        source.mkdir()
    model = source / entry["model"]
    if not model.exists():
        _write_model(model, FIXTURES_DIR / "hf-configs" / entry["model"] / "config.json")
    out = work / f"artifact-{len(list(work.glob('artifact-*')))}"
    command = [str(Path(sys.executable).with_name("lmi-build")), "neuronx", "--model", str(model), "--tp", "2",
               "--profile", profile, "--output", str(out), "--quiet"]
    fields = entry["fields"]
    if "max_batch_size" in fields:
        command += ["--max-batch-size", str(fields["max_batch_size"])]
    if "pp" in fields:
        command += ["--pp", str(fields["pp"])]
    for option in fields.get("option", []):
        command += ["-o", option]
    from lmi_build.targets.neuronx.profiles import get_profile

    pinned = get_profile(profile)  # the stand-in reports the release's own SDK versions, as its image has them
    env = {**os.environ, "LMI_BUILD_NEURON_PYTHON": str(STANDIN), "STANDIN_MODE": "ok",
           "STANDIN_NEURONX_CC": pinned.neuronx_cc, "STANDIN_OPTIMUM_NEURON": pinned.optimum_neuron}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    return out if done.returncode == 0 else None


def _write_model(directory: Path, config: Path) -> None:
    """The fixture's config.json, tokenizer files and one small valid safetensors file (as
    tests/fixtures_neuronx.write_neuron_model, without importing pytest)."""
    import shutil
    import struct

    directory.mkdir(parents=True)
    shutil.copyfile(config, directory / "config.json")
    (directory / "tokenizer.json").write_text("{}")
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizerFast"}))
    header = json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("repo", nargs="?")
    parser.add_argument("--execute", nargs=2, metavar=("SETUP_DIR", "ROLLING_BATCH"))
    parser.add_argument("--branch", action="append", help="record only these branches (default: all Neuron ones)")
    args = parser.parse_args()
    if args.execute:
        setup, rolling_batch = args.execute
        json.dump(execute(Path(setup), rolling_batch, json.load(sys.stdin)), sys.stdout)
        return
    from lmi_build.options.properties import read_properties

    facts: dict[str, Any] = {"source": "deepjavalibrary/djl-serving",
                             "extracted_by": "tests/vendor/djl/execute_neuron_handler.py",
                             "recorders": list(HANDLED), "branches": []}
    assert set(RECORDED) - {"torch"} <= set(HANDLED)
    for branch, (profile, rolling_batch) in NEURON_BRANCHES.items():
        if args.branch and branch not in args.branch:
            continue
        commit = subprocess.run(["git", f"--git-dir={args.repo}", "rev-parse", branch], capture_output=True,
                                text=True, check=True).stdout.strip()
        entries = corpus("neuronx", profile)
        with tempfile.TemporaryDirectory() as work:
            built = []
            for entry in entries:
                out = build(entry, profile, Path(work))
                entry["built"] = out is not None
                if out is not None:
                    entry["layout"] = json.loads((out / "lmi-build.json").read_text())["layout"]
                    built.append({**entry, "dir": str(out), "properties": read_properties(out / "serving.properties")})
            archive = subprocess.run(["git", f"--git-dir={args.repo}", "archive", branch, "engines/python/setup"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", work], input=archive, check=True)
            done = subprocess.run([sys.executable, __file__, "--execute", f"{work}/engines/python/setup",
                                   rolling_batch], input=json.dumps(built), capture_output=True, text=True,
                                  check=True, cwd=work)
        handled = {(r["model"], json.dumps(r["fields"], sort_keys=True)): r["handler"] for r in json.loads(done.stdout)}
        for entry in entries:
            del entry["properties"]  # in verdicts.json already; the test compares the plan's again
            found = handled.get((entry["model"], json.dumps(entry["fields"], sort_keys=True)))
            if found is not None:
                entry["handler"] = found
        facts["branches"].append({"branch": branch, "commit": commit, "profile": profile,
                                  "executed": "djl_python.transformers_neuronx.TransformersNeuronXService"
                                              " set_configs, set_model_loader, load_model",
                                  "entries": entries})
    json.dump(facts, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
