"""Compile NEFFs the way the LMI Neuron container's TNX loader does, with the plan's kwargs.

This file runs where the Neuron SDK is (the profile's image, or a host with that SDK), as a
standalone script: it imports nothing from lmi_build (it is copied next to compile.json into the
build directory or the script bundle). It mirrors DJL's ``TNXModelLoader`` partition path
(djl_python/neuron_utils/model_loader.py): the same
``NeuronAutoModelForCausalLM.from_pretrained(model, neuron_config=NeuronConfig(...), **kwargs)``,
``to_neuron()`` from /tmp, ``save()`` and ``VERSION``; per the plan's layout:

- ``neuronx-tnx`` (0.30+, afece25 lines 233-289, 444-498): ``save(output, sharded_weights=True)``,
  NEFFs and presharded weights flat in ``output``;
- ``neuronx-legacy`` (0.28/0.29 ``safetensors_partition``, 0.29.0-dlc lines 449-462): the HF model
  re-saved with ``save_pretrained`` to ``output/checkpoint``, ``save(output/compiled)`` (NEFFs only).
- ``neuronx-split`` (0.27 ``legacy_partition``, 0.27.0-dlc lines 226-236, 325-345): the HF model
  written with ``save_pretrained_split`` to ``output/checkpoint`` (with the config), loaded back with
  the model type's sampling class (``split_class``), ``save(output/compiled)`` and VERSION.

With the optimum loader it mirrors DJL's ``OptimumModelLoader.partition`` instead (0.27.0-dlc /
0.30.0-dlc model_loader.py): ``optimum.neuron.NeuronModelForCausalLM.from_pretrained(model,
export=True, num_cores, auto_cast_type, task, batch_size, sequence_length)`` and
``save_pretrained(output)`` (optimum-neuron writes config.json with its ``neuron`` block,
``checkpoint/`` and ``compiled/``).

    python3 lmi_neuronx_compile.py --probe
    python3 lmi_neuronx_compile.py --kwargs compile.json --model DIR --output DIR --cache DIR
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from importlib import metadata
from typing import Any

# The Neuron SDK (neuronxcc, transformers_neuronx, optimum.neuron) is imported inside the functions:
# --probe runs, and says what is missing, where it is not importable.


def _neuronxcc_version() -> str:
    import neuronxcc

    return str(neuronxcc.__version__)


def probe() -> int:
    """Print the SDK versions as JSON, or say what is missing (exit 1)."""
    try:
        import transformers_neuronx

        versions = {"neuronx_cc": _neuronxcc_version(),
                    "transformers_neuronx": str(getattr(transformers_neuronx, "__version__", "unknown"))}
    except ImportError as error:
        print(f"the Neuron SDK is not importable with {sys.executable}: {error}", file=sys.stderr)
        return 1
    with contextlib.suppress(metadata.PackageNotFoundError):  # only the optimum loader needs it
        versions["optimum_neuron"] = metadata.version("optimum-neuron")
    print(json.dumps(versions))
    return 0


def _neuron_config(keys: dict[str, Any]) -> Any:
    """NeuronConfig as DJL builds it: group_query_attention as the string (NeuronConfig makes the GQA
    itself: transformers-neuronx 0623de2 config.py:106, c8d6bdc config.py:201; DJL 0.30.0-dlc
    model_loader.py:187-189). transformers_neuronx.config has no GQA before 0.11 (0623de2 config.py:15)."""
    from transformers_neuronx import NeuronConfig
    from transformers_neuronx.config import ContinuousBatchingConfig, QuantizationConfig

    values = dict(keys)
    if "continuous_batching" in values:
        values["continuous_batching"] = ContinuousBatchingConfig(**values["continuous_batching"])
    if "quant" in values:
        values["quant"] = QuantizationConfig(**values["quant"])
    return NeuronConfig(**values)


def compile_model(spec: dict[str, Any], model_dir: str, output: str, cache: str) -> int:
    # Set before transformers_neuronx is imported: libneuronxla reads both when it compiles.
    os.environ["NEURON_CC_FLAGS"] = spec["compiler_flags"]
    os.environ["NEURON_COMPILE_CACHE_URL"] = cache
    found = _neuronxcc_version()
    expected = spec["neuronx_cc"]
    if found != expected:
        # A NEFF from another compiler never matches the serving container's cache key.
        print(f"neuronx-cc {found} here, the plan's container has {expected}: run in the profile's image "
              f"or on a host with Neuron SDK {spec['neuron_sdk']}", file=sys.stderr)
        return 2
    if spec["loader"] == "optimum":
        from optimum.neuron import NeuronModelForCausalLM

        exported = NeuronModelForCausalLM.from_pretrained(model_dir, **spec["optimum_kwargs"])
        exported.save_pretrained(output)
        print(f"optimum-neuron export written to {output}")
        return 0
    from transformers_neuronx import NeuronAutoModelForCausalLM

    layout = spec.get("layout", "neuronx-tnx")
    legacy = layout in ("neuronx-legacy", "neuronx-split")
    compiled = os.path.join(output, "compiled") if legacy else output
    checkpoint = os.path.join(output, "checkpoint")
    os.makedirs(compiled, exist_ok=True)
    neuron_config = _neuron_config(spec["neuron_config"])
    if legacy:
        from transformers import AutoModelForCausalLM

        # DJL's load_hf_model(): the weights the container loads from checkpoint/.
        hf_model = AutoModelForCausalLM.from_pretrained(model_dir)
    if layout == "neuronx-legacy":
        hf_model.save_pretrained(checkpoint)
    if layout == "neuronx-split":
        from transformers import AutoConfig
        from transformers_neuronx.module import save_pretrained_split

        # DJL saves the config first; save_pretrained_split then writes the HF model's own config.json
        # and the split weights (pytorch_model.bin/ with key_to_filename.json), as in the container.
        AutoConfig.from_pretrained(model_dir).save_pretrained(checkpoint)
        save_pretrained_split(hf_model, checkpoint)
        module_name, class_name = spec["split_class"].rsplit(".", 1)
        sampling_class = getattr(importlib.import_module(f"transformers_neuronx.{module_name}"), class_name)
        model = sampling_class.from_pretrained(checkpoint, neuron_config=neuron_config, **spec["tnx_kwargs"])
    else:
        model = NeuronAutoModelForCausalLM.from_pretrained(model_dir, neuron_config=neuron_config,
                                                           **spec["tnx_kwargs"])
    here = os.getcwd()
    os.chdir("/tmp")  # DJL's workaround for the compiler's serialization (model_loader.py compile_and_save)
    try:
        model.to_neuron()
        if spec.get("layout", "neuronx-tnx") == "neuronx-tnx":
            # Presharded weights beside the NEFFs; TNX then writes config.json with
            # is_presharded_checkpoint (transformers-neuronx base.py:39-47).
            model.save(compiled, sharded_weights=True)
        else:  # legacy: weights in checkpoint/; cache tree: only the compile cache is shipped
            model.save(compiled)
    finally:
        os.chdir(here)
    with open(os.path.join(compiled, "VERSION"), "w", encoding="utf-8") as version_file:
        version_file.write(found)
    print(f"compiled NEFFs written to {compiled}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--kwargs")
    parser.add_argument("--model")
    parser.add_argument("--output")
    parser.add_argument("--cache")
    args = parser.parse_args(argv)
    if args.probe:
        return probe()
    if not (args.kwargs and args.model and args.output and args.cache):
        parser.error("--kwargs, --model, --output and --cache are required")
    with open(args.kwargs, encoding="utf-8") as handle:
        spec = json.load(handle)
    return compile_model(spec, args.model, args.output, args.cache)


if __name__ == "__main__":
    sys.exit(main())
