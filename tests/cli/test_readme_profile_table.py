"""The README's profile table (issue 39) lists every TensorRT-LLM, Neuron and hf (vLLM / LMI-Dist) profile with
what its image is (a published DLC, DJL's own build, or none) and marks each target's default, as the
profiles say (the hf target has none)."""

import re

from lmi_build.targets.hf import profiles as hf_profiles
from lmi_build.targets.neuronx import profiles as neuronx_profiles
from lmi_build.targets.trtllm import profiles as trtllm_profiles
from tests.paths import REPO_ROOT

ROW = re.compile(r"^\| `(?P<name>[\w.-]+)`(?P<default> \(default\))? \| [^|]+ \| (?P<image>[^|]+) \|$", re.M)


def test_the_readme_table_is_the_profiles() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    table = readme.split("\n| profile | versions | image |\n", 1)[1].split("\n\n", 1)[0]
    rows = {m["name"]: m for m in ROW.finditer(table)}
    targets = (trtllm_profiles, neuronx_profiles)
    profiles = [p for target in (*targets, hf_profiles) for p in target.load_profiles()]
    assert sorted(rows) == sorted(p.name for p in profiles)
    defaults = {target.get_profile(None).name for target in targets}
    for profile in profiles:
        row = rows[profile.name]
        assert bool(row["default"]) == (profile.name in defaults), profile.name
        image = getattr(profile, "image", None)  # an hf profile builds in no image
        if profile.dlc:
            expected = f"DLC `{profile.dlc.split('/')[-1]}`"
        else:
            expected = f"DJL's build `{image}`" if image else "none (source only)"
        assert row["image"].strip() == expected, profile.name
