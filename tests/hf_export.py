"""Test helper: export a llama GGUF as a Hugging Face checkpoint directory.

Written independently of the converter (its own name table, its own inverse Q/K permutation), so a round
trip through both is not circular; tests also check llama.cpp against a numpy forward pass over the export.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import save_file

PRE_TOKENIZERS = {
    "smollm": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    }
}

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _field(reader: gguf.GGUFReader, key: str):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def unpermute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF llama Q/K rows (interleaved rotary pairs) back to HF's rotate-half order."""
    head_dim = w.shape[0] // n_head
    return w.reshape(n_head, head_dim // 2, 2, w.shape[1]).transpose(0, 2, 1, 3).reshape(w.shape)


def _hf_tensors(reader: gguf.GGUFReader, n_head: int, n_head_kv: int) -> dict[str, np.ndarray]:
    out = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        elif parts[0] == "blk":
            kind = parts[2]
            if kind == "attn_q":
                x = unpermute_rotary(x, n_head)
            elif kind == "attn_k":
                x = unpermute_rotary(x, n_head_kv)
            name = f"model.layers.{parts[1]}.{_LAYER_NAMES[kind]}.weight"
        else:
            raise ValueError(f"cannot export tensor {t.name}")
        out[name] = x
    return out


def write_safetensors_bf16(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """safetensors cannot write BF16 from numpy; the layout is simple enough to write by hand here."""
    header, blobs, offset = {}, [], 0
    for name, x in tensors.items():
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")  # round to nearest even
        blob = bf16.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(x.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def export_to_hf(
    gguf_path: Path,
    out: Path,
    dtype: str = "F16",
    shards: int = 1,
    tensors_hook=None,
) -> Path:
    """Write config.json, tokenizer.json, tokenizer_config.json and safetensors for a llama GGUF."""
    reader = gguf.GGUFReader(gguf_path)
    arch = _field(reader, "general.architecture")
    assert arch == "llama", arch
    n_head = int(_field(reader, "llama.attention.head_count"))
    n_head_kv = int(_field(reader, "llama.attention.head_count_kv"))
    tensors = _hf_tensors(reader, n_head, n_head_kv)
    if tensors_hook is not None:
        tensors_hook(tensors)
    tokens = _field(reader, "tokenizer.ggml.tokens")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": int(_field(reader, "llama.embedding_length")),
        "intermediate_size": int(_field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": int(_field(reader, "llama.block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_head_kv,
        "rms_norm_eps": float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(_field(reader, "llama.rope.freq_base")),
        "max_position_embeddings": int(_field(reader, "llama.context_length")),
        "vocab_size": len(tokens),
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "torch_dtype": {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}[dtype],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    _write_tokenizer(reader, out, tokens)
    _write_weights(tensors, out, dtype, shards)
    return out


def _write_tokenizer(reader: gguf.GGUFReader, out: Path, tokens: list[str]) -> None:
    types = _field(reader, "tokenizer.ggml.token_type")
    merges = _field(reader, "tokenizer.ggml.merges")
    pre = _field(reader, "tokenizer.ggml.pre")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    added = [
        {
            "id": i,
            "content": tokens[i],
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, kind in enumerate(types)
        if kind == gguf.TokenType.CONTROL
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))

    def tok(key: str) -> str | None:
        i = _field(reader, key)
        return None if i is None else tokens[int(i)]

    config = {
        "bos_token": tok("tokenizer.ggml.bos_token_id"),
        "eos_token": tok("tokenizer.ggml.eos_token_id"),
        "unk_token": tok("tokenizer.ggml.unknown_token_id"),
        "pad_token": tok("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token")),
        "chat_template": _field(reader, "tokenizer.chat_template"),
        "model_max_length": 8192,
        "tokenizer_class": "GPT2Tokenizer",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))


def _write_weights(tensors: dict[str, np.ndarray], out: Path, dtype: str, shards: int) -> None:
    names = list(tensors)
    groups = [names[i::shards] for i in range(shards)]
    weight_map = {}
    for i, group in enumerate(groups):
        fname = "model.safetensors" if shards == 1 else f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in group}
        if dtype == "BF16":
            write_safetensors_bf16(out / fname, part)
        else:
            np_dtype = np.float16 if dtype == "F16" else np.float32
            save_file({n: np.ascontiguousarray(x.astype(np_dtype)) for n, x in part.items()}, str(out / fname))
        weight_map.update(dict.fromkeys(group, fname))
    if shards > 1:
        (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


QWEN2_PRE = {
    "type": "Sequence",
    "pretokenizers": [
        {
            "type": "Split",
            "pattern": {
                "Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+"
            },
            "behavior": "Isolated",
            "invert": False,
        },
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    ],
}


def llama_to_qwen(src: Path, out: Path, arch: str, seed: int = 7) -> Path:
    """Turn an exported llama checkpoint into a qwen2 (q/k/v biases) or qwen3 (q/k norms, head_dim)
    checkpoint with the same tokens, adding those extra tensors with random values."""
    from safetensors.numpy import load_file

    rng = np.random.default_rng(seed)
    out.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"] = [arch]
    cfg["model_type"] = {"Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}[arch]
    tensors = {k: v for f in sorted(src.glob("*.safetensors")) for k, v in load_file(f).items()}
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}.self_attn."
        if arch == "Qwen2ForCausalLM":
            for proj in ("q_proj", "k_proj", "v_proj"):
                rows = tensors[p + proj + ".weight"].shape[0]
                tensors[p + proj + ".bias"] = (0.1 * rng.standard_normal(rows)).astype(np.float16)
        else:
            cfg["head_dim"] = head_dim
            for norm in ("q_norm", "k_norm"):
                tensors[p + norm + ".weight"] = (1 + 0.1 * rng.standard_normal(head_dim)).astype(np.float16)
    (out / "config.json").write_text(json.dumps(cfg))
    tok = json.loads((src / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = QWEN2_PRE
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text((src / "tokenizer_config.json").read_text())
    save_file(tensors, str(out / "model.safetensors"))
    return out


# Granite's four scales, distinct from 1 so that a scale that is lost or misplaced shows in the logits.
GRANITE_SCALES = {"embedding_multiplier": 3.0, "residual_multiplier": 0.5, "attention_multiplier": 0.09,
                  "logits_scaling": 2.0}


def llama_to_family(src: Path, out: Path, arch: str) -> Path:
    """Turn an exported llama checkpoint into one of a family whose tensors are llama's: Mistral (a sliding
    window no shorter than the context), SmolLM3 (every fourth layer without RoPE) or Granite (its scales)."""
    import shutil

    shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["architectures"] = [arch]
    if arch == "MistralForCausalLM":
        cfg |= {"model_type": "mistral", "sliding_window": cfg["max_position_embeddings"]}
    elif arch == "SmolLM3ForCausalLM":
        n = cfg["num_hidden_layers"]
        cfg |= {"model_type": "smollm3", "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(n)],
                "no_rope_layer_interval": 4}
    elif arch == "GraniteForCausalLM":
        cfg |= {"model_type": "granite", **GRANITE_SCALES}
    elif arch == "Phi3ForCausalLM":
        _to_phi3(out, cfg)
    elif arch == "Gemma3ForCausalLM":
        _to_gemma3(out, cfg)
    else:
        raise ValueError(arch)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def _to_phi3(out: Path, cfg: dict) -> None:
    """Phi-4-mini's layout: q, k and v fused, gate and up fused, 3/4 of each head rotated, LongRoPE."""
    from safetensors.numpy import load_file

    files = sorted(out.glob("*.safetensors"))
    tensors = {k: v for f in files for k, v in load_file(f).items()}
    for f in files:
        f.unlink()
    (out / "model.safetensors.index.json").unlink(missing_ok=True)
    for i in range(cfg["num_hidden_layers"]):
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        tensors[a + "qkv_proj.weight"] = np.concatenate([tensors.pop(a + f"{x}_proj.weight") for x in "qkv"])
        tensors[m + "gate_up_proj.weight"] = np.concatenate([tensors.pop(m + "gate_proj.weight"),
                                                             tensors.pop(m + "up_proj.weight")])
    half = int(cfg["hidden_size"] // cfg["num_attention_heads"] * 0.75) // 2
    rng = np.random.default_rng(5)
    cfg |= {"model_type": "phi3", "partial_rotary_factor": 0.75, "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096,
            "rope_scaling": {"type": "longrope", "long_factor": (1 + 3 * rng.random(half)).tolist(),
                             "short_factor": (1 + 2 * rng.random(half)).tolist()}}
    save_file(tensors, str(out / "model.safetensors"))


# Gemma 3's settings on a micro checkpoint: a window shorter than the test prompts, so sliding shows; a final
# softcap near the logits' size, so it bends them.
GEMMA3_WINDOW, GEMMA3_SOFTCAP = 4, 8.0


def _to_gemma3(out: Path, cfg: dict) -> None:
    """Gemma 3's text layout: norms stored as w for (1 + w), a second norm after attention and after the MLP,
    q/k norms, tied output, sliding layers (each 6th global) with their own RoPE base."""
    from safetensors.numpy import load_file

    files = sorted(out.glob("*.safetensors"))
    tensors = {k: v for f in files for k, v in load_file(f).items()}
    for f in files:
        f.unlink()
    (out / "model.safetensors.index.json").unlink(missing_ok=True)
    rng = np.random.default_rng(11)
    n, hidden = cfg["num_hidden_layers"], cfg["hidden_size"]
    head_dim = hidden // cfg["num_attention_heads"]

    def small(size: int) -> np.ndarray:  # stored w, applied as 1 + w
        return (0.2 * rng.standard_normal(size)).astype(np.float16)

    tensors.pop("lm_head.weight", None)
    tensors["model.norm.weight"] = (tensors["model.norm.weight"].astype(np.float32) - 1).astype(np.float16)
    for i in range(n):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = (tensors[p + "input_layernorm.weight"] - 1).astype(np.float16)
        tensors[p + "pre_feedforward_layernorm.weight"] = (tensors.pop(p + "post_attention_layernorm.weight")
                                                           - 1).astype(np.float16)
        tensors[p + "post_attention_layernorm.weight"] = small(hidden)
        tensors[p + "post_feedforward_layernorm.weight"] = small(hidden)
        tensors[p + "self_attn.q_norm.weight"] = small(head_dim)
        tensors[p + "self_attn.k_norm.weight"] = small(head_dim)
    cfg |= {"model_type": "gemma3_text", "head_dim": head_dim, "query_pre_attn_scalar": head_dim,
            "hidden_activation": "gelu_pytorch_tanh", "sliding_window": GEMMA3_WINDOW, "rope_theta": 1_000_000.0,
            "rope_local_base_freq": 10000.0, "final_logit_softcapping": GEMMA3_SOFTCAP,
            "attn_logit_softcapping": None, "tie_word_embeddings": True,
            "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]}
    save_file(tensors, str(out / "model.safetensors"))
