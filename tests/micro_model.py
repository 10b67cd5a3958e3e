"""Micro llama models for tests: random weights from a fixed seed, the demo model's tokenizer.

They load in milliseconds and their tiers disagree often, so rejection paths really run.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

# Tokenizer keys copied from the demo model, so micro models tokenize real text.
_TOKENIZER_KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
)


@dataclass(frozen=True)
class MicroSpec:
    n_layer: int = 2
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 512
    seed: int = 1234
    context_length: int = 2048


@functools.lru_cache(maxsize=4)
def tokenizer_metadata(demo_gguf: Path) -> tuple[tuple[str, object, gguf.GGUFValueType, Any], ...]:
    """The demo's tokenizer fields, read once per run: gguf's reader takes 4 s over its 49,152 tokens and merges,
    and every micro model copies them (callers build new lists; the values are never changed in place)."""
    reader = gguf.GGUFReader(demo_gguf)
    out = []
    for key in _TOKENIZER_KEYS:
        field = reader.fields[key]
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        contents = field.contents()
        out.append((key, tuple(contents) if isinstance(contents, list) else contents, kind, sub))
    return tuple(out)


def write_micro_gguf(
    path: Path,
    demo_gguf: Path,
    spec: MicroSpec = MicroSpec(),
    token_texts: dict[int, str] | None = None,
    token_types: dict[int, int] | None = None,
    chat_template: str | None = None,
) -> Path:
    """Write an F16 llama GGUF with random weights (std 0.02, like a fresh init, but scaled up so that
    logits are not flat). `token_texts` replaces the text of some vocabulary entries, `token_types` their
    types (gguf.TokenType), `chat_template` the demo's template."""
    rng = np.random.default_rng(spec.seed)
    meta = tokenizer_metadata(demo_gguf)
    changes = {"tokenizer.ggml.tokens": token_texts or {}, "tokenizer.ggml.token_type": token_types or {}}
    meta = [
        (k, [changes[k].get(i, t) for i, t in enumerate(v)] if changes.get(k) else v, kind, sub)
        for k, v, kind, sub in meta
    ]
    if chat_template is not None:
        meta = [(k, chat_template if k == "tokenizer.chat_template" else v, kind, sub) for k, v, kind, sub in meta]
    n_vocab = len(next(v for k, v, _, _ in meta if k == "tokenizer.ggml.tokens"))
    head_dim = spec.n_embd // spec.n_head
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("micro")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(spec.context_length)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(n_vocab)
    for key, value, kind, sub in meta:
        w.add_key_value(key, value, kind, sub_type=sub)

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float16)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    s = 1.0 / np.sqrt(spec.n_embd)
    w.add_tensor("token_embd.weight", mat(n_vocab, spec.n_embd, 1.0))
    for i in range(spec.n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm(spec.n_embd))
        w.add_tensor(f"blk.{i}.attn_q.weight", mat(spec.n_embd, spec.n_embd, s))
        w.add_tensor(f"blk.{i}.attn_k.weight", mat(spec.n_head_kv * head_dim, spec.n_embd, s))
        w.add_tensor(f"blk.{i}.attn_v.weight", mat(spec.n_head_kv * head_dim, spec.n_embd, s))
        w.add_tensor(f"blk.{i}.attn_output.weight", mat(spec.n_embd, spec.n_embd, s))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", norm(spec.n_embd))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(spec.n_ff, spec.n_embd, s))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(spec.n_ff, spec.n_embd, s))
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(spec.n_embd, spec.n_ff, 1.0 / np.sqrt(spec.n_ff)))
    w.add_tensor("output_norm.weight", norm(spec.n_embd))
    w.add_tensor("output.weight", mat(n_vocab, spec.n_embd, 4.0 * s))
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
