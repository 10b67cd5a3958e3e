"""Independent numpy forward passes with Hugging Face semantics, for checking llama.cpp.

- `hf_llama_logits`, llama/mistral/qwen2/qwen3/smollm3/granite: RMSNorm, rotate-half RoPE (none on SmolLM3's
  `no_rope_layers`), grouped-query attention with a causal mask, SwiGLU MLP, and Granite's four multipliers;
  phi3 too (fused qkv and gate-up projections, partial rotary, LongRoPE's short factors and attention factor).
  It reads the exported safetensors through the `safetensors` package, not through our
  converter's reader.
- `hf_gemma3_logits`, Gemma 3's text model: scaled embeddings, (1 + w) norms around attention and the MLP,
  q/k norms, sliding-window layers with a local RoPE base, GELU-tanh, the final logit softcap.
- `bert_sentence_embedding`, BERT as sentence-transformers runs it (all-MiniLM-L6-v2): word, position and
  token-type embeddings, post-norm layers of bidirectional attention and an erf GELU MLP, mean pooling over
  the attention mask, L2 normalisation. It takes the F32 weights as `safetensors.numpy` loads them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def hf_llama_logits(model_dir: Path, ids: list[int]) -> np.ndarray:
    """Logits (len(ids), vocab) of a llama checkpoint in float32 (F16/F32 safetensors)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    w = {k: v.astype(np.float32) for f in sorted(model_dir.glob("*.safetensors")) for k, v in load_file(f).items()}
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    zero = np.float32(0.0)
    eps = cfg["rms_norm_eps"]
    t = len(ids)

    rot = int(d * cfg.get("partial_rotary_factor", 1.0))  # Phi-4-mini rotates the first 3/4 of each head
    inv_freq = 1.0 / (cfg["rope_theta"] ** (np.arange(0, rot, 2, dtype=np.float64) / rot))
    scaling, mscale = cfg.get("rope_scaling") or {}, 1.0
    if scaling.get("rope_type", scaling.get("type")) == "longrope":  # a short prompt: the short factors
        orig = cfg["original_max_position_embeddings"]
        inv_freq = inv_freq / np.asarray(scaling["short_factor"], dtype=np.float64)
        mscale = math.sqrt(1 + math.log(cfg["max_position_embeddings"] / orig) / math.log(orig))
    angles = np.outer(np.arange(t), inv_freq)
    emb = np.concatenate([angles, angles], axis=-1)
    cos = (np.cos(emb) * mscale).astype(np.float32)[:, None, :]
    sin = (np.sin(emb) * mscale).astype(np.float32)[:, None, :]
    mask = np.triu(np.full((t, t), -np.inf, dtype=np.float32), k=1)

    # Granite scales the embeddings, the attention scores, each residual branch and the logits.
    scale = cfg.get("attention_multiplier", 1.0 / np.sqrt(d))
    residual = cfg.get("residual_multiplier", 1.0)
    rotated = cfg.get("no_rope_layers", [1] * cfg["num_hidden_layers"])  # SmolLM3: 0 = no RoPE
    x = w["model.embed_tokens.weight"][ids] * cfg.get("embedding_multiplier", 1.0)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        # qwen2 adds q/k/v biases; qwen3 normalises each head of q and k before RoPE.
        if p + "self_attn.qkv_proj.weight" in w:  # phi3: q, k and v in one projection
            qkv = w[p + "self_attn.qkv_proj.weight"]
            for name, part in zip(("q", "k", "v"), np.split(qkv, [n_head * d, (n_head + n_kv) * d]), strict=True):
                w[p + f"self_attn.{name}_proj.weight"] = part
        q = (h @ w[p + "self_attn.q_proj.weight"].T + w.get(p + "self_attn.q_proj.bias", zero)).reshape(t, n_head, d)
        k = (h @ w[p + "self_attn.k_proj.weight"].T + w.get(p + "self_attn.k_proj.bias", zero)).reshape(t, n_kv, d)
        v = (h @ w[p + "self_attn.v_proj.weight"].T + w.get(p + "self_attn.v_proj.bias", zero)).reshape(t, n_kv, d)
        if p + "self_attn.q_norm.weight" in w:
            q = _rms(q, w[p + "self_attn.q_norm.weight"], eps)
            k = _rms(k, w[p + "self_attn.k_norm.weight"], eps)
        if rotated[i]:
            q = np.concatenate([q[..., :rot] * cos + _rotate_half(q[..., :rot]) * sin, q[..., rot:]], axis=-1)
            k = np.concatenate([k[..., :rot] * cos + _rotate_half(k[..., :rot]) * sin, k[..., rot:]], axis=-1)
        k = np.repeat(k, n_head // n_kv, axis=1)
        v = np.repeat(v, n_head // n_kv, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) * np.float32(scale) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", scores, v).reshape(t, n_head * d)
        x = x + (attn @ w[p + "self_attn.o_proj.weight"].T) * residual
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        if p + "mlp.gate_up_proj.weight" in w:  # phi3: the gate's rows, then the up projection's
            w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"] = np.split(w[p + "mlp.gate_up_proj.weight"], 2)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + ((gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T) * residual
    x = _rms(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return (x @ head.T) / cfg.get("logits_scaling", 1.0)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """Hugging Face's "gelu_pytorch_tanh", Gemma's activation."""
    return 0.5 * x * (1.0 + np.tanh(np.float32(math.sqrt(2.0 / math.pi)) * (x + np.float32(0.044715) * x**3)))


def _rope(x: np.ndarray, base: float, factor: float = 1.0) -> np.ndarray:
    """Rotate-half RoPE over the whole head at positions 0..t-1 (a linear `factor` divides the positions)."""
    t, d = x.shape[0], x.shape[-1]
    inv_freq = 1.0 / (base ** (np.arange(0, d, 2, dtype=np.float64) / d))
    angles = np.outer(np.arange(t) / factor, inv_freq)
    emb = np.concatenate([angles, angles], axis=-1)
    cos, sin = np.cos(emb).astype(np.float32)[:, None, :], np.sin(emb).astype(np.float32)[:, None, :]
    return x * cos + _rotate_half(x) * sin


def hf_gemma3_logits(model_dir: Path, ids: list[int]) -> np.ndarray:
    """Logits (len(ids), vocab) of a Gemma 3 text checkpoint, as Gemma3ForCausalLM computes them: embeddings
    times sqrt(hidden), (1 + w) RMSNorms before and after attention and the MLP, q/k norms, query scale
    query_pre_attn_scalar^-1/2, sliding-window layers (each 6th global) with their own RoPE base, a GELU-tanh
    gated MLP, tied output and the final logit softcap if set."""
    cfg = json.loads((model_dir / "config.json").read_text())
    w = {k: v.astype(np.float32) for f in sorted(model_dir.glob("*.safetensors")) for k, v in load_file(f).items()}
    n_head, n_kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, t = cfg["rms_norm_eps"], len(ids)

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        return _rms(x, 1.0 + w[name], eps)

    pos = np.arange(t)
    causal = pos[None, :] > pos[:, None]
    local = causal | (pos[:, None] - pos[None, :] >= cfg["sliding_window"])
    factor = float((cfg.get("rope_scaling") or {}).get("factor", 1.0))
    x = w["model.embed_tokens.weight"][ids] * np.float32(math.sqrt(cfg["hidden_size"]))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        sliding = cfg["layer_types"][i] == "sliding_attention"
        h = norm(x, p + "input_layernorm.weight")
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(t, n_head, d)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(t, n_kv, d)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, n_kv, d)
        q, k = norm(q, p + "self_attn.q_norm.weight"), norm(k, p + "self_attn.k_norm.weight")
        base = cfg["rope_local_base_freq"] if sliding else cfg["rope_theta"]
        q, k = _rope(q, base, 1.0 if sliding else factor), _rope(k, base, 1.0 if sliding else factor)
        k, v = np.repeat(k, n_head // n_kv, axis=1), np.repeat(v, n_head // n_kv, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) * np.float32(cfg["query_pre_attn_scalar"] ** -0.5)
        scores = np.where(local if sliding else causal, -np.inf, scores)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", scores, v).reshape(t, n_head * d) @ w[p + "self_attn.o_proj.weight"].T
        x = x + norm(attn, p + "post_attention_layernorm.weight")
        h = norm(x, p + "pre_feedforward_layernorm.weight")
        mlp = (_gelu_tanh(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T))
        x = x + norm(mlp @ w[p + "mlp.down_proj.weight"].T, p + "post_feedforward_layernorm.weight")
    logits = norm(x, "model.norm.weight") @ w["model.embed_tokens.weight"].T
    cap = cfg.get("final_logit_softcapping")
    return logits if cap is None else np.tanh(logits / cap) * cap


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x: np.ndarray) -> np.ndarray:
    """Hugging Face's "gelu": the exact one, with erf (llama.cpp computes the tanh approximation)."""
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))).astype(np.float32)


def bert_sentence_embedding(w: dict[str, np.ndarray], config: dict[str, Any], ids: list[int]) -> np.ndarray:
    """The L2-normalised mean-pooled embedding (hidden,) of one sequence of token ids ([CLS] ... [SEP])."""
    t, n_head = len(ids), config["num_attention_heads"]
    d = config["hidden_size"] // n_head
    eps = config["layer_norm_eps"]
    mask = np.ones(t, dtype=np.float32)  # one unpadded sequence: every token attends and is pooled
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:t]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def dense(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q = dense(x, "attention.self.query").reshape(t, n_head, d)
        k = dense(x, "attention.self.key").reshape(t, n_head, d)
        v = dense(x, "attention.self.value").reshape(t, n_head, d)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(d) + (1.0 - mask) * np.float32(-1e9)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", scores, v).reshape(t, n_head * d)
        norm = p + "attention.output.LayerNorm."
        x = _layer_norm(x + dense(attn, "attention.output.dense"), w[norm + "weight"], w[norm + "bias"], eps)
        ffn = dense(_gelu(dense(x, "intermediate.dense")), "output.dense")
        x = _layer_norm(x + ffn, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    pooled = (x * mask[:, None]).sum(axis=0) / mask.sum()
    return pooled / np.linalg.norm(pooled)
