"""Issue 22, Deliver 2 (hf): an hf plan for a container profile, and ``verify --for-container`` of an hf
artifact, check that the profile's engine loads the checkpoint's architecture at all.

The truth is tests/vendor/vllm/architectures.json, extracted from each vLLM release's own model registry
by tests/vendor/vllm/extract_architectures.py; lmi-build's table (lmi_build/targets/hf/data/
loader_architectures.toml) must agree with it, and the plans and verify reports are checked against the
JSON, never against the tool's table. One fact is not vLLM's: LMI-Dist 9-13 (the 0.27-0.32 profiles) serve
T5, which their vLLM has no class for (djl-serving v0.29.0 lmi-dist_user_guide.md:22,66; each branch's
guide and handler, loader_architectures.toml [[engine]]). LMI-Dist 8 (the 0.26 profile) is not built on vLLM:
its truth is the architectures DJL's handler routes to it, extracted from the branch into
tests/vendor/djl/lmi_dist_releases.json, and the tuning guide's Mistral ([[own_loader]])."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lmi_build.artifact.verify import serving_target, verify_local
from lmi_build.model.spec import ModelSpec
from lmi_build.targets import TARGETS
from lmi_build.targets.hf.knobs import HfBuild
from lmi_build.targets.hf.profiles import load_profiles
from tests.fixtures_artifact import HF, HF_LAYOUT, make_plan, produced_as, tiny_spec
from tests.paths import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

VENDOR = json.loads((REPO_ROOT / "tests" / "vendor" / "vllm" / "architectures.json").read_text())["versions"]
TABLE = REPO_ROOT / "lmi_build" / "targets" / "hf" / "data" / "loader_architectures.toml"
LMI_DIST = "lmi-0.29.0-lmi-dist-11.0.0"
VLLM_0_11 = "lmi-0.35.0-vllm-0.11.1"
VLLM_0_17 = "lmi-0.36.0-vllm-0.17.0"
RELEASES = json.loads((REPO_ROOT / "tests" / "vendor" / "djl" / "lmi_dist_releases.json").read_text())["branches"]
LMI_DIST_8 = "lmi-0.26.0-lmi-dist-8.0.0"
# the engines not built on their image's vLLM: DJL's routing (huggingface.py LMI_DIST_ADV_MODEL, extracted) and
# the tuning guide's Mistral-7B on option.rolling_batch=lmi-dist (lmi_dist_tuning_guide.md:201-210 @ 0.26.0-dlc)
OWN_MODELS = {LMI_DIST_8: {*RELEASES["0.26.0-dlc"]["handler"]["lmi_dist_models"]["value"], "MistralForCausalLM"}}
VERSIONS = {p.name: p.vllm for p in load_profiles()}  # every hf profile, oldest first
HF_PROFILES = {name: vllm for name, vllm in VERSIONS.items() if name not in OWN_MODELS}  # on their vLLM's registry
# Beyond its vLLM's registry: LMI-Dist 9-13's own T5 (DJL's documentation and handler of each branch;
# LMI-Dist's source is not public).
LMI_DIST_PROFILES = ("lmi-0.27.0-lmi-dist-9.0.0", "lmi-0.28.0-lmi-dist-10.0.0", LMI_DIST, "lmi-0.30.0-lmi-dist-12.0.0",
                     "lmi-0.31.0-lmi-dist-13.0.0", "lmi-0.32.0-lmi-dist-13.0.0")
ENGINE_ADDS = {(profile, "T5ForConditionalGeneration") for profile in LMI_DIST_PROFILES}
TEXT_TABLES = ("_MODELS", "_GENERATION_MODELS", "_TEXT_GENERATION_MODELS")  # _MODELS: 0.3.x-0.4.x

QWEN25 = "Qwen--Qwen2.5-7B-Instruct"
LLAMA31 = "meta-llama--Llama-3.1-8B-Instruct"
PHI3 = "microsoft--Phi-3-mini-4k-instruct"
GEMMA2 = "google--gemma-2-9b"
MIXTRAL = "mistralai--Mixtral-8x7B-v0.1"
T5 = "google--flan-t5-large"
# 01-ai/Yi-6B's original config.json (remote code; later revisions say LlamaForCausalLM).
YI_CONFIG = {"architectures": ["YiForCausalLM"], "model_type": "Yi", "hidden_size": 4096, "intermediate_size": 11008,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 64000,
             "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 5000000.0, "torch_dtype": "bfloat16",
             "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
             "auto_map": {"AutoConfig": "configuration_yi.YiConfig", "AutoModel": "modeling_yi.YiModel",
                          "AutoModelForCausalLM": "modeling_yi.YiForCausalLM"}}


def vendor_loads(vllm: str, architecture: str) -> bool:
    return any(architecture in table["architectures"] for table in VENDOR[vllm]["tables"].values())


def vendor_falls_back(vllm: str) -> bool:
    return VENDOR[vllm]["transformers_fallback_line"] is not None


def profile_loads(profile: str, architecture: str) -> bool:
    if profile in OWN_MODELS:
        return architecture in OWN_MODELS[profile]
    return vendor_loads(HF_PROFILES[profile], architecture) or (profile, architecture) in ENGINE_ADDS


def expected(profile: str, architecture: str) -> str | None:
    """None: the engine loads it; else the finding's code (an error, or the fallback's warning)."""
    if profile_loads(profile, architecture):
        return None
    falls_back = profile not in OWN_MODELS and vendor_falls_back(HF_PROFILES[profile])
    return "hf_architecture_fallback" if falls_back else "hf_architecture"


def first_loading(architecture: str) -> str | None:
    return next((p for p in VERSIONS if profile_loads(p, architecture)), None)


# --- lmi-build's table against the extracted registries ---------------------------------------------

def test_every_hf_profile_vllm_was_extracted() -> None:
    assert set(HF_PROFILES.values()) <= set(VENDOR), set(HF_PROFILES.values()) - set(VENDOR)


@pytest.mark.parametrize("vllm", sorted(VENDOR))
def test_loader_table_equals_vllm_registry(vllm: str) -> None:
    table = {entry["vllm"]: entry for entry in tomllib.loads(TABLE.read_text())["loader"]}
    assert vllm in table, f"no [[loader]] for vLLM {vllm}"
    ours, theirs = table[vllm], VENDOR[vllm]
    text = next(name for name in TEXT_TABLES if name in theirs["tables"])
    assert sorted(ours["architectures"]) == theirs["tables"][text]["architectures"]
    assert sorted(ours["multimodal"]) == theirs["tables"].get("_MULTIMODAL_MODELS", {}).get("architectures", [])
    assert ours["commit"] == theirs["commit"]
    assert ours["transformers_fallback"] == vendor_falls_back(vllm)
    # each list is cited at the lines it was read from
    cited = " ".join(ours["sources"])
    assert f"{theirs['path']}:{theirs['tables'][text]['lines']} {text}" in cited
    if "_MULTIMODAL_MODELS" in theirs["tables"]:
        assert f"{theirs['path']}:{theirs['tables']['_MULTIMODAL_MODELS']['lines']} _MULTIMODAL_MODELS" in cited
    rope = theirs.get("rope")  # the rope_scaling types get_rope builds, where extracted
    assert ours.get("rope_scaling_types") == (rope["types"] if rope else None)
    if rope:
        assert f"{rope['path']}:{rope['lines']} get_rope" in cited


def test_own_loader_is_the_extracted_routing() -> None:
    """LMI-Dist 8's [[own_loader]]: DJL's LMI_DIST_ADV_MODEL at the lines extracted, the documented Mistral, and
    transformers 4.36.2's LlamaConfig rope_scaling types (its image's pin), each cited."""
    (own,) = [o for o in tomllib.loads(TABLE.read_text())["own_loader"] if o["profile"] == LMI_DIST_8]
    found = RELEASES["0.26.0-dlc"]
    assert set(own["architectures"]) == OWN_MODELS[LMI_DIST_8] and own["commit"] == found["commit"]
    cited = " ".join(own["sources"])
    models = found["handler"]["lmi_dist_models"]
    assert f"huggingface.py:{models['line']}-{models['end_line']} LMI_DIST_ADV_MODEL" in cited
    assert f"deepspeed.Dockerfile:{found['transformers']['line']} transformers {found['transformers']['value']}" in cited
    assert "transformers v4.36.2 src/transformers/models/llama/configuration_llama.py:172-191" in cited
    assert own["rope_scaling_types"] == ["dynamic", "linear"] and own["inferred"]


def test_llama3_rope_is_refused_on_lmi_dist_8(plan_model: Any) -> None:
    found = [m for m in plan_model("hf", LLAMA31, profile=LMI_DIST_8).errors if m.code == "hf_rope_scaling"]
    assert len(found) == 1 and "'llama3'" in found[0].message and "transformers 4.36.2" in found[0].message
    assert "\n" not in found[0].message and found[0].hint == "use --profile lmi-0.29.0-lmi-dist-11.0.0"
    assert [m for m in plan_model("hf", "meta-llama--Llama-2-7b-hf", profile=LMI_DIST_8).errors
            if m.code == "hf_rope_scaling"] == []


ROPE_READ = sorted(p for p, v in HF_PROFILES.items() if (VENDOR[v].get("rope") or {}).get("types"))


@pytest.mark.parametrize("profile", ROPE_READ)
def test_llama3_rope_is_refused_where_get_rope_lacks_it(profile: str, plan_model: Any) -> None:
    plan = plan_model("hf", LLAMA31, profile=profile)
    has = "llama3" in VENDOR[HF_PROFILES[profile]]["rope"]["types"]
    found = [m for m in plan.errors if m.code == "hf_rope_scaling"]
    assert (found == []) is has, found
    if not has:
        first = next(p for p in ROPE_READ if "llama3" in VENDOR[HF_PROFILES[p]]["rope"]["types"])
        assert "'llama3'" in found[0].message and first in found[0].message and found[0].hint == f"use --profile {first}"
    assert "hf_rope_scaling" not in {m.code for m in plan_model("hf", QWEN25, profile=profile).errors}


# --- plan --profile ---------------------------------------------------------------------------------

@pytest.fixture
def yi_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "01-ai--Yi-6B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(YI_CONFIG))
    return folder


def _architecture_findings(plan: Any) -> list[tuple[str, str]]:
    return [(m.code, m.message) for m in [*plan.errors, *plan.warnings] if m.code.startswith("hf_architecture")]


@pytest.mark.parametrize("profile", sorted(VERSIONS))
@pytest.mark.parametrize("model", [QWEN25, LLAMA31, PHI3, GEMMA2, MIXTRAL, T5, "yi"])
def test_plan_checks_the_profiles_loader(model: str, profile: str, plan_model: Any, yi_dir: Path) -> None:
    fields: dict[str, Any] = {"profile": profile, "tp": 2 if model == MIXTRAL else 1}
    plan = plan_model("hf", yi_dir, trust_remote_code=True, **fields) if model == "yi" else plan_model("hf", model, **fields)
    architecture = plan.spec.architectures[0]
    want = expected(profile, architecture)
    found = _architecture_findings(plan)
    if want is None:
        assert found == [], found
        return
    assert [code for code, _ in found] == [want], found
    text = found[0][1]
    assert architecture in text and profile in text and "\n" not in text
    first = first_loading(architecture)
    assert (first in text) if first else ("no hf profile" in text), text
    if want == "hf_architecture":
        assert not plan.valid
    else:
        assert "Transformers backend" in text


def test_llama_loads_everywhere_and_gemma2_on_lmi_dist(plan_model: Any) -> None:
    """vLLM 0.5.3.post1 has Gemma2ForCausalLM (and Qwen2MoeForCausalLM, DeepseekV2ForCausalLM)."""
    for profile in VERSIONS:
        assert _architecture_findings(plan_model("hf", LLAMA31, profile=profile)) == []
    assert _architecture_findings(plan_model("hf", GEMMA2, profile=LMI_DIST)) == []
    assert all(vendor_loads("0.5.3.post1", a) for a in ("Gemma2ForCausalLM", "Qwen2MoeForCausalLM", "DeepseekV2ForCausalLM"))


def test_yi_refused_on_lmi_dist(plan_model: Any, yi_dir: Path) -> None:
    plan = plan_model("hf", yi_dir, trust_remote_code=True, profile=LMI_DIST)
    assert not plan.valid
    error = next(m for m in plan.errors if m.code == "hf_architecture")
    assert error.message == (f"{LMI_DIST} (lmi-dist, vLLM 0.5.3.post1) has no loader for YiForCausalLM; "
                             "no hf profile lmi-build knows loads it")


def test_no_profile_no_loader_check(plan_model: Any, yi_dir: Path) -> None:
    """Without --profile no one container's registry is checked (a quantized plan names the profiles
    that load its checkpoint)."""
    assert _architecture_findings(plan_model("hf", yi_dir, trust_remote_code=True)) == []


# --- verify --for-container -------------------------------------------------------------------------

@pytest.fixture
def artifact_of(make_artifact: Callable[..., Path], source_model: Path) -> Callable[[str], Path]:
    def make(architecture: str) -> Path:
        spec = ModelSpec(**{**tiny_spec().model_dump(), "architectures": (architecture,)})
        plan = make_plan("hf", spec=spec, build=HfBuild(tp=1, dtype="float16"))
        # config.json names the architecture too: verify reads it from there, not from the manifest
        produced = produced_as(source_model, source_model.parent / f"as-{architecture}", architectures=(architecture,))
        return make_artifact(plan, HF, HF_LAYOUT, produced, produced)

    return make


def _report(artifact: Path, container: str) -> tuple[list[str], list[str]]:
    report = verify_local(artifact, TARGETS, serving=serving_target(TARGETS, container=container))
    return [f"{e.code}: {e.message}" for e in report.errors], [f"{w.code}: {w.message}" for w in report.warnings]


@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "Gemma3ForConditionalGeneration"])
def test_verify_refuses_architecture_lmi_dist_lacks(architecture: str, artifact_of: Callable[[str], Path]) -> None:
    assert not vendor_loads("0.5.3.post1", architecture) and vendor_loads("0.11.1", architecture)
    artifact = artifact_of(architecture)
    errors, _ = _report(artifact, LMI_DIST)
    first = first_loading(architecture)
    assert first is not None
    assert errors == [f"hf_architecture: {LMI_DIST} (lmi-dist, vLLM 0.5.3.post1) has no loader for {architecture}; "
                      f"first hf profile that loads it: {first} (vLLM {VERSIONS[first]})"]
    assert _report(artifact, VLLM_0_11) == ([], [])
    assert _report(artifact, VLLM_0_17) == ([], [])


def test_verify_warns_where_vllm_would_try_transformers(artifact_of: Callable[[str], Path]) -> None:
    errors, warnings = _report(artifact_of("YiForCausalLM"), VLLM_0_17)
    assert errors == [] and len(warnings) == 1 and warnings[0].startswith("hf_architecture_fallback: ")
    assert "no hf profile lmi-build knows loads it" in warnings[0]


def test_verify_refuses_a_rope_type_the_profiles_vllm_lacks(make_artifact: Callable[..., Path], source_model: Path) -> None:
    """verify --for-container applies the plan's RoPE rule to the built artifact's spec."""
    spec = ModelSpec(**{**tiny_spec().model_dump(), "rope": {"theta": 500000.0, "scaling_type": "llama3",
                                                             "scaling_factor": 32.0}})
    artifact = make_artifact(make_plan("hf", spec=spec, build=HfBuild(tp=1, dtype="float16")), HF, HF_LAYOUT,
                             source_model, source_model)
    errors, _ = _report(artifact, "lmi-0.28.0-lmi-dist-10.0.0")
    assert [e.split(":")[0] for e in errors] == ["hf_rope_scaling"] and "'llama3'" in errors[0]
    assert _report(artifact, LMI_DIST)[0] == []
