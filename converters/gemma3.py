"""Gemma 3 (text) as llama.cpp's `gemma3` reads it: what differs from the llama-like families.

llama.cpp computes most of Gemma 3's differences itself (the embedding scaled by sqrt(hidden), GELU-tanh,
the pre/post attention and FFN norms, q/k norms, NEOX RoPE, tied output). What the checkpoint must bring:
the norm weights with Gemma's `1 + w` already added, the sliding window, and a config llama.cpp's fixed
choices agree with: every 6th layer global, the local layers' RoPE base 10000, and an attention scale of
1/sqrt(head_dim) (1/sqrt(hidden / heads) for the 62-layer 27B). A config that differs is refused, since the
file would load and answer wrongly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf

from runtime.errors import UserError

ARCHS = ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")
SWA_PATTERN = 6  # llama.cpp: layers il % 6 < 5 slide, the 6th attends globally
LOCAL_ROPE_BASE = 10000.0  # llama.cpp's rope_freq_base_train_swa for gemma3
NORM_SHIFT = 1.0  # Gemma3RMSNorm multiplies by (1 + w); llama.cpp's norm by w
# Gemma3TextConfig's defaults, for configs that leave them out (Gemma 3 4B's text_config gives only its sizes,
# layers, rope_scaling and sliding_window).
_DEFAULTS = {"head_dim": 256, "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 131072,
             "sliding_window": 4096, "rope_local_base_freq": LOCAL_ROPE_BASE, "num_attention_heads": 8,
             "num_key_value_heads": 4, "vocab_size": 262_208, "query_pre_attn_scalar": 256}
_VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


def is_gemma3(config: dict[str, Any]) -> bool:
    return any(a in ARCHS for a in config.get("architectures") or [])


def text_config(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The language model's settings: Gemma3ForConditionalGeneration nests them in `text_config`."""
    text = config.get("text_config")
    if text is None:
        merged = dict(config)
    elif isinstance(text, dict):
        merged = {**text, "architectures": config["architectures"]}
    else:
        raise UserError(f"{path}: 'text_config' must be an object, not {text!r}")
    for key, value in _DEFAULTS.items():
        if merged.get(key) is None:
            merged[key] = value
    merged.setdefault("tie_word_embeddings", True)
    return merged


def text_tensor_name(name: str) -> str | None:
    """The text model's name for a checkpoint tensor (None for the vision tower and projector, left out)."""
    if name.startswith(_VISION_PREFIXES):
        return None
    if name.startswith("model.language_model."):  # transformers >= 4.52
        return "model." + name[len("model.language_model."):]
    if name.startswith("language_model."):  # earlier Gemma3ForConditionalGeneration exports
        return name[len("language_model."):]
    return name


def sliding_layers(config: dict[str, Any]) -> list[bool]:
    """Which layers slide, from `layer_types` or the older `sliding_window_pattern`."""
    n = config["num_hidden_layers"]
    types = config.get("layer_types")
    if isinstance(types, list):
        return [t == "sliding_attention" for t in types]
    pattern = config.get("sliding_window_pattern", SWA_PATTERN)
    if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern < 1:
        return []  # check() names the value
    return [(i + 1) % pattern != 0 for i in range(n)]


def check_gemma3_config(config: dict[str, Any], path: Path) -> None:
    """Refuse a Gemma 3 config that llama.cpp's gemma3 would run differently from the original."""
    n, hidden, heads = config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"]
    want = [(i + 1) % SWA_PATTERN != 0 for i in range(n)]
    if sliding_layers(config) != want:
        found = config.get("layer_types", config.get("sliding_window_pattern"))
        raise UserError(f"{path}: Gemma 3 layers {found!r} are not every {SWA_PATTERN}th one global, the only "
                        "pattern llama.cpp's gemma3 runs")
    window = config["sliding_window"]
    if not isinstance(window, int) or isinstance(window, bool) or not 1 <= window < 2**31:
        raise UserError(f"{path}: 'sliding_window' is {window!r}; it must be a whole number from 1")
    if config["rope_local_base_freq"] != LOCAL_ROPE_BASE:
        raise UserError(f"{path}: 'rope_local_base_freq' is {config['rope_local_base_freq']!r}; llama.cpp's "
                        f"gemma3 runs its sliding layers at {LOCAL_ROPE_BASE:g} only")
    scalar = config.get("query_pre_attn_scalar", config["head_dim"])
    runs = hidden / heads if n == 62 else config["head_dim"]  # llama.cpp tells the 27B by its layer count
    if scalar != runs:
        raise UserError(f"{path}: 'query_pre_attn_scalar' {scalar!r} differs from the {runs:g} that llama.cpp's "
                        "gemma3 scales queries by for this size")
    if config.get("attn_logit_softcapping") is not None:
        raise UserError(f"{path}: 'attn_logit_softcapping' is set; llama.cpp's gemma3 has none")
    cap = config.get("final_logit_softcapping")
    if cap is not None and not (isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0):
        raise UserError(f"{path}: 'final_logit_softcapping' is {cap!r}; it must be a positive number")
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) not in (None, "default", "linear"):
        raise UserError(f"{path}: Gemma 3 rope_scaling {scaling!r} is not supported (linear only)")


def add_hparams(w: gguf.GGUFWriter, config: dict[str, Any]) -> None:
    """The keys gemma3 adds to the common ones (a linear rope scale, written there, applies to global layers)."""
    w.add_sliding_window(int(config["sliding_window"]))
    if config.get("final_logit_softcapping") is not None:
        w.add_final_logit_softcapping(float(config["final_logit_softcapping"]))
