"""Check a written tier: its file type and tensor types are what the tier promises.

K-quants need rows divisible by 256; llama.cpp then falls back to other types per tensor. Those are
legitimate, and counted, so `specquant list` can say how much of a q4_k_m tier really is Q4_K.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from converters.gguf_to_f16 import ArrayLength, check_layout
from runtime.errors import SpecQuantError

# tier -> (general.file_type, intended matrix types, fallback matrix types llama.cpp may choose)
TIER_TYPES: dict[str, tuple[int, frozenset[str], frozenset[str]]] = {
    "f16": (1, frozenset({"F16"}), frozenset()),
    "q8_0": (7, frozenset({"Q8_0"}), frozenset()),
    "q4_k_m": (15, frozenset({"Q4_K", "Q5_K", "Q6_K"}), frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"})),
    "q3_k_m": (12, frozenset({"Q3_K", "Q4_K", "Q5_K", "Q6_K"}), frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"})),
    "q2_k": (10, frozenset({"Q2_K", "Q3_K", "Q4_K", "Q6_K"}), frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"})),
}


@dataclass(frozen=True)
class TierSummary:
    tensor_types: dict[str, int]
    fallbacks: int
    hparams: dict[str, int]


def hparams_from_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, int] | None:
    """The same shape facts from the planned tensors alone, before any tier is written (for convert's
    memory pre-check); None when the names are not llama.cpp's. Only n_head_kv x head_dim counts for the
    KV cache, so the key width stands for both."""
    embd, k = shapes.get("token_embd.weight"), shapes.get("blk.0.attn_k.weight")
    if not embd or not k or len(embd) != 2 or len(k) != 2:
        return None
    n_embd, n_vocab = min(embd), max(embd)
    blocks = {int(name.split(".")[1]) for name in shapes if name.startswith("blk.") and name.split(".")[1].isdigit()}
    kv = k[0] if k[1] == n_embd else k[1]
    return {"n_layer": len(blocks), "n_embd": n_embd, "n_head_kv": 1, "head_dim": kv, "n_vocab": n_vocab}


def read_hparams(metadata: dict[str, Any]) -> dict[str, int]:
    """The shape facts placement needs, from GGUF metadata (`check_layout`'s)."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise SpecQuantError("GGUF metadata lacks general.architecture")

    def get(key: str, default: int | None = None) -> int:
        value = metadata.get(f"{arch}.{key}")
        if value is None:
            if default is None:
                raise SpecQuantError(f"GGUF metadata lacks {arch}.{key}")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecQuantError(f"GGUF metadata {arch}.{key} is not a number")
        return int(value)

    n_head = get("attention.head_count")
    n_embd = get("embedding_length")
    tokens = metadata.get("tokenizer.ggml.tokens")
    return {
        "n_layer": get("block_count"),
        "n_embd": n_embd,
        "n_head": n_head,
        "n_head_kv": get("attention.head_count_kv", n_head),
        "head_dim": get("attention.key_length", n_embd // n_head),
        "n_vocab": get("vocab_size", tokens.n if isinstance(tokens, ArrayLength) else 0),
        "n_ctx_train": get("context_length", 4096),
    }


def summarize_tier(path: Path, tier: str) -> TierSummary:
    """Histogram of tensor types; raises SpecQuantError when the file is not the tier it claims to be."""
    ftype, intended, fallback = TIER_TYPES[tier]
    layout = check_layout(path)
    got_ftype = layout.metadata.get("general.file_type")
    if got_ftype != ftype:
        raise SpecQuantError(f"{path}: file type {got_ftype}, expected {ftype} for {tier}")
    histogram: Counter[str] = Counter()
    fallbacks = 0
    for t in layout.tensors:
        kind = t.type.name
        histogram[kind] += 1
        is_matrix = sum(1 for d in t.shape if d > 1) >= 2
        if not is_matrix:
            if kind not in ("F32", "F16"):
                raise SpecQuantError(f"{path}: vector tensor {t.name} is {kind}, expected F32")
        elif kind in fallback:
            fallbacks += 1
        elif kind not in intended:
            raise SpecQuantError(f"{path}: tensor {t.name} is {kind}, not a {tier} type")
    if not any(histogram[k] for k in intended):
        raise SpecQuantError(f"{path}: no tensor of the {tier} types")
    return TierSummary(dict(sorted(histogram.items())), fallbacks, read_hparams(layout.metadata))
