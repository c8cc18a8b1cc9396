"""Instance types: the SageMaker spelling (ml.<type>) names the same row as the EC2 one and is kept
in messages, and the table covers every GPU and Neuron family LMI serves on, each row citing its
source."""

from __future__ import annotations

import pytest

from lmi_build.core.errors import OptionError
from lmi_build.core.tables import DATA_DIR, read_table
from lmi_build.planning.instances import GIB, InstancesFile, get_instance, load_instances
from tests.cli_process import run_lmi_build
from tests.fixtures_planning import Planner, codes

LLAMA = "meta-llama--Llama-2-7b-hf"

# family -> (accelerator, devices per size, SM or Neuron platform), from the AWS pages the table cites.
FAMILIES = {
    "g4dn": ("t4", {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4,
                    "metal": 8}, "sm75"),
    "g5": ("a10g", {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4,
                    "24xlarge": 4, "48xlarge": 8}, "sm86"),
    "g6": ("l4", {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4,
                  "24xlarge": 4, "48xlarge": 8}, "sm89"),
    "g6e": ("l40s", {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4,
                     "24xlarge": 4, "48xlarge": 8}, "sm89"),
    "p3": ("v100-16gb", {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8}, "sm70"),
    "p4d": ("a100-40gb", {"24xlarge": 8}, "sm80"),
    "p4de": ("a100-80gb", {"24xlarge": 8}, "sm80"),
    "p5": ("h100", {"48xlarge": 8}, "sm90"),
    "p5e": ("h200", {"48xlarge": 8}, "sm90"),
    "p5en": ("h200", {"48xlarge": 8}, "sm90"),
    "inf2": ("inferentia2", {"xlarge": 2, "8xlarge": 2, "24xlarge": 12, "48xlarge": 24}, "inf2"),
    "trn1": ("trainium1", {"2xlarge": 2, "32xlarge": 32}, "trn1"),
    "trn2": ("trainium2", {"48xlarge": 64}, "trn2"),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_lmi_serves_on_is_in_the_table(family: str) -> None:
    accelerator, sizes, hardware = FAMILIES[family]
    instances = load_instances()
    for size, devices in sizes.items():
        instance = instances[f"{family}.{size}"]
        assert (instance.accelerator.name, instance.devices) == (accelerator, devices), instance.name
        assert hardware in (instance.accelerator.sm, instance.accelerator.platform)


def test_device_memory_is_the_hardware_s() -> None:
    instances = load_instances()
    expected = {"g4dn.xlarge": 16, "p3.2xlarge": 16, "p3dn.24xlarge": 32, "p5en.48xlarge": 141,
                "trn2.48xlarge": 24, "trn1.32xlarge": 16}  # trn2: 96 GiB per chip over 4 logical cores
    for name, gib in expected.items():
        accelerator = instances[name].accelerator
        assert accelerator.memory_gib == gib, name
        assert 0 < accelerator.usable_memory_gib <= accelerator.memory_gib
    assert instances["p5en.48xlarge"].usable_bytes_per_device > 130 * GIB


def test_every_row_cites_a_source_the_table_defines() -> None:
    table = read_table(DATA_DIR / "instances.toml", InstancesFile)
    for name, row in table.instances.items():
        assert row.source in table.sources, name
    for name, accelerator in table.accelerators.items():
        assert accelerator.source in table.sources, name
    assert all(source.count("https://") >= 1 for source in table.sources.values())


@pytest.mark.parametrize("typed", ["ml.g5.12xlarge", "ML.G5.12XLARGE", " ml.g5.12xlarge "])
def test_the_sagemaker_spelling_is_the_same_instance(typed: str) -> None:
    found = get_instance(typed)
    ec2 = load_instances()["g5.12xlarge"]
    assert (found.accelerator, found.devices, found.host_memory_gib) == (ec2.accelerator, ec2.devices,
                                                                          ec2.host_memory_gib)
    assert found.name == typed.strip()  # messages say what the user typed


def test_an_unknown_sagemaker_size_lists_the_family_in_the_user_s_spelling() -> None:
    with pytest.raises(OptionError) as raised:
        get_instance("ml.g5.3xlarge")
    assert "'ml.g5.3xlarge'" in raised.value.message
    assert raised.value.hint is not None and "ml.g5.12xlarge" in raised.value.hint


def test_an_unknown_family_lists_the_known_families() -> None:
    with pytest.raises(OptionError) as raised:
        get_instance("x9.large")
    assert raised.value.hint is not None
    for family in FAMILIES:
        assert family in raised.value.hint.split(": ", 1)[1].split(", ")


def test_plan_with_a_sagemaker_instance_type_resolves_tp_max(plan_model: Planner) -> None:
    plan = plan_model("trtllm", LLAMA, tp="max", instance_type="ml.g5.12xlarge")
    assert plan.build is not None and plan.build.tp == 4
    assert plan.memory is not None and plan.memory.instance_type == "ml.g5.12xlarge"
    assert plan.memory.devices == 4 and plan.memory.fits


def test_neuronx_refuses_trn2_with_a_message(plan_model: Planner) -> None:
    plan = plan_model("neuronx", LLAMA, tp="2", instance_type="ml.trn2.48xlarge")
    assert "neuron_platform" in codes(plan)
    message = next(m for m in plan.errors if m.code == "neuron_platform")
    assert "ml.trn2.48xlarge" in message.message and "inf2" in (message.hint or "")


def test_cli_accepts_the_sagemaker_spelling() -> None:
    result = run_lmi_build("plan", "trtllm", "--model", "demo:tiny-llama", "--instance-type", "ml.g5.12xlarge",
                           "--tp", "max", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    assert '"instance_type": "ml.g5.12xlarge"' in result.stdout
