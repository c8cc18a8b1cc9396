"""The ModelOpt layout cache is trusted only for what it was just verified to be (issue 32 item 1).

An entry of ``<cache>/layouts`` that parses used to be used as it was: an emptied list, an unknown
dtype or a renumbered rank gave a traceback; a dropped ``lm_head``, a changed ``hidden_act``, fewer
``num_hidden_layers`` or another ``world_size`` (its digest recomputed, as an attacker would) built a
wrong checkpoint or failed every later build; a link was followed; ``--no-cache`` still read it.
Now each poisoned entry is a miss: one warning names it, the layout is computed again and replaces
it, and the checkpoint has exactly the bytes of a ``--no-cache`` build.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_quantize import make_build_plan
from tests.hostile import World, make_world

pytestmark = pytest.mark.slow

SMALL = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4, "vocab_size": 1000}


def _save_model(out_dir: Path) -> Path:
    import torch
    import transformers

    config = transformers.LlamaConfig(**SMALL, architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_()
    model.save_pretrained(out_dir)
    return out_dir


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, bytes], Path]]:
    """The model, its --no-cache checkpoint (tp 2), and a cache holding its valid layout entry."""
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    root = tmp_path_factory.mktemp("layout-cache")
    model = _save_model(root / "model")
    plan = make_build_plan(model, tp=2, writer="stream")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LMI_BUILD_CACHE", str(root / "cache"))
        build_trtllm_checkpoint(plan, model, root / "reference", layout_cache=False)
        assert not (root / "cache" / "layouts").exists(), "--no-cache wrote the layout cache"
        build_trtllm_checkpoint(plan, model, root / "cached", layout_cache=True)
    assert _files(root / "cached") == _files(root / "reference")
    yield model, _files(root / "reference"), root / "cache"


def _redigest(entry: dict[str, Any]) -> None:
    """What someone who edits an entry on purpose does: recompute its digest."""
    canonical = json.dumps(entry["ranks"], sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    entry["digest"] = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _drop_lm_head(entry: dict[str, Any]) -> None:
    for rank in entry["ranks"]:
        rank["tensors"].pop("lm_head.weight")


def _set_config(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(entry: dict[str, Any]) -> None:
        for rank in entry["ranks"]:
            rank["config"][key] = value
    return edit


def _world_size(entry: dict[str, Any]) -> None:
    for rank in entry["ranks"]:
        rank["config"]["mapping"]["world_size"] = 4


def _renumber(entry: dict[str, Any]) -> None:
    entry["ranks"][0]["rank"] = 7


def _evil_dtype(entry: dict[str, Any]) -> None:
    first = next(iter(entry["ranks"][0]["tensors"].values()))
    first["dtype"] = "evil"


def _empty(entry: dict[str, Any]) -> None:
    entry["ranks"] = []


def _rotary(entry: dict[str, Any]) -> None:  # passes the layout's own checks; the checkpoint's fail
    _set_config("rotary_base", 12345.0)(entry)


POISONS = [
    pytest.param(_empty, True, id="empty-list"),
    pytest.param(_evil_dtype, True, id="dtype-evil"),
    pytest.param(_renumber, True, id="renumbered-rank"),
    pytest.param(_drop_lm_head, True, id="no-lm-head-redigested"),
    pytest.param(_set_config("hidden_act", "gelu"), True, id="hidden-act-gelu-redigested"),
    pytest.param(_set_config("num_hidden_layers", 2), True, id="two-of-four-layers-redigested"),
    pytest.param(_world_size, True, id="world-size-redigested"),
    pytest.param(_rotary, True, id="rotary-base-redigested"),
    pytest.param(_drop_lm_head, False, id="no-lm-head-digest-stale"),
]


@pytest.mark.parametrize(("poison", "redigest"), POISONS)
def test_a_poisoned_layout_entry_is_replaced_and_the_checkpoint_is_the_no_cache_one(
        made: tuple[Path, dict[str, bytes], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        poison: Callable[[dict[str, Any]], None], redigest: bool) -> None:
    from lmi_build.reporting.output import Output
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    model, reference, cache = made
    shutil.copytree(cache, tmp_path / "cache")
    monkeypatch.setenv("LMI_BUILD_CACHE", str(tmp_path / "cache"))
    (entry_path,) = (tmp_path / "cache" / "layouts").iterdir()
    entry = json.loads(entry_path.read_text())
    poison(entry)
    if redigest:
        _redigest(entry)
    entry_path.write_text(json.dumps(entry))
    warnings: list[str] = []
    monkeypatch.setattr(Output, "warn", lambda self, message: warnings.append(message))
    plan = make_build_plan(model, tp=2, writer="stream")

    result = build_trtllm_checkpoint(plan, model, tmp_path / "ckpt", layout_cache=True)

    assert result.writer == "stream"
    assert _files(tmp_path / "ckpt") == reference
    assert len(warnings) == 1 and str(entry_path) in warnings[0], warnings
    warnings.clear()
    build_trtllm_checkpoint(plan, model, tmp_path / "again", layout_cache=True)  # the entry was replaced
    assert warnings == [] and _files(tmp_path / "again") == reference


def test_a_symlinked_entry_is_never_followed(made: tuple[Path, dict[str, bytes], Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry linked to a user's file (even a valid layout) is not read, and replacing it replaces
    the link: the user's file keeps its bytes."""
    from lmi_build.reporting.output import Output
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    model, reference, cache = made
    shutil.copytree(cache, tmp_path / "cache")
    monkeypatch.setenv("LMI_BUILD_CACHE", str(tmp_path / "cache"))
    (entry_path,) = (tmp_path / "cache" / "layouts").iterdir()
    users = tmp_path / "users-file.json"
    users.write_bytes(entry_path.read_bytes())
    entry_path.unlink()
    entry_path.symlink_to(users)
    before = users.read_bytes()
    warnings: list[str] = []
    monkeypatch.setattr(Output, "warn", lambda self, message: warnings.append(message))

    build_trtllm_checkpoint(make_build_plan(model, tp=2, writer="stream"), model, tmp_path / "ckpt",
                            layout_cache=True)

    assert _files(tmp_path / "ckpt") == reference
    assert len(warnings) == 1 and "symbolic link" in warnings[0], warnings
    assert users.read_bytes() == before and not entry_path.is_symlink()


def test_no_cache_never_reads_the_layout_cache(made: tuple[Path, dict[str, bytes], Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from lmi_build.reporting.output import Output
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    model, reference, cache = made
    shutil.copytree(cache, tmp_path / "cache")
    monkeypatch.setenv("LMI_BUILD_CACHE", str(tmp_path / "cache"))
    (entry_path,) = (tmp_path / "cache" / "layouts").iterdir()
    entry_path.write_text("not json")
    warnings: list[str] = []
    monkeypatch.setattr(Output, "warn", lambda self, message: warnings.append(message))

    build_trtllm_checkpoint(make_build_plan(model, tp=2, writer="stream"), model, tmp_path / "ckpt",
                            layout_cache=False)

    assert _files(tmp_path / "ckpt") == reference and warnings == []
    assert entry_path.read_text() == "not json"  # neither read nor written


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def test_the_command_line_build_after_a_poisoned_entry(world: World) -> None:
    """Through the CLI: a re-digested entry with two of four layers gives one warning naming the
    entry, exit 0 and the checkpoint of a --no-cache build, byte for byte."""
    common = ("trtllm", "--model", "demo:tiny-llama", "--until", "checkpoint", "--tp", "2")
    reference = world.run(*common, "--output", "reference", "--no-cache")
    assert reference.returncode == 0, reference.stderr
    assert not (world.cache / "layouts").exists()
    first = world.run(*common, "--output", "first")
    assert first.returncode == 0, first.stderr
    (entry_path,) = (world.cache / "layouts").iterdir()
    entry = json.loads(entry_path.read_text())
    _set_config("num_hidden_layers", 2)(entry)
    _redigest(entry)
    entry_path.write_text(json.dumps(entry))
    before = world.snapshot()

    result = world.run(*common, "--output", "after")

    world.expect(result, code=0, before=before, allowed=("work/after",))
    assert result.stderr.count(str(entry_path)) == 1, result.stderr
    checkpoint = {name: data for name, data in _files(world.cwd / "after").items() if name != "plan.json"}
    assert checkpoint == {name: data for name, data in _files(world.cwd / "reference").items() if name != "plan.json"}
