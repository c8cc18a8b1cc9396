"""Container profiles and the per-version flag table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lmi_build.core.container_profiles import ProfileError, read_profile
from lmi_build.core.errors import UnknownName
from lmi_build.core.tables import read_table
from lmi_build.core.versions import parse_version, release
from lmi_build.targets.trtllm.flags import FlagError, FlagsFile, flag_table, series_for
from lmi_build.targets.trtllm.profiles import PROFILES_DIR, ContainerProfile, get_profile, load_profiles
from tests.cli_process import run_lmi_build

IMAGE = re.compile(r"^(763104351884\.dkr\.ecr\.us-west-2\.amazonaws\.com/djl-inference:[0-9.]+-tensorrtllm[0-9.]+-cu\d{3}"
                   r"|deepjavalibrary/djl-serving:([0-9.]+-)?tensorrt-llm(-nightly)?)$")


def test_profiles_cover_every_era() -> None:
    versions = {p.tensorrt_llm for p in load_profiles()}
    assert {"0.7.1", "0.8.0"} <= versions
    assert any((0, 9) <= release(v) < (0, 12) for v in versions)
    assert any((0, 12) <= release(v) < (1,) for v in versions)
    flat_1x = [p for p in load_profiles() if release(p.tensorrt_llm) >= (1,)]
    assert flat_1x and all(p.layout == "flat" and p.engine_capable for p in flat_1x)


@pytest.mark.parametrize("profile", load_profiles(), ids=lambda p: p.name)
def test_profile_facts(profile) -> None:  # type: ignore[no-untyped-def]
    assert IMAGE.match(profile.image), profile.image
    if not profile.published:  # DJL's own Docker Hub build: <release>-tensorrt-llm, or the moving nightly tag
        assert profile.image == (f"deepjavalibrary/djl-serving:{profile.lmi_version}-tensorrt-llm" if profile.released
                                 else "deepjavalibrary/djl-serving:tensorrt-llm-nightly")
    else:
        assert profile.image == profile.dlc
        tag = profile.image.rsplit(":", 1)[1]
        assert tag.startswith(f"{profile.lmi_version}-tensorrtllm{profile.tensorrt_llm.split('rc')[0]}")
        assert tag.endswith("cu" + profile.cuda.replace(".", ""))
    assert profile.sources, "every profile names its sources"
    assert series_for(profile.tensorrt_llm)
    assert (profile.workflow == "legacy") == (release(profile.tensorrt_llm) < (0, 8))


def test_release_defaults() -> None:
    assert get_profile("lmi-0.28.0-trtllm-0.9.0").defaults["tokens_per_block"] == "128"
    assert get_profile("lmi-0.29.0-trtllm-0.11.0").defaults["max_batch_size"] == "256"
    assert get_profile("lmi-0.29.0-trtllm-0.11.0").defaults["max_num_tokens"] == "16384"  # LMI 0.29 JIT default
    assert get_profile("lmi-0.33.0-trtllm-0.21.0").defaults["max_batch_size"] == "2048"


def test_default_is_newest_published_engine_capable() -> None:
    default = get_profile(None)
    assert default.released and default.engine_capable and default.published
    newer = [p for p in load_profiles() if parse_version(p.tensorrt_llm) > parse_version(default.tensorrt_llm)]
    assert newer and all(not p.released or not p.engine_capable or not p.published for p in newer)


def test_unknown_profile_lists_names() -> None:
    with pytest.raises(UnknownName) as error:
        get_profile("lmi-9.9")
    assert "lmi-0.27.0-trtllm-0.8.0" in error.value.one_line()


def test_malformed_profile_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.toml"
    bad.write_text('name = "x"\nimage = 3\n')
    with pytest.raises(ProfileError, match=r"x\.toml"):
        read_profile(bad, ContainerProfile)


def test_profiles_dir_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = PROFILES_DIR / "lmi-0.27.0-trtllm-0.8.0.toml"
    (tmp_path / "trtllm").mkdir()
    (tmp_path / "trtllm" / source.name).write_text(source.read_text())
    monkeypatch.setenv("LMI_BUILD_PROFILES_DIR", str(tmp_path))
    assert [p.name for p in load_profiles()] == ["lmi-0.27.0-trtllm-0.8.0"]


@pytest.mark.parametrize(("version", "flag", "present"), [
    ("0.8.0", "max_output_len", True), ("0.8.0", "max_seq_len", False), ("0.8.0", "world_size", False),
    ("0.8.0", "tp_size", False), ("0.8.0", "pp_size", False), ("0.8.0", "multiple_profiles", False),
    ("0.9.0", "multiple_profiles", True),
    ("0.9.0", "world_size", False), ("0.9.0", "auto_parallel", True),
    ("0.11.0", "max_seq_len", True), ("0.11.0", "max_output_len", True), ("0.11.0", "use_custom_all_reduce", True),
    ("0.11.0", "multi_block_mode", True), ("0.11.0", "strongly_typed", False),
    ("0.12.0", "max_output_len", False), ("0.12.0", "use_custom_all_reduce", False),
    ("0.12.0", "multi_block_mode", False), ("0.12.0", "tp_size", False),
    ("1.0.0", "use_paged_context_fmha", True), ("1.0.0", "multiple_profiles", True),
])
def test_flag_presence(version: str, flag: str, present: bool) -> None:
    assert flag_table(version).has("trtllm_build", flag) is present


def test_value_forms() -> None:
    assert flag_table("0.8.0").kind("trtllm_build", "use_custom_all_reduce") == "enable_disable"
    assert flag_table("0.12.0").kind("trtllm_build", "use_fused_mlp") == "store_true"
    assert flag_table("0.21.0rc1").kind("trtllm_build", "use_fused_mlp") == "enable_disable"
    assert flag_table("0.7.1").kind("legacy_build", "use_gemm_plugin") == "dtype"
    problems = flag_table("0.12.0").validate_argv("trtllm_build", ["--max_output_len", "5", "--gemm_plugin", "fp16"])
    assert any("max_output_len" in p for p in problems) and any("gemm_plugin" in p for p in problems)
    assert flag_table("0.12.0").removed["use_custom_all_reduce"].kind == "runtime"


def test_cli_profiles_list_and_show() -> None:
    listed = run_lmi_build("profiles", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    names = [p["name"] for p in json.loads(listed.stdout)]
    assert "lmi-0.26.0-trtllm-0.7.1" in names
    shown = run_lmi_build("profiles", "show", "lmi-0.30.0-trtllm-0.12.0", "--json")
    data = json.loads(shown.stdout)
    assert data["flag_series"] == "0.12" and "max_seq_len" in data["flags"]["trtllm_build"]
    assert run_lmi_build("profiles", "show", "nope").returncode != 0


def test_versions_order_pre_releases_before_their_release() -> None:
    assert parse_version("0.21.0rc1") < parse_version("0.21.0") < parse_version("0.21.1")
    assert parse_version("0.9.0") < parse_version("0.10.0")  # numerically, not as text
    # Range checks use the release number: a release candidate is in its release's series.
    assert release("0.21.0rc1") == (0, 21, 0) and release("0.21.0rc1") >= (0, 21)
    assert release("0.21.1") == (0, 21, 1)


def test_flag_series_range_checks_use_the_release_number(tmp_path: Path) -> None:
    flags = tmp_path / "flags.toml"
    flags.write_text(
        '[series."0.16"]\nmin = "0.16.0"\n[series."0.16".trtllm_build]\nuse_fused_mlp = "store_true"\n'
        '[series."0.21"]\nmin = "0.21.0"\ninherit = "0.16"\n'
        '[series."0.21".trtllm_build]\nuse_fused_mlp = "enable_disable"\n',
        encoding="utf-8")
    table = read_table(flags, FlagsFile)
    assert table.names() == ["0.16", "0.21"]
    assert table.series_for("0.21.0rc1") == "0.21"
    assert table.series_for("0.21.0") == table.series_for("0.21.1") == "0.21"
    assert table.series_for("0.20.9") == "0.16"
    assert table.table("0.21").kind("trtllm_build", "use_fused_mlp") == "enable_disable"
    with pytest.raises(FlagError, match="predates every known flag series"):
        table.series_for("0.15.0")
    with pytest.raises(FlagError, match="'latest' is not a TensorRT-LLM version"):
        table.series_for("latest")


def test_the_final_release_sorts_after_its_release_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Same LMI release, so only the TensorRT-LLM version orders them (the names would sort the other way).
    source = (PROFILES_DIR / "lmi-0.33.0-trtllm-0.21.0.toml").read_text()
    (tmp_path / "trtllm").mkdir()
    for name, version in (("lmi-0.33.0-trtllm-0.21.0rc1", "0.21.0rc1"), ("lmi-0.33.0-trtllm-0.21.0-final", "0.21.0")):
        text = source.replace('"lmi-0.33.0-trtllm-0.21.0"', f'"{name}"').replace('"0.21.0rc1"', f'"{version}"')
        (tmp_path / "trtllm" / f"{name}.toml").write_text(text)
    monkeypatch.setenv("LMI_BUILD_PROFILES_DIR", str(tmp_path))
    assert [p.tensorrt_llm for p in load_profiles()] == ["0.21.0rc1", "0.21.0"]
    assert get_profile(None).tensorrt_llm == "0.21.0"


def test_profile_versions_must_be_versions(tmp_path: Path) -> None:
    source = (PROFILES_DIR / "lmi-0.33.0-trtllm-0.21.0.toml").read_text()
    bad = tmp_path / "lmi-0.33.0-trtllm-0.21.0.toml"
    bad.write_text(source.replace('tensorrt_llm = "0.21.0rc1"', 'tensorrt_llm = "twenty-one"'))
    with pytest.raises(ProfileError, match=r"lmi-0\.33\.0-trtllm-0\.21\.0\.toml: field tensorrt_llm: .*twenty-one"):
        read_profile(bad, ContainerProfile)
