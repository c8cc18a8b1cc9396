"""What an hf container profile's DJL handler does at start-up with the serving.properties an hf
artifact ships: the refusals of its properties manager (``data/serving_formats.toml``, per profile
``pipeline_parallel``, ``engine_arg_conflicts``, ``startup_sources``). ``plan`` evaluates it on the
properties it will write, ``verify --for-container`` on the artifact's: the same rule on the same input.

Recorded by executing each release's properties manager on lmi-build's own outputs
(``tests/vendor/djl/verdicts.json``), which a test compares with these rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lmi_build.artifact.target_api import message
from lmi_build.core.types import PlanMessage
from lmi_build.core.versions import release
from lmi_build.planning.context import read_text
from lmi_build.targets.hf.options import HfOptions
from lmi_build.targets.hf.profiles import serving_formats

if TYPE_CHECKING:
    from lmi_build.targets.hf.profiles import HfProfile


def startup_problems(profile: HfProfile, properties: Mapping[str, str]) -> list[PlanMessage]:
    """The errors ``profile``'s handler raises at start-up on ``properties`` (full serving.properties keys)."""
    where = f"{profile.name} ({profile.engine})"
    cited = "; ".join(profile.startup_sources)
    errors: list[PlanMessage] = []
    text = read_text(properties, HfOptions)
    pp = (text.pipeline_parallel_degree or "").strip()
    if not profile.pipeline_parallel and pp and pp != "1":
        # vLLM's handler raises; LMI-Dist's before 0.29 has no such field and drops the key unread
        what = (f"{where} refuses option.pipeline_parallel_degree={pp}: DJL raises \"Pipeline parallelism is not "
                f"supported in vLLM's LLMEngine\" at start-up ({cited})" if profile.engine == "vllm" else
                f"{where} ignores option.pipeline_parallel_degree={pp}: DJL's LmiDistRbProperties has no such field "
                f"and builds LMI-Dist's engine without pipeline_parallel_size, so the model would run unpipelined "
                f"({cited})")
        errors.append(message("hf_pipeline_parallel", what,
                              "drop --pp / option.pipeline_parallel_degree (shard with --tp), or serve with a "
                              "profile whose engine takes pipeline parallelism (lmi-build profiles list)"))
    errors += _lmi_dist_removed(profile, (text.rolling_batch or "").strip())
    for vllm_name, lmi_key in profile.engine_arg_conflicts.items():
        given: str | None = getattr(text, vllm_name)  # the profile's engine_arg_conflicts names HfOptions fields
        if given is None:
            continue
        # DJL compares the raw serving.properties string with its own parsed int, which the Java
        # front-end always fills: any value of the vLLM spelling is "conflicting", an equal one too.
        errors.append(message("hf_engine_arg_conflict",
                              f"{where} refuses option.{vllm_name}={given}: DJL takes only its own {lmi_key} "
                              f"and raises on a vLLM {vllm_name} next to it (\"configs have been set with "
                              f"conflicting values\"; {cited})",
                              f"write {lmi_key}={given} instead of option.{vllm_name}"))
    return errors


def _lmi_dist_removed(profile: HfProfile, rolling_batch: str) -> list[PlanMessage]:
    """option.rolling_batch=lmi-dist on a release that no longer has LMI-Dist (serving_formats.toml [serving])."""
    rule = serving_formats().serving
    if rolling_batch != "lmi-dist" or release(profile.lmi_version) < release(rule.lmi_dist_removed_in):
        return []
    return [message("hf_lmi_dist_removed",
                    f"{profile.name} has no LMI-Dist: option.rolling_batch=lmi-dist was removed in LMI "
                    f"{rule.lmi_dist_removed_in} ({rule.lmi_dist_removed_source})",
                    "use option.rolling_batch=vllm (with engine=Python, option.mpi_mode=false), or an LMI-Dist "
                    "profile of an earlier release (lmi-build profiles list)")]
