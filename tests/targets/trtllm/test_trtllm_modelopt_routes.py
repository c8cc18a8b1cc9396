"""Issue 22 (same class as finding 4): a recipe may route its trtllm checkpoint through ModelOpt only
if ModelOpt's TensorRT-LLM export handles its decoder type.

The decoder types the export handles are read here, at test time, from the installed nvidia-modelopt
source (``modelopt/torch/export/tensorrt_llm_utils.py`` ``convert_to_tensorrt_llm_config``: the
``if decoder_type ...`` chain whose last ``else`` raises NotImplementedError "Cannot export
tensorrt_llm checkpoint for model ..."), not from lmi-build's recipes or tables, so the test cannot
share the tool's belief. A form of that chain this parser does not know fails the test instead of
passing it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from lmi_build.recipes.registry import load_recipes


def _modelopt_export_dir() -> Path:
    spec = importlib.util.find_spec("modelopt")  # finds the package without importing it (or torch)
    assert spec is not None and spec.origin is not None, "nvidia-modelopt is not installed"
    return Path(spec.origin).parent / "torch" / "export"


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    found = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == name]
    assert len(found) == 1, f"{name} not found once in the installed modelopt"
    return found[0]


def _strings(node: ast.expr) -> set[str]:
    assert isinstance(node, (ast.List, ast.Tuple, ast.Set)), ast.dump(node)
    values = {element.value for element in node.elts if isinstance(element, ast.Constant)}
    assert len(values) == len(node.elts) and all(isinstance(v, str) for v in values), ast.dump(node)
    return {str(v) for v in values}


def _enc_dec_types(export: Path) -> set[str]:
    """layer_utils.model_type_is_enc_dec: ``return model_type in [...]``."""
    function = _function(ast.parse((export / "layer_utils.py").read_text()), "model_type_is_enc_dec")
    returns = [node for node in ast.walk(function) if isinstance(node, ast.Return)]
    assert len(returns) == 1 and isinstance(returns[0].value, ast.Compare), "model_type_is_enc_dec changed form"
    compare = returns[0].value
    assert isinstance(compare.ops[0], ast.In), ast.dump(compare)
    return _strings(compare.comparators[0])


def _raises_not_implemented(body: list[ast.stmt]) -> bool:
    return any(isinstance(stmt, ast.Raise) and isinstance(stmt.exc, ast.Call)
               and isinstance(stmt.exc.func, ast.Name) and stmt.exc.func.id == "NotImplementedError"
               for stmt in body)


def modelopt_trtllm_decoders() -> set[str]:
    """The decoder types nvidia-modelopt's TensorRT-LLM checkpoint export handles, from its source."""
    export = _modelopt_export_dir()
    function = _function(ast.parse((export / "tensorrt_llm_utils.py").read_text()), "convert_to_tensorrt_llm_config")
    chains = []
    for node in ast.walk(function):
        if not isinstance(node, ast.If):
            continue
        link, tests = node, []
        while True:
            tests.append(link.test)
            if len(link.orelse) == 1 and isinstance(link.orelse[0], ast.If):
                link = link.orelse[0]
                continue
            break
        if _raises_not_implemented(link.orelse):
            chains.append(tests)
    assert len(chains) >= 1, "no decoder_type chain ending in NotImplementedError in convert_to_tensorrt_llm_config"
    tests = max(chains, key=len)  # the whole chain (its inner links are chains too)
    handled: set[str] = set()
    for test in tests:
        if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "decoder_type":
            if isinstance(test.ops[0], ast.In):
                handled |= _strings(test.comparators[0])
            elif isinstance(test.ops[0], ast.Eq) and isinstance(test.comparators[0], ast.Constant):
                handled.add(str(test.comparators[0].value))
            else:
                pytest.fail(f"unknown decoder_type test in modelopt: {ast.unparse(test)}")
        elif isinstance(test, ast.Name) and test.id == "is_enc_dec":
            handled |= _enc_dec_types(export)
        else:
            pytest.fail(f"unknown decoder_type test in modelopt: {ast.unparse(test)}")
    return handled


def _modelopt_routes() -> dict[str, str]:
    """Recipe name -> the ModelOpt decoder type its trtllm route exports with."""
    routes = {}
    for recipe in load_recipes():
        support = recipe.targets.get("trtllm")
        if support is not None and support.modelopt_decoder:
            routes[recipe.name] = support.modelopt_decoder
    return routes


MODELOPT_VERSION = importlib.metadata.version("nvidia-modelopt")


def test_the_parser_reads_the_installed_export() -> None:
    # Guards the parser itself: the types ModelOpt 0.47's chain is known to name (read by hand,
    # tensorrt_llm_utils.py:240-347) are found, and ones it refuses are not.
    handled = modelopt_trtllm_decoders()
    assert {"llama", "gemma", "qwen", "gpt", "mpt", "t5"} <= handled, handled
    assert not {"falcon", "chatglm", "phi3", "gemma2"} & handled, handled


def test_the_export_runs_without_tensorrt_llm_here() -> None:
    # With tensorrt_llm importable, convert_to_tensorrt_llm_config first tries TensorRT-LLM's own
    # MODEL_MAP config (tensorrt_llm_utils.py:193-226) and the chain read above would not be the
    # whole story. lmi-build's host export runs without it.
    assert importlib.util.find_spec("tensorrt_llm") is None


@pytest.mark.parametrize(("recipe", "decoder"), sorted(_modelopt_routes().items()))
def test_every_modelopt_route_is_a_decoder_the_export_handles(recipe: str, decoder: str) -> None:
    handled = modelopt_trtllm_decoders()
    assert decoder in handled, (
        f"recipe {recipe} routes trtllm through ModelOpt with decoder '{decoder}', but nvidia-modelopt "
        f"{MODELOPT_VERSION} convert_to_tensorrt_llm_config handles only {sorted(handled)} "
        "(anything else raises NotImplementedError)")
