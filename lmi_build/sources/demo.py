"""Built-in tiny models (``demo:<name>``): generated on this machine, never downloaded.

Each demo model is a few MB of fp16 safetensors plus a byte-level BPE tokenizer trained offline
on built-in text. Generation is deterministic (fixed seed, weights drawn in sorted-name order,
independent of transformers' own init code), so two machines produce byte-identical files and
the identity digest can be computed from the recipe alone, without generating the weights.

``config.json`` is plain data written here, so ``purpose="plan"`` needs neither torch nor
transformers; only ``with_weights=True`` imports them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmi_build.core.errors import MissingDependency, SourceError
from lmi_build.core.fs import make_readable, staged_directory
from lmi_build.core.hashing import sha256_text
from lmi_build.core.paths import cache_root
from lmi_build.reporting import output
from lmi_build.sources.demo_text import CORPUS

# Bump when anything below changes what is generated: it is part of the directory name and of
# the identity, so an old cache entry is never mistaken for the new recipe.
GENERATOR_VERSION = 1
SEED = 1234
WEIGHTS_FILE = "model.safetensors"
_INIT_STD = 0.02

_LLAMA2_CHAT = (
    "{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set messages = messages[1:] %}{% else %}{% set system = '' %}{% endif %}"
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + (('<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n') if loop.first and system else '')"
    " + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + ' ' + eos_token }}"
    "{% endif %}{% endfor %}"
)
_MISTRAL_CHAT = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% endif %}{% endfor %}"
)
_LLAMA3_CHAT = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim)"
    " + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class DemoRecipe:
    description: str
    config: dict[str, Any]  # config.json minus the token ids, which come from the tokenizer
    special_tokens: tuple[str, ...]  # trained first, so their ids are 0..n-1 in this order
    bos: str
    eos: str
    unk: str | None = None
    add_bos: bool = True
    chat_template: str | None = None
    extra_eos: tuple[str, ...] = ()  # more stop tokens for generation_config.json
    tokenizer_extra: dict[str, Any] = field(default_factory=dict)


_LLAMA_BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 32,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "pretraining_tp": 1,
    "initializer_range": _INIT_STD,
    "tie_word_embeddings": False,
    "use_cache": True,
    "torch_dtype": "float16",
}

_RECIPES: dict[str, DemoRecipe] = {
    "tiny-llama": DemoRecipe(
        description="Llama-2 style, 4 layers, hidden 256, 8 heads (MHA), vocab 1024, ~6 MB fp16",
        config=dict(_LLAMA_BASE),
        special_tokens=("<unk>", "<s>", "</s>"),
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        chat_template=_LLAMA2_CHAT,
    ),
    "tiny-mistral": DemoRecipe(
        description="Mistral style with GQA (8 query heads, 2 KV heads), 4 layers, hidden 256, ~5 MB fp16",
        config={
            **_LLAMA_BASE,
            "architectures": ["MistralForCausalLM"],
            "model_type": "mistral",
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "sliding_window": None,
        },
        special_tokens=("<unk>", "<s>", "</s>"),
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        chat_template=_MISTRAL_CHAT,
    ),
    "tiny-llama3": DemoRecipe(
        description="Llama-3.1 style: GQA (8/4), rope_theta 500000, llama3 rope_scaling, ~5 MB fp16",
        config={
            **_LLAMA_BASE,
            "num_key_value_heads": 4,
            "max_position_embeddings": 8192,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 1024,
            },
        },
        special_tokens=(
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ),
        bos="<|begin_of_text|>",
        eos="<|end_of_text|>",
        chat_template=_LLAMA3_CHAT,
        extra_eos=("<|eot_id|>",),
    ),
    "tiny-gpt2": DemoRecipe(
        description="GPT-2 style, 4 layers, n_embd 256, 8 heads, learned positions, tied embeddings",
        config={
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "n_embd": 256,
            "n_layer": 4,
            "n_head": 8,
            "n_inner": None,
            "n_positions": 1024,
            "n_ctx": 1024,
            "vocab_size": 1024,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-05,
            "initializer_range": _INIT_STD,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "tie_word_embeddings": True,
            "use_cache": True,
            "torch_dtype": "float16",
        },
        special_tokens=("<|endoftext|>",),
        bos="<|endoftext|>",
        eos="<|endoftext|>",
        unk="<|endoftext|>",
        add_bos=False,
    ),
}

DEMO_MODELS: dict[str, str] = {name: recipe.description for name, recipe in _RECIPES.items()}


def _recipe(name: str) -> DemoRecipe:
    if name not in _RECIPES:
        raise SourceError(
            f"unknown demo model 'demo:{name}'",
            hint="choose one of: " + ", ".join(f"demo:{n}" for n in _RECIPES),
        )
    return _RECIPES[name]


def _token_ids(recipe: DemoRecipe) -> dict[str, int]:
    return {token: index for index, token in enumerate(recipe.special_tokens)}


def config_json(name: str) -> dict[str, Any]:
    """The demo model's config.json as plain data (no torch)."""
    recipe = _recipe(name)
    ids = _token_ids(recipe)
    config = dict(recipe.config)
    config["bos_token_id"] = ids[recipe.bos]
    config["eos_token_id"] = ids[recipe.eos]
    return config


def generation_config_json(name: str) -> dict[str, Any]:
    recipe = _recipe(name)
    ids = _token_ids(recipe)
    eos: int | list[int] = ids[recipe.eos]
    if recipe.extra_eos:
        eos = [ids[recipe.eos], *(ids[t] for t in recipe.extra_eos)]
    return {"bos_token_id": ids[recipe.bos], "eos_token_id": eos, "do_sample": False}


def demo_digest(name: str) -> str:
    """Digest of everything that determines the generated files (recipe, corpus, seed, version).

    The same with or without the weights on disk, so a plan and the build that follows agree."""
    recipe = _recipe(name)
    payload = {
        "generator": GENERATOR_VERSION,
        "seed": SEED,
        "config": config_json(name),
        "generation": generation_config_json(name),
        "special_tokens": list(recipe.special_tokens),
        "chat_template": recipe.chat_template,
        "add_bos": recipe.add_bos,
        "corpus": sha256_text(CORPUS),
    }
    return "sha256:" + sha256_text(json.dumps(payload, sort_keys=True))


def demo_revision() -> str:
    return f"generator-v{GENERATOR_VERSION}"


def ensure_demo_model(name: str, *, with_weights: bool) -> Path:
    """Return a directory holding the demo model, generating it into the cache on first use.

    ``with_weights=False`` writes only config.json and generation_config.json (no torch import);
    ``with_weights=True`` also writes the tokenizer and ``model.safetensors``. When the full model
    is already cached it is returned for either purpose."""
    _recipe(name)
    base = cache_root() / "demo"
    full_dir = base / f"{name}-v{GENERATOR_VERSION}"
    if full_dir.is_dir():
        return full_dir
    if not with_weights:
        config_dir = base / f"{name}-v{GENERATOR_VERSION}-config"
        if not config_dir.is_dir():
            _publish_dir(config_dir, lambda tmp: _write_metadata(name, tmp))
        return config_dir
    _publish_dir(full_dir, lambda tmp: _write_full(name, tmp))
    return full_dir


# The files a full demo model has (``_write_full``): what a plan of its config-only copy knows it will have.
DEMO_FILES = ("config.json", "generation_config.json", "special_tokens_map.json", "tokenizer.json",
              "tokenizer_config.json", WEIGHTS_FILE)


def demo_files(path: Path) -> tuple[str, ...]:
    """The files of the demo model at ``path``: its own when it is the full model, else those it will have."""
    if path.name.endswith("-config"):
        return DEMO_FILES
    return tuple(sorted(entry.name for entry in path.iterdir() if entry.is_file()))


def _publish_dir(final: Path, fill: Callable[[Path], None]) -> None:
    """Fill a temp sibling and rename it into place, so a half-written model is never visible.
    If another process won the race, its (identical) result is kept and ours discarded."""
    with staged_directory(final, keep_existing=True) as staging:
        fill(staging)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _write_metadata(name: str, target: Path) -> None:
    _write_json(target / "config.json", config_json(name))
    _write_json(target / "generation_config.json", generation_config_json(name))


def _write_full(name: str, target: Path) -> None:
    # A first use takes half a minute (torch's import, the tokenizer's training): say what it does.
    steps: list[tuple[str, Callable[[str, Path], None]]] = [
        ("training the tokenizer", _write_tokenizer),
        ("writing random weights", _write_weights),
        # Our own config files last: save_pretrained writes its own, which carry version strings.
        ("writing the config", _write_metadata),
    ]
    with output.current().progress(unit="steps") as progress:
        task = progress.add_task(f"generating demo:{name}", total=len(steps)) if progress else None
        for number, (what, write) in enumerate(steps):
            if progress is not None and task is not None:
                progress.update(task, description=f"generating demo:{name}: {what}", completed=number)
            write(name, target)
        if progress is not None and task is not None:
            progress.update(task, description=f"generated demo:{name}", completed=len(steps))


def _write_tokenizer(name: str, target: Path) -> None:
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise MissingDependency.for_module("tokenizers", "convert") from exc

    recipe = _recipe(name)
    vocab_size = int(recipe.config["vocab_size"])
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(recipe.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    ids = _token_ids(recipe)
    for token, expected in ids.items():
        if tokenizer.token_to_id(token) != expected:
            raise RuntimeError(f"demo tokenizer put {token!r} at {tokenizer.token_to_id(token)}, not {expected}")
    if tokenizer.get_vocab_size() > vocab_size:
        raise RuntimeError(f"demo tokenizer has {tokenizer.get_vocab_size()} tokens > vocab_size {vocab_size}")
    if recipe.add_bos:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{recipe.bos} $A",
            pair=f"{recipe.bos} $A {recipe.bos} $B",
            special_tokens=[(recipe.bos, ids[recipe.bos])],
        )
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.save(str(target / "tokenizer.json"))

    special_map: dict[str, Any] = {"bos_token": recipe.bos, "eos_token": recipe.eos}
    if recipe.unk:
        special_map["unk_token"] = recipe.unk
    tokenizer_config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(
            recipe.config.get("max_position_embeddings") or recipe.config.get("n_positions") or 2048
        ),
        "clean_up_tokenization_spaces": False,
        **special_map,
        **recipe.tokenizer_extra,
    }
    if recipe.chat_template:
        tokenizer_config["chat_template"] = recipe.chat_template
    _write_json(target / "tokenizer_config.json", tokenizer_config)
    _write_json(target / "special_tokens_map.json", special_map)


def _write_weights(name: str, target: Path) -> None:
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise MissingDependency.for_module("torch/transformers", "convert") from exc

    config_data = config_json(name)
    kwargs = {k: v for k, v in config_data.items() if k not in ("model_type", "torch_dtype")}
    config = AutoConfig.for_model(config_data["model_type"], **kwargs)
    model = AutoModelForCausalLM.from_config(config)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        # named_parameters() yields a tied tensor once, so tied embeddings stay tied.
        for param_name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
            if param.ndim == 1 and param_name.endswith("bias"):
                param.zero_()
            elif param.ndim == 1:
                param.fill_(1.0)  # norm scales
            else:
                values = torch.randn(param.shape, generator=generator, dtype=torch.float32)
                param.copy_(values * _INIT_STD)
    model = model.to(torch.float16)
    model.save_pretrained(str(target), safe_serialization=True)
    make_readable(target, keep=set())  # safetensors writes 0600; the cached model is read by serving users too
    produced = sorted(p.name for p in target.glob("*.safetensors"))
    if produced != [WEIGHTS_FILE]:
        raise RuntimeError(f"demo model saved unexpected weight files: {produced}")
