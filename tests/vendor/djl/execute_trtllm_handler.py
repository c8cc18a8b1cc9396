"""Execute DJL Serving's TensorRT-LLM start-up (issue 31) on the artifacts lmi-build builds, and record
what each release does with them: tests/vendor/djl/trtllm_handler.json. The releases: 0.26.0-dlc to
0.35.1-dlc and the v0.36.0 tag, each with its lmi-build profile (0.31, 0.32, 0.34, 0.35.0, 0.35.1 and v0.36.0
were recorded with ``--only <those> --merge tests/vendor/djl/trtllm_handler.json``: the other branches'
records kept, the new artifacts detected by every branch's front-end). 0.26.0-dlc's Python is written for pydantic 1
(``execute_properties.PYDANTIC_1``): its handler runs with the interpreter of a pydantic<2 virtualenv
outside the repository (pydantic and numpy only; recorded with pydantic 1.10.27), the others with this one:

    python3 -m venv /tmp/venv-pyd1 && /tmp/venv-pyd1/bin/pip install 'pydantic<2' numpy
    .venv/bin/python tests/vendor/djl/execute_trtllm_handler.py /path/to/djl-serving.git \\
        --gson ~/.m2/repository/com/google/code/gson/gson/2.11.0/gson-2.11.0.jar \\
        --pydantic1-python /tmp/venv-pyd1/bin/python > tests/vendor/djl/trtllm_handler.json

The corpus is ``execute_properties.corpus("trtllm", profile)`` (every fixture config.json x option set);
each entry lmi-build plans valid is BUILT here as tests/targets/trtllm/test_trtllm_startup.py builds
one: the real plan, its engine step run with the trtllm-build stand-in (tests/standins/trtllm-build:
the layout's real engine directory - config.json, one rank<i>.engine per rank - with placeholder
engines) on a checkpoint of the plan's dtype, mapping and quantization, and the real packager. A
profile of the legacy workflow (TensorRT-LLM 0.7.x: 0.26.0-dlc's) runs every step the plan has,
examples/llama/build.py and its converters being the example-script stand-in
(tests/standins/trtllm-example-script, in a tree of ``fixtures_trtllm.standin_examples``), as
tests/targets/trtllm/test_trtllm_routes.py builds one. Each
release branch's start-up is then executed on the artifact directory, in two parts, in the order the
container runs them:

1. The front-end's decision to load the artifact or build one (``convertTrtLLM``; ``convertIfNeed`` at
   0.26.0-dlc, LmiUtils.java:107-134: a repository that ``LmiUtils.isValidTrtLlmModelRepo`` accepts is
   served, else ``trt_llm_partition.py`` builds another):
   that method's own Java, cut from the branch's LmiUtils.java at run time (nothing is copied into the
   repository), compiled with javac into a class that gives it a logger that prints nothing and
   ``JsonUtils.GSON`` a plain Gson (the jar: ``--gson``), and run on the artifact directory.
2. The Python handler's ``initialize`` with the artifact's serving.properties as the Java front-end
   passes them (``execute_properties.java_fills`` with the branch's rules, and ``option.mpi_mode=true`` for
   ``engine=MPI``, ModelInfo.java@0.26.0-dlc:747-748, @0.27.0-dlc:830-831, @0.28.0-dlc:881-882,
   @0.29.0-dlc/@0.30.0-dlc:899-900) and the artifact directory as ``model_dir``: 0.26.0-dlc-0.30.0-dlc's
   ``TRTLLMService`` (tensorrt_llm.py@0.30.0-dlc:38-45, @0.26.0-dlc:30-35: TensorRtLlmProperties,
   TRTLLMRollingBatch, which refuses a start without MPI and hands the directory and the properties to
   ``tensorrt_llm_toolkit.init_inference``, trtllm_rolling_batch.py@0.26.0-dlc:27-31),
   0.31/0.32/0.34's the same ``TRTLLMService``, 0.33.0-dlc-v0.36.0's ``TensorRTLlmAsyncService`` (the entry
   point lmi-build's flat layout names, and DJL's own recommendation at 0.35+, PyModel.java:187;
   trtllm_async_service.py:92-104: TensorRtLlmProperties, then ``LLM(model_dir, **get_llm_kwargs())``).
   Recorders (every attribute a recorder, every call recorded with its arguments): tensorrt_llm,
   tensorrt_llm_toolkit (a closed wheel from publish.djl.ai: whether IT rebuilds is not observed),
   torch, vllm, lmi_dist, transformers_neuronx, optimum, neuronx_distributed, and openai (imported by
   0.33's service for a type annotation only). One attribute is answered with a value, not a
   recorder: ``LLM(...).args.num_postprocess_workers`` is 0 (TensorRT-LLM's default; the service
   compares it with 0 after LLM() is built).

Recorded per entry built: the artifact's serving.properties, ``detected`` (what the release's
isValidTrtLlmModelRepo returned on it), ``detected_by`` (every other release's: on an artifact of
the other layout lmi-build says it rebuilds), the handler's ``outcome``
(``initialized`` or ``raised`` with the exception), and the call that loads the engine: its class, the
directory (relative to the artifact) and its keyword arguments.

Nothing here copies DJL code into the repository: the facts are.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.vendor.djl.execute_properties import PYDANTIC_1, _message, corpus, java_fills

RECORDED = ("torch", "tensorrt_llm", "tensorrt_llm_toolkit", "vllm", "lmi_dist", "transformers_neuronx", "optimum",
            "neuronx_distributed", "openai", "PIL")
# branch -> (profile, the handler module, its service class)
BRANCHES: dict[str, tuple[str, str, str]] = {
    "0.26.0-dlc": ("lmi-0.26.0-trtllm-0.7.1", "djl_python.tensorrt_llm", "TRTLLMService"),
    "0.27.0-dlc": ("lmi-0.27.0-trtllm-0.8.0", "djl_python.tensorrt_llm", "TRTLLMService"),
    "0.28.0-dlc": ("lmi-0.28.0-trtllm-0.9.0", "djl_python.tensorrt_llm", "TRTLLMService"),
    "0.29.0-dlc": ("lmi-0.29.0-trtllm-0.11.0", "djl_python.tensorrt_llm", "TRTLLMService"),
    "0.30.0-dlc": ("lmi-0.30.0-trtllm-0.12.0", "djl_python.tensorrt_llm", "TRTLLMService"),
    "0.31.0-dlc": ("lmi-0.31.0-trtllm-0.12.0", "djl_python.tensorrt_llm", "TRTLLMService"),
    "0.32.0-dlc": ("lmi-0.32.0-trtllm-0.12.0", "djl_python.tensorrt_llm", "TRTLLMService"),
    "0.33.0-dlc": ("lmi-0.33.0-trtllm-0.21.0", "djl_python.lmi_trtllm.trtllm_async_service", "TensorRTLlmAsyncService"),
    "0.34.0-dlc": ("lmi-0.34.0-trtllm-0.12.0", "djl_python.tensorrt_llm", "TRTLLMService"),
    "0.35.0-dlc": ("lmi-0.35.0-trtllm-1.0.0", "djl_python.lmi_trtllm.trtllm_async_service", "TensorRTLlmAsyncService"),
    "0.35.1-dlc": ("lmi-0.35.1-trtllm-1.0.0", "djl_python.lmi_trtllm.trtllm_async_service", "TensorRTLlmAsyncService"),
    "v0.36.0": ("lmi-0.36.0-trtllm-1.0.0", "djl_python.lmi_trtllm.trtllm_async_service", "TensorRTLlmAsyncService"),
}
LOADS = ("tensorrt_llm_toolkit.init_inference", "tensorrt_llm.llmapi.LLM")
ANSWERED = {"num_postprocess_workers": 0}
ROOT: list[str] = [""]  # the artifact directory of the entry being executed (paths are recorded relative to it)


class Recorder:
    """Any attribute is a recorder (but ``ANSWERED``), any call is recorded with its arguments."""

    calls: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return ANSWERED.get(attribute, Recorder(f"{self._name}.{attribute}"))

    def __call__(self, *args: Any, **kwargs: Any) -> Recorder:
        Recorder.calls.append({"call": self._name, "args": [_shown(a) for a in args],
                               "kwargs": {key: _shown(value) for key, value in sorted(kwargs.items())}})
        return Recorder(f"{self._name}()")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __repr__(self) -> str:
        return f"<{self._name}>"


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
            if name.split(".")[0] in RECORDED:
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec: Any) -> Any:
            module = types.ModuleType(spec.name)
            module.__path__ = []
            module.__getattr__ = lambda attribute: Recorder(f"{spec.name}.{attribute}")  # type: ignore[method-assign]
            return module

        def exec_module(self, module: Any) -> None:
            return None

    sys.meta_path.insert(0, Finder())


# ------------------------------------------------------------------ the release's side
def execute(setup: Path, module: str, service_class: str, entries: list[dict[str, Any]],
            release: str) -> list[dict[str, Any]]:
    sys.path.insert(0, str(setup))
    install_recorders()
    import importlib
    import logging

    logging.disable(logging.CRITICAL)
    service_type = getattr(importlib.import_module(module), service_class)
    results = []
    for entry in entries:
        ROOT[0] = entry["dir"]
        given = java_fills(entry["properties"], "trtllm", release)
        if entry["properties"].get("engine") == "MPI":
            given["mpi_mode"] = "true"
        given["model_dir"] = entry["dir"]
        Recorder.calls = []
        record: dict[str, Any] = {}
        try:
            service_type().initialize(dict(given))
            record["outcome"] = "initialized"
        except Exception as error:  # the release's own refusal is the fact recorded
            record["outcome"] = "raised"
            record["error"] = _message(error)
        loads = [call for call in Recorder.calls if call["call"] in LOADS]
        record["loads"] = ({"call": loads[0]["call"], "path": (loads[0]["args"] or [None])[0],
                            "kwargs": {k: v for k, v in loads[0]["kwargs"].items() if not k.startswith("_")}}
                           if loads else None)
        results.append({"model": entry["model"], "fields": entry["fields"], "handler": record})
    return results


def detection_program(lmi_utils: str, work: Path, gson: str) -> list[str]:
    """``isValidTrtLlmModelRepo`` of the branch's LmiUtils.java in a class of its own, compiled: the
    command that runs it on directories (it prints true or false for each)."""
    start = re.search(r"static boolean isValidTrtLlmModelRepo\(Path modelPath\) throws IOException \{", lmi_utils)
    assert start is not None, "no isValidTrtLlmModelRepo in this LmiUtils.java"
    depth, end = 0, start.end() - 1
    for end in range(start.end() - 1, len(lmi_utils)):
        depth += {"{": 1, "}": -1}.get(lmi_utils[end], 0)
        if depth == 0:
            break
    method = lmi_utils[start.start():end + 1]
    source = "\n".join([
        "import java.io.IOException;", "import java.nio.file.*;", "import java.util.concurrent.atomic.AtomicBoolean;",
        "import java.util.stream.Stream;", "import com.google.gson.Gson;", "import com.google.gson.JsonObject;",
        "public final class Detection {",
        "  static final class Quiet { void info(String format, Object... args) {} }",
        "  static final class JsonUtils { static final Gson GSON = new Gson(); }",
        "  static final Quiet logger = new Quiet();",
        "  " + method,
        "  public static void main(String[] dirs) throws IOException {",
        "    for (String dir : dirs) { System.out.println(isValidTrtLlmModelRepo(Paths.get(dir))); }",
        "  }",
        "}"])
    (work / "Detection.java").write_text(source)
    subprocess.run(["javac", "-cp", gson, "-d", str(work), str(work / "Detection.java")], check=True)
    return ["java", "-cp", f"{work}{os.pathsep}{gson}", "Detection"]


# ------------------------------------------------------------------ lmi-build's side: build each entry
def build(entry: dict[str, Any], profile_name: str, work: Path) -> Path | None:
    """The artifact of the entry's plan (as test_trtllm_startup._artifact makes one): None when
    lmi-build refuses the plan."""
    from lmi_build.artifact.manifest import BuildRecord
    from lmi_build.artifact.packager import package
    from lmi_build.planner.make import plan_request
    from lmi_build.runners import LocalRunner, run_steps
    from lmi_build.targets import TARGETS, get_target, request_for
    from lmi_build.targets.trtllm.knobs import TrtllmBuild
    from lmi_build.targets.trtllm.layouts import layout_for
    from lmi_build.targets.trtllm.profiles import get_profile
    from lmi_build.targets.trtllm.startup import engine_config
    from lmi_build.targets.trtllm.steps import plan_steps, trtllm_paths
    from tests.fixtures_trtllm import standin_examples, write_model_dir
    from tests.paths import FIXTURES_DIR

    fields: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value
                              for key, value in entry["fields"].items()}
    request = request_for("trtllm", {"model": str(FIXTURES_DIR / "hf-configs" / entry["model"]),
                                     "profile": profile_name, "tp": "2", **fields}, env={})
    plan = plan_request(request, get_target("trtllm")).plan
    if not plan.valid:
        return None
    profile = get_profile(profile_name)
    here = work / f"entry-{len(list(work.glob('entry-*')))}"
    model, engine, checkpoint = write_model_dir(here / "model"), here / "engine", here / "ckpt"
    steps = plan_steps(plan, profile).steps
    if profile.workflow == "legacy":
        # 0.7.x: every step, examples/llama/build.py (and its converters) the example-script stand-in
        examples = standin_examples(here / "examples", profile.tensorrt_llm)
        paths = trtllm_paths(model=model, checkpoint=checkpoint, engine=engine, examples=examples)
    else:
        # the checkpoint the plan's conversion writes, as the engine reads it: dtype, mapping, quantization
        checkpoint.mkdir(parents=True)
        assert isinstance(plan.build, TrtllmBuild)
        pretrained = engine_config(plan.build, plan.quantization)["pretrained_config"]
        (checkpoint / "config.json").write_text(json.dumps(pretrained))
        for rank in range(pretrained["mapping"]["world_size"]):
            (checkpoint / f"rank{rank}.safetensors").write_bytes(b"{}")
        paths, steps = trtllm_paths(model=model, checkpoint=checkpoint, engine=engine), steps[-1:]
    run_steps(steps, LocalRunner(gpus=1), here / "work", paths, plan)
    return package(plan, target=TARGETS["trtllm"], layout=layout_for(profile.layout), produced=engine,
                   source_dir=model, output_dir=here / "artifact", record=BuildRecord())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("repo", nargs="?")
    parser.add_argument("--gson", help="a gson jar, for the front-end's detection (its JSON reading at 0.33)")
    parser.add_argument("--pydantic1-python", help="the interpreter of a pydantic<2 venv, for PYDANTIC_1 branches")
    parser.add_argument("--execute", nargs=4, metavar=("SETUP_DIR", "MODULE", "CLASS", "BRANCH"))
    parser.add_argument("--only", nargs="+", choices=tuple(BRANCHES), metavar="BRANCH",
                        help="record only these branches (their artifacts detected by every branch's front-end) and "
                             "keep the other branches' records of --merge FILE")
    parser.add_argument("--merge", help="the recorded trtllm_handler.json whose other branches --only keeps")
    args = parser.parse_args()
    if args.execute:
        setup, module, service_class, branch = args.execute
        json.dump(execute(Path(setup), module, service_class, json.load(sys.stdin), branch), sys.stdout)
        return
    recorded = tuple(args.only or BRANCHES)
    if not args.repo or not args.gson:
        parser.error("give the djl-serving repository and --gson")
    if not args.pydantic1_python and set(recorded) & set(PYDANTIC_1):
        parser.error("give --pydantic1-python for " + ", ".join(sorted(set(recorded) & set(PYDANTIC_1))))
    if args.only and not args.merge:
        parser.error("--only needs --merge (the recorded file whose other branches it keeps)")
    from lmi_build.options.properties import read_properties
    from lmi_build.reporting.output import Mode, set_mode
    from lmi_build.targets.trtllm.profiles import get_profile
    from tests.paths import STANDINS_DIR

    set_mode(Mode.QUIET)
    facts: dict[str, Any] = {"source": "deepjavalibrary/djl-serving",
                             "extracted_by": "tests/vendor/djl/execute_trtllm_handler.py",
                             "recorders": list(RECORDED), "branches": []}
    git = ["git", f"--git-dir={args.repo}"]
    with tempfile.TemporaryDirectory() as work_dir:
        built: dict[str, list[dict[str, Any]]] = {}
        for branch in recorded:
            profile, module, service_class = BRANCHES[branch]
            work = Path(work_dir) / branch
            work.mkdir()
            os.environ.update(PATH=f"{STANDINS_DIR}{os.pathsep}{os.environ['PATH']}", STANDIN_MODE="ok",
                              STANDIN_TRTLLM_VERSION=get_profile(profile).tensorrt_llm)
            entries = corpus("trtllm", profile)
            built[branch] = []
            for entry in entries:
                out = build(entry, profile, work)
                entry["built"] = out is not None
                del entry["properties"]  # the plan's; the artifact's, which the handler is given, replace them
                if out is not None:
                    entry["properties"] = read_properties(out / "serving.properties")
                    built[branch].append({**entry, "dir": str(out)})
            archive = subprocess.run([*git, "archive", branch, "engines/python/setup"], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", work], input=archive, check=True)
            python = args.pydantic1_python if branch in PYDANTIC_1 else sys.executable
            done = subprocess.run([python, __file__, "--execute", f"{work}/engines/python/setup", module,
                                   service_class, branch], input=json.dumps(built[branch]), capture_output=True,
                                  text=True)
            if done.returncode != 0:
                sys.exit(f"{branch}: the handler's execution failed:\n{done.stderr}")
            handled = {(r["model"], json.dumps(r["fields"], sort_keys=True)): r["handler"]
                       for r in json.loads(done.stdout)}
            for entry in entries:
                found = handled.get((entry["model"], json.dumps(entry["fields"], sort_keys=True)))
                if found is not None:
                    entry["handler"] = found
            commit = subprocess.run([*git, "rev-parse", f"{branch}^{{commit}}"], capture_output=True, text=True,
                                    check=True).stdout.strip()
            facts["branches"].append({"branch": branch, "commit": commit, "profile": profile,
                                      "executed": f"LmiUtils.isValidTrtLlmModelRepo; {module}.{service_class}"
                                                  ".initialize", "entries": entries})
        # every release's detection on every artifact: its own layout, and the other release's
        every = [entry["dir"] for entries in built.values() for entry in entries]
        detected: dict[str, dict[str, bool]] = {}
        for branch in BRANCHES:
            lmi_utils = subprocess.run([*git, "show", f"{branch}:wlm/src/main/java/ai/djl/serving/wlm/LmiUtils.java"],
                                       capture_output=True, text=True, check=True).stdout
            java = Path(work_dir) / f"java-{branch}"
            java.mkdir()
            said = subprocess.run([*detection_program(lmi_utils, java, args.gson), *every], capture_output=True,
                                  text=True, check=True).stdout.split()
            detected[branch] = {directory: value == "true" for directory, value in zip(every, said, strict=True)}
    for record in facts["branches"]:
        directories = {(e["model"], json.dumps(e["fields"], sort_keys=True)): e["dir"] for e in built[record["branch"]]}
        for entry in record["entries"]:
            if "handler" in entry:
                directory = directories[(entry["model"], json.dumps(entry["fields"], sort_keys=True))]
                entry["handler"] = {"detected": detected[record["branch"]][directory],
                                    "detected_by": {other: found[directory] for other, found in detected.items()
                                                    if other != record["branch"]},
                                    **entry["handler"]}
    if args.merge:
        kept = {b["branch"]: b for b in json.loads(Path(args.merge).read_text())["branches"]}
        kept.update({b["branch"]: b for b in facts["branches"]})
        facts["branches"] = [kept[branch] for branch in BRANCHES if branch in kept]
    json.dump(facts, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
