"""The structure a maintainer relies on: targets are objects in one registry (no module reached by a
string), every knob has one declaration that makes the CLI flags, the request and the matrix schema,
and the repository refers to nothing outside itself."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import subprocess
import typing
from pathlib import Path
from typing import Any

import pytest
import typer.main

import lmi_build
from lmi_build.core.target_names import TARGET_NAMES
from lmi_build.options.spec import all_option_specs
from lmi_build.planning.options import CommonOptions
from lmi_build.planning.plan import TargetKnobs
from lmi_build.planning.request import PlanRequest, TargetRequest
from lmi_build.targets import TARGETS, PlanKnobs, get_target
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
SOURCES = sorted((REPO / "lmi_build").rglob("*.py"))
# A module path in a string ("lmi_build.x.y" or "lmi_build.x:f") is an edge nobody can follow.
MODULE_STRING = re.compile(r"""["']lmi_build(\.[a-z_]+)+(:[a-z_]+)?["']""")
# Where importing by name is legitimate: vendor modules on the build host (the Neuron driver picks a
# transformers_neuronx sampling class from a table) and typer's private copy of click.
IMPORT_BY_NAME_ALLOWED = {"lmi_build/targets/neuronx/driver.py", "lmi_build/cli/app.py"}


def test_the_registry_holds_every_target_once_by_its_name() -> None:
    assert tuple(TARGETS) == TARGET_NAMES
    assert all(target.name == name for name, target in TARGETS.items())
    assert get_target("hf") is TARGETS["hf"]
    knobs = typing.get_args(typing.get_args(PlanKnobs)[0])
    assert knobs == tuple(target.knobs for target in TARGETS.values())
    assert all(target.knobs.model_fields["target"].default == name for name, target in TARGETS.items())


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_is_reached_by_a_string(path: Path) -> None:
    rel = path.relative_to(REPO).as_posix()
    text = path.read_text(encoding="utf-8")
    assert not MODULE_STRING.search(text), f"{rel} names a module in a string: import it"
    if rel not in IMPORT_BY_NAME_ALLOWED:
        assert "import_module" not in text and "__import__" not in text, f"{rel} imports by name"


def test_the_repository_refers_to_nothing_outside_itself() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=False).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    outside = re.compile(r"\.\./shared|shared/docs|shared/seeds|shared/fixtures|lmi-facts")
    offenders = []
    for name in tracked:
        path = REPO / name
        if path.suffix not in (".py", ".md", ".toml", ".txt", ".json", ".cfg", ".sh", "") or not path.is_file():
            continue
        if "SOURCE.txt" in name or name == "tests/test_structure.py":
            continue  # fixture provenance names public repositories, not files beside this one
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{name}: {m.group(0)}" for m in outside.finditer(text)]
    assert offenders == []


def _command_options(command: str) -> dict[str, Any]:
    from lmi_build.cli import app

    found = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {param.name: param for param in found.params}


def test_every_knob_is_declared_once_and_generates_the_flags() -> None:
    """Each knob appears as the same flag on `plan` and on each build command that takes it: PlanRequest's
    on every one (--allow-pickle and --calib-data where the target reads the weights here), a target's own
    on its command only."""
    from lmi_build.planning.request import knob_fields
    from lmi_build.targets import TARGETS, every_knob

    plan = _command_options("plan")
    builds = {name: _command_options(name) for name in TARGET_NAMES}
    common = {field.name for field, _ in knob_fields()}
    for declared, how in every_knob():
        assert declared.name in plan and how.flag in plan[declared.name].opts
        for name, options in builds.items():
            own = TARGETS[name].request_knobs
            takes = (declared.name in {field.name for field, _ in knob_fields(own)}
                     or (declared.name in common and (own.weight_inputs or not how.weight_input)))
            assert (declared.name in options) == takes, (declared.name, name)


def test_a_new_knob_is_one_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a field to a target's request is all it takes: the flag appears on `plan` and on that
    target's build command, the request carries it to the option it sets, and a matrix build accepts it."""
    from lmi_build.cli import plan_flags
    from lmi_build.fleet import matrix
    from lmi_build.planning import request
    from lmi_build.targets import TARGETS, every_knob
    from lmi_build.targets.trtllm.knobs import TrtllmRequest

    @dataclasses.dataclass(frozen=True)
    class WithKnob(TrtllmRequest):
        max_num_tokens: int | None = request.knob(flag="--max-num-tokens", option="option.max_num_tokens",
                                                  panel=request.KNOBS_PANEL, help="Tokens per engine step.")

    monkeypatch.setattr(TARGETS["trtllm"], "request_knobs", WithKnob)
    # What the CLI reads from the option table for the knobs' flags when it starts (cli/flag_help).
    from lmi_build.cli.flag_help import flag_facts

    facts = flag_facts([how.option for _, how in every_knob() if how.option is not None])
    monkeypatch.setattr(plan_flags, "HELP", {key: fact.help for key, fact in facts.items()})

    from lmi_build.cli.app import new_app

    app = new_app()
    for name in ("trtllm", "hf"):
        app.command(name)(plan_flags.with_knobs(lambda **knobs: None, name))
    app.command("plan")(plan_flags.with_knobs(lambda **knobs: None, None))
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    flag = {param.name: param for param in commands["trtllm"].params}["max_num_tokens"]
    assert flag.opts == ["--max-num-tokens"] and "Sets option.max_num_tokens." in (flag.help or "")
    assert "max_num_tokens" in {param.name for param in commands["plan"].params}
    assert "max_num_tokens" not in {param.name for param in commands["hf"].params}
    given = plan_flags.plan_request_from({"max_num_tokens": 8192}, target="trtllm", env={})
    assert given.flag_options()["option.max_num_tokens"] == ("8192", "--max-num-tokens")
    entry = matrix._knobs_model().model_validate({"max_num_tokens": 4096})
    assert entry.max_num_tokens == 4096  # type: ignore[attr-defined]


def test_a_target_build_flag_is_one_declaration(tmp_path: Path) -> None:
    """A field with a ``build_flag`` in a target's run settings is all it takes: its build command gets
    the flag, in the Build panel with its help, and the value reaches the target in ``BuildSettings.run``."""
    from typer.testing import CliRunner

    from lmi_build.building.run_settings import RunSettings, build_flag, narrowed
    from lmi_build.cli.app import new_app
    from lmi_build.cli.build_cmd import build_command
    from lmi_build.cli.plan_flags import with_knobs
    from lmi_build.core.errors import LmiBuildError

    @dataclasses.dataclass(frozen=True)
    class WithFlag(RunSettings):
        shard_size: int | None = build_flag(None, "--shard-size", "Bytes per weight file.", min=1)

    class Target(type(TARGETS["hf"])):  # type: ignore[misc]
        command = dataclasses.replace(TARGETS["hf"].command, settings=WithFlag)

        def preflight(self, saved: Any, settings: Any) -> None:
            raise LmiBuildError(f"preflight saw shard size {narrowed(settings.run, WithFlag).shard_size}")

    app = new_app()
    app.command("hf")(with_knobs(build_command(Target()), "hf"))
    command = typer.main.get_command(app).commands["hf"]  # type: ignore[attr-defined]
    flag = {param.name: param for param in command.params}["shard_size"]
    assert flag.opts == ["--shard-size"] and flag.help == "Bytes per weight file."
    assert getattr(flag, "rich_help_panel", None) == "Build"
    done = CliRunner().invoke(app, ["hf", "--model", "demo:tiny-llama", "--shard-size", "1024",
                                    "--output", str(tmp_path / "out")])
    assert isinstance(done.exception, LmiBuildError) and "shard size 1024" in done.exception.message


# Libraries a module may import inside a function: the heavy ones (DEVELOPERS: only these are lazy).
LAZY_LIBRARIES = ("torch", "transformers", "modelopt", "boto3", "botocore", "s3transfer", "ray", "awscrt")
# Any other import inside a function, by (file, module): each says why where it is.
REVIEWED_FUNCTION_IMPORTS = {
    ("lmi_build/cli/app.py", "lmi_build.cli.help_layout"),  # typer's rich_utils, only for a --help
    ("lmi_build/sources/demo.py", "tokenizers"),  # an optional extra
    ("lmi_build/sources/resolve.py", "lmi_build.sources.hf"),  # huggingface_hub + requests, only for a Hub id
    ("lmi_build/storage/client.py", "lmi_build.storage"),  # the watched client imports botocore
    ("lmi_build/storage/transfer.py", "urllib3.exceptions"),  # botocore's transport
    # The Neuron driver runs standalone where the SDK may be missing (its --probe says so).
    ("lmi_build/targets/neuronx/driver.py", "neuronxcc"),
    ("lmi_build/targets/neuronx/driver.py", "transformers_neuronx"),
    ("lmi_build/targets/neuronx/driver.py", "transformers_neuronx.config"),
    ("lmi_build/targets/neuronx/driver.py", "transformers_neuronx.module"),
    ("lmi_build/targets/neuronx/driver.py", "optimum.neuron"),
}


def test_imports_are_at_the_top_of_the_file() -> None:
    """An import inside a function hides an edge from import-linter (a cycle formed unseen that way,
    issue 33): only the heavy libraries, and the reviewed few above, are imported there."""
    found = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    modules = [inner.module]
                elif isinstance(inner, ast.Import):
                    modules = [alias.name for alias in inner.names]
                else:
                    continue
                found |= {(str(path.relative_to(REPO)), module) for module in modules
                          if module.split(".")[0] not in LAZY_LIBRARIES}
    assert found == REVIEWED_FUNCTION_IMPORTS


# Modules whose models' annotations name types imported only for type checking (TYPE_CHECKING): their
# annotations must stay strings.
STRING_ANNOTATIONS_REVIEWED = {"lmi_build/quantize/calibration.py", "lmi_build/quantize/checkpoint_cache.py",
                               "lmi_build/storage/transfer.py"}


def _model_modules() -> set[str]:
    """The modules that define a pydantic model: a class whose base is BaseModel, Record, FrozenModel or
    another such class (followed across modules by name, to a fixed point)."""
    classes = {path: [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                      if isinstance(node, ast.ClassDef)] for path in SOURCES}
    models = {"BaseModel", "Record", "FrozenModel"}
    while True:
        found = {node.name for nodes in classes.values() for node in nodes
                 if any(isinstance(base, ast.Name) and base.id in models for base in node.bases)}
        if found <= models:
            break
        models |= found
    return {str(path.relative_to(REPO)) for path, nodes in classes.items()
            if any(isinstance(base, ast.Name) and base.id in models for node in nodes for base in node.bases)}


def test_model_and_command_modules_keep_their_annotations_as_objects() -> None:
    """pydantic compiles and evaluates every string annotation when a model class is made, and typer every
    command's: without ``from __future__ import annotations`` in those modules plan ran about 120 M fewer
    instructions (benchmarks/startup.py, issue 33)."""
    cli = {str(path.relative_to(REPO)) for path in SOURCES if path.parent.name == "cli"}
    stringly = {str(path.relative_to(REPO)) for path in SOURCES
                if "from __future__ import annotations" in path.read_text(encoding="utf-8")}
    assert (_model_modules() | cli) & stringly == STRING_ANNOTATIONS_REVIEWED


# Classes whose fields share a name with an LMI key but hold another thing (issue 41): what a vendor's own
# config says, a value computed from the options, or a word both use. A new class with a field named as a key
# must say here what it holds, or declare the key where it belongs (its target's options model, a knob).
NOT_AN_OPTION = {
    "lmi_build.core.types.ModelIdentity": "revision: the model's resolved revision (its identity)",
    "lmi_build.fleet.ci_reports.BuildFacts": "quantize: the method a CI report names",
    "lmi_build.fleet.matrix.PlanKnobs": "made by create_model from the knob declarations, not declared",
    "lmi_build.model.spec.RopeSpec": "rotary_dim: the model's config.json",
    "lmi_build.planning.checkpoint_estimate.CheckpointWork": "dtype: the checkpoint step's tensor dtype",
    "lmi_build.planning.memory.EngineKvBudget": "the vLLM memory rule's inputs, resolved from the options",
    "lmi_build.planning.memory.PagedKvCache": "the paged KV cache estimate's inputs, resolved from the knobs",
    "lmi_build.planning.memory.Workload": "batch_size: the batch the memory estimate sizes",
    "lmi_build.planning.plan.CalibrationPlan": "batch_size: the calibration's batch",
    "lmi_build.planning.plan.MemoryEstimate": "gpu_memory_utilization: the share the estimate used",
    "lmi_build.planning.plan.QuantizationPlan": "the quantization as planned from the options",
    "lmi_build.planning.saved.BuildInputs": "revision: where the saved plan's model is",
    "lmi_build.planning.target_api.TargetPlan": "dtype: the resolved dtype a target's plan returns",
    "lmi_build.quantize.calibration.CalibrationSummary": "batch_size: the calibration's batch",
    "lmi_build.quantize.result.CheckpointResult": "dtype: the written checkpoint's",
    "lmi_build.quantize.trtllm_stream._CachedTensor": "dtype: a tensor's",
    "lmi_build.quantize.trtllm_stream._Job": "dtype: a tensor's",
    "lmi_build.recipes.schema.TargetSupport": "quantize: the methods a recipe supports",
    "lmi_build.targets.hf.loaders.LoaderTable": "engine: the engine a loader table is for",
    "lmi_build.targets.hf.profiles.HfProfile": "engine: the profile's engine (vllm, lmi-dist)",
    "lmi_build.targets.hf.profiles.VllmMemory": "gpu_memory_utilization: the release's default, cited",
    "lmi_build.targets.neuronx.batching.ContainerBatching": "rolling_batch: the release's resolved batching",
    "lmi_build.targets.neuronx.plan.NeffShape": "n_positions: the buckets the NEFFs are compiled for",
    "lmi_build.targets.neuronx.startup.StartupInputs": "the start-up model's resolved batch and embedding",
    "lmi_build.targets.trtllm.command.TrtllmRun": "checkpoint: a build's --checkpoint directory",
    "lmi_build.targets.trtllm.engine_match.EngineExpectation": "what an engine's config.json must hold",
    "lmi_build.targets.trtllm.flags.Series": "quantize: the vendor flag series of a method",
    "lmi_build.targets.trtllm.flags.Spelling": "model_dir: a vendor flag's spelling",
    "lmi_build.targets.trtllm.startup.StartupInputs": "engine: the start-up model's resolved engine",
}


def _lmi_classes() -> list[type]:
    """Every class defined in lmi_build (each module imported; ``__main__`` runs the CLI, so not it)."""
    modules = [importlib.import_module(found.name) for found in pkgutil.walk_packages(lmi_build.__path__, "lmi_build.")
               if not found.name.endswith(".__main__")]
    return [value for module in modules for value in vars(module).values()
            if isinstance(value, type) and value.__module__ == module.__name__]


def test_an_lmi_key_is_typed_once() -> None:
    """Each LMI key is one field of one options model (``CommonOptions`` or one target's, which inherits it),
    at most one flag (a ``PlanRequest``/``TargetRequest`` field) and the plan's knobs of a target's build
    (``TargetKnobs``); any other class with a field named as a key says above what it holds instead."""
    keys = {spec.key.removeprefix("option.") for spec in all_option_specs()}
    declared: dict[str, dict[str, list[str]]] = {"options": {}, "flag": {}}
    unexplained, explained = [], set()
    for kind in _lmi_classes():
        own = set(inspect.get_annotations(kind)) & keys
        name = f"{kind.__module__}.{kind.__qualname__}"
        if not own:
            continue
        if issubclass(kind, CommonOptions):
            group = "options"
        elif issubclass(kind, (PlanRequest, TargetRequest)):
            group = "flag"
        elif issubclass(kind, TargetKnobs):
            continue  # one per target's build, in the vendor's words
        elif name in NOT_AN_OPTION:
            explained.add(name)
            continue
        else:
            unexplained.append(f"{name}: {sorted(own)}")
            continue
        for key in own:
            declared[group].setdefault(key, []).append(name)
    assert unexplained == []
    assert sorted(set(NOT_AN_OPTION) - explained) == []  # no entry outlives its class's field
    twice = {group: {key: names for key, names in by_key.items() if len(names) > 1}
             for group, by_key in declared.items()}
    assert twice == {"options": {}, "flag": {}}
