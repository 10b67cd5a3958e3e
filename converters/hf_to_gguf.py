"""A Hugging Face checkpoint directory (safetensors) into an F16 GGUF, with numpy + gguf only.

Supported: llama (SmolLM/SmolLM2, Llama 3.x), Mistral (as llama.cpp reads it: llama), qwen2/qwen2.5, qwen3,
SmolLM3 (llama with every fourth layer unrotated) and Granite 3.x (llama with four scales), all with byte-level
BPE tokenizers; Phi-3/Phi-4-mini (`phi3`: fused QKV and gate-up projections, partial rotary, LongRoPE); and
Gemma 3's text model (`gemma3`, see converters/gemma3.py).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from converters import gemma3
from converters.gguf_stream import F16Plan, PlannedTensor, RangeStats, row_blocks, target_dtype
from converters.hf_tokenizer import add_tokenizer, load_vocab
from converters.safetensors_reader import SafeTensor, read_checkpoint
from runtime.errors import UserError


@dataclass(frozen=True)
class ArchSpec:
    arch: gguf.MODEL_ARCH
    permute_qk: bool  # llama's GGUF RoPE is interleaved; HF's is rotate-half


ARCHITECTURES = {
    "LlamaForCausalLM": ArchSpec(gguf.MODEL_ARCH.LLAMA, permute_qk=True),
    "Qwen2ForCausalLM": ArchSpec(gguf.MODEL_ARCH.QWEN2, permute_qk=False),
    "Qwen3ForCausalLM": ArchSpec(gguf.MODEL_ARCH.QWEN3, permute_qk=False),
    "MistralForCausalLM": ArchSpec(gguf.MODEL_ARCH.LLAMA, permute_qk=True),  # llama.cpp's convert does the same
    "SmolLM3ForCausalLM": ArchSpec(gguf.MODEL_ARCH.SMOLLM3, permute_qk=True),
    "GraniteForCausalLM": ArchSpec(gguf.MODEL_ARCH.GRANITE, permute_qk=True),
    "Phi3ForCausalLM": ArchSpec(gguf.MODEL_ARCH.PHI3, permute_qk=False),  # NEOX RoPE, as HF's rotate-half
    **dict.fromkeys(gemma3.ARCHS, ArchSpec(gguf.MODEL_ARCH.GEMMA3, permute_qk=False)),  # NEOX RoPE
}
_FUSED_QKV = "self_attn.qkv_proj.weight"  # Phi-3: q, k and v rows in one tensor
# Granite's multipliers (config.json) and the GGUF keys llama.cpp reads them from.
_GRANITE_SCALES = {
    "embedding_multiplier": "add_embedding_scale",
    "residual_multiplier": "add_residual_scale",
    "attention_multiplier": "add_attention_scale",
    "logits_scaling": "add_logit_scale",
}
SMOLLM3_NO_ROPE_STEP = 4  # llama.cpp's smollm3 leaves every 4th layer unrotated, a step its GGUF cannot change
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def check_hf_dir(directory: Path) -> None:
    """Fail early, with the file at fault, on what we cannot convert."""
    if not (directory / "config.json").is_file():
        raise UserError(f"{directory}: not a Hugging Face model directory (config.json is missing)")
    pickles = sorted(p.name for p in directory.glob("*.bin")) + sorted(p.name for p in directory.glob("*.pt*"))
    if not any(directory.glob("*.safetensors")):
        if pickles:
            raise UserError(
                f"{directory / pickles[0]}: pickled PyTorch checkpoints are refused (unpickling can run code); "
                "use a safetensors checkpoint"
            )
        raise UserError(f"{directory}: no *.safetensors weights found")


def read_config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"{path}: not valid JSON") from None
    if not isinstance(config, dict):
        raise UserError(f"{path}: not a JSON object")
    return config


def arch_spec(config: dict[str, Any], directory: Path) -> ArchSpec:
    names = config.get("architectures") or []
    for name in names:
        if name in ARCHITECTURES:
            return ARCHITECTURES[name]
    found = ", ".join(names) or config.get("model_type") or "none"
    raise UserError(
        f"{directory / 'config.json'}: unsupported architecture {found}; supported: {', '.join(ARCHITECTURES)}"
    )


def permute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder Q/K rows from HF's rotate-half layout to the interleaved pairs llama.cpp's llama RoPE uses."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(config: dict[str, Any], head_dim: int) -> np.ndarray | None:
    """Llama 3.1+ frequency scaling as per-dimension factors (the `rope_freqs` tensor), else None."""
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) != "llama3":
        return None
    base = float(config.get("rope_theta", 10000.0))
    factor = float(scaling["factor"])
    low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
    old_ctx = float(scaling.get("original_max_position_embeddings", 8192))
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    factors = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old_ctx / high:
            factors.append(1.0)
        elif wavelen > old_ctx / low:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def rotary_dims(config: dict[str, Any], head_dim: int) -> int:
    """How many of a head's dimensions are rotated (Phi-4-mini rotates 3/4 of them)."""
    return int(head_dim * float(config.get("partial_rotary_factor", 1.0)))


def longrope(config: dict[str, Any], head_dim: int) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Phi's LongRoPE as llama.cpp reads it: per-dimension factors for short and long contexts, and the
    attention factor sqrt(1 + ln(scale) / ln(original context)); None without it."""
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) != "longrope":
        return None
    orig = int(config.get("original_max_position_embeddings") or scaling.get("original_max_position_embeddings"))
    scale = int(config.get("max_position_embeddings", orig)) / orig
    attn = 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(orig))
    long = np.asarray(scaling["long_factor"], dtype=np.float32)
    short = np.asarray(scaling["short_factor"], dtype=np.float32)
    return long, short, float(scaling.get("attention_factor") or attn)


def _add_hparams(w: gguf.GGUFWriter, config: dict[str, Any], head_dim: int, name: str) -> None:
    n_head = int(config["num_attention_heads"])
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(int(config.get("max_position_embeddings", 4096)))
    w.add_embedding_length(int(config["hidden_size"]))
    w.add_block_count(int(config["num_hidden_layers"]))
    w.add_feed_forward_length(int(config["intermediate_size"]))
    w.add_head_count(n_head)
    w.add_head_count_kv(int(config.get("num_key_value_heads") or n_head))
    w.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    w.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    w.add_rope_dimension_count(rotary_dims(config, head_dim))
    w.add_vocab_size(int(config["vocab_size"]))
    if "head_dim" in config:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in ("linear", "yarn"):
        w.add_rope_scaling_type(gguf.RopeScalingType(kind))
        w.add_rope_scaling_factor(float(scaling["factor"]))
        if kind == "yarn" and "original_max_position_embeddings" in scaling:
            w.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
    elif kind == "longrope":
        factors = longrope(config, head_dim)
        assert factors is not None
        w.add_rope_scaling_attn_factors(factors[2])
        w.add_rope_scaling_orig_ctx_len(int(config.get("original_max_position_embeddings")
                                            or scaling["original_max_position_embeddings"]))
    elif kind not in (None, "default", "llama3"):
        raise UserError(f"config.json: rope_scaling type {kind!r} is not supported")
    for key, method in _GRANITE_SCALES.items():
        if key in config and "GraniteForCausalLM" in (config.get("architectures") or []):
            getattr(w, method)(float(config[key]))
    if gemma3.is_gemma3(config):
        gemma3.add_hparams(w, config)


def check_family(config: dict[str, Any], path: Path) -> None:
    """What a family's config.json may hold that llama.cpp's reading of that family cannot express."""
    archs = config.get("architectures") or []
    if "SmolLM3ForCausalLM" in archs:
        n_layer = config["num_hidden_layers"]
        want = [int((i + 1) % SMOLLM3_NO_ROPE_STEP != 0) for i in range(n_layer)]
        layers = config.get("no_rope_layers", want)
        if layers != want:
            raise UserError(f"{path}: 'no_rope_layers' {layers} is not every {SMOLLM3_NO_ROPE_STEP}th layer, "
                            "the only pattern llama.cpp's smollm3 runs")
    factor = config.get("partial_rotary_factor", 1.0)
    if not _positive_real(factor) or factor > 1:
        raise UserError(f"{path}: 'partial_rotary_factor' is {factor!r}; it must be a number above 0, at most 1")
    if "GraniteForCausalLM" in archs:
        for key in _GRANITE_SCALES:
            if key in config and not _positive_real(config[key]):
                raise UserError(f"{path}: '{key}' is {config[key]!r}; it must be a positive number")
    if "MistralForCausalLM" in archs and config.get("sliding_window") not in (None, 0):
        window, ctx = config["sliding_window"], config.get("max_position_embeddings", 4096)
        if isinstance(window, int) and window < ctx:  # llama.cpp's llama attends to the whole context
            config["max_position_embeddings"] = window
    if gemma3.is_gemma3(config):
        gemma3.check_gemma3_config(config, path)


# generation_config.json field -> (GGUFWriter method, type): the model's recommended sampling, which the
# engine reads back as its chat default (llama.cpp's general.sampling.* keys).
_SAMPLING = {
    "temperature": ("add_sampling_temp", float),
    "top_k": ("add_sampling_top_k", int),
    "top_p": ("add_sampling_top_p", float),
    "min_p": ("add_sampling_min_p", float),
    "repetition_penalty": ("add_sampling_penalty_repeat", float),
}


def add_sampling_defaults(w: gguf.GGUFWriter, directory: Path) -> None:
    """Copy generation_config.json's recommended sampling into the GGUF (nothing if there is none)."""
    path = directory / "generation_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise UserError(f"{path}: expected a JSON object")
    for field, (method, kind) in _SAMPLING.items():
        value = config.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            getattr(w, method)(kind(value))


# config.json sizes a conversion reads: each a whole number from 1 to 2^31 - 1 (GGUF stores them as 32-bit,
# and llama.cpp as int32). Optional ones may be absent (or null).
_SIZES = ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size")
_OPTIONAL_SIZES = ("num_key_value_heads", "head_dim", "max_position_embeddings")
_OPTIONAL_REALS = ("rms_norm_eps", "rope_theta")
_MAX_SIZE = 2**31 - 1


def check_hf_config(config: dict[str, Any], path: Path) -> None:
    """Refuse, naming the field and its value, any size a hostile or broken config.json could use to divide by
    zero, wrap around or ask for absurd memory; and rope settings that are not positive numbers."""
    for key in _SIZES + _OPTIONAL_SIZES:
        value = config.get(key)
        if value is None and key in _OPTIONAL_SIZES:
            continue
        if value is None:
            raise UserError(f"{path}: '{key}' is missing")
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= _MAX_SIZE:
            raise UserError(f"{path}: '{key}' is {value!r}; it must be a whole number from 1 to {_MAX_SIZE}")
    for key in _OPTIONAL_REALS:
        value = config.get(key)
        if value is not None and not _positive_real(value):
            raise UserError(f"{path}: '{key}' is {value!r}; it must be a positive number")
    n_head = config["num_attention_heads"]
    n_head_kv = config.get("num_key_value_heads") or n_head
    if n_head % n_head_kv:
        raise UserError(
            f"{path}: 'num_attention_heads' {n_head} is not a multiple of 'num_key_value_heads' {n_head_kv}"
        )
    if not config.get("head_dim") and config["hidden_size"] % n_head:
        raise UserError(
            f"{path}: 'hidden_size' {config['hidden_size']} is not a multiple of 'num_attention_heads' {n_head}"
        )
    scaling = config.get("rope_scaling")
    if scaling is None:
        return
    if not isinstance(scaling, dict):
        raise UserError(f"{path}: 'rope_scaling' must be an object, not {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind not in (None, "default", "linear", "yarn", "llama3", "longrope"):
        raise UserError(f"{path}: rope_scaling type {kind!r} is not supported")
    if kind == "longrope":
        _check_longrope(config, scaling, path)
        return
    if kind in ("linear", "yarn", "llama3") and not _positive_real(scaling.get("factor")):
        raise UserError(f"{path}: 'rope_scaling.factor' is {scaling.get('factor')!r}; it must be a positive number")
    for key in ("low_freq_factor", "high_freq_factor"):
        if key in scaling and not _positive_real(scaling[key]):
            raise UserError(f"{path}: 'rope_scaling.{key}' is {scaling[key]!r}; it must be a positive number")
    orig = scaling.get("original_max_position_embeddings")
    if orig is not None and (not isinstance(orig, int) or isinstance(orig, bool) or not 1 <= orig <= _MAX_SIZE):
        raise UserError(f"{path}: 'rope_scaling.original_max_position_embeddings' is {orig!r}")
    if kind == "llama3" and scaling.get("low_freq_factor", 1.0) >= scaling.get("high_freq_factor", 4.0):
        raise UserError(f"{path}: 'rope_scaling.low_freq_factor' must be below 'high_freq_factor'")


def _check_longrope(config: dict[str, Any], scaling: dict[str, Any], path: Path) -> None:
    n_head = config["num_attention_heads"]
    half = rotary_dims(config, config.get("head_dim") or config["hidden_size"] // n_head) // 2
    for key in ("long_factor", "short_factor"):
        factors = scaling.get(key)
        if not isinstance(factors, list) or len(factors) != half or not all(map(_positive_real, factors)):
            raise UserError(f"{path}: 'rope_scaling.{key}' must be {half} positive numbers")
    orig = config.get("original_max_position_embeddings") or scaling.get("original_max_position_embeddings")
    if not isinstance(orig, int) or isinstance(orig, bool) or not 2 <= orig <= _MAX_SIZE:
        raise UserError(f"{path}: LongRoPE needs 'original_max_position_embeddings', not {orig!r}")


def _positive_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _check_heads(t: SafeTensor, hf_name: str, heads: int, head_dim: int, path: Path) -> None:
    """Q and K rows must be heads x head size: the Q/K permutation reshapes by them (and llama.cpp would
    refuse the file anyway)."""
    if len(t.shape) != 2 or t.shape[0] != heads * head_dim:
        raise UserError(
            f"{path}: {heads} heads of size {head_dim} do not match tensor {hf_name!r} of shape {list(t.shape)}"
        )


_EMBED = "model.embed_tokens.weight"
_LM_HEAD = "lm_head.weight"
_LAYER = re.compile(r"model\.layers\.(\d{1,10})\.")  # more digits than any int32 layer count: no layer of ours


def check_against_tensors(config: dict[str, Any], source: dict[str, SafeTensor], directory: Path) -> None:
    """Bound config.json's sizes by the tensors the checkpoint holds (their headers), before anything is sized by
    them: 'vocab_size' and 'hidden_size' by the embedding (which pads the vocabulary), 'num_hidden_layers' by
    the model.layers.N present (which the tensor names are built for), the heads and head size by every
    layer's q_proj and k_proj (which size the Q/K permutation and the rope factors). check_config lets each
    size be up to 2^31 - 1; these checks cost a few lookups per tensor present."""
    config_path = directory / "config.json"
    vocab_size, hidden = config["vocab_size"], config["hidden_size"]
    embed = source.get(_EMBED)
    if embed is None:
        raise UserError(
            f"{directory}: no tensor {_EMBED!r} in the checkpoint (config.json's 'vocab_size' is {vocab_size})"
        )
    for t in (embed, source.get(_LM_HEAD)):
        if t is None:
            continue
        if len(t.shape) != 2 or t.shape[0] != vocab_size:
            raise UserError(
                f"{config_path}: 'vocab_size' {vocab_size} does not match {t.name} of shape {list(t.shape)}"
            )
        if t.shape[1] != hidden:
            raise UserError(f"{config_path}: 'hidden_size' {hidden} does not match {t.name} of shape {list(t.shape)}")
    n_layer = config["num_hidden_layers"]
    layers = {int(m.group(1)) for m in map(_LAYER.match, source) if m}
    if len(layers) != n_layer or max(layers, default=-1) != n_layer - 1:  # exactly 0 .. n_layer - 1
        raise UserError(
            f"{config_path}: 'num_hidden_layers' {n_layer} does not match the checkpoint, which has "
            f"{_layer_spans(layers)}"
        )
    n_head = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // n_head
    n_kv = config.get("num_key_value_heads") or n_head
    for i in range(n_layer):
        fused = source.get(f"model.layers.{i}.{_FUSED_QKV}")
        if fused is not None:  # Phi-3: q, then k, then v rows
            _check_heads(fused, fused.name, n_head + 2 * n_kv, head_dim, config_path)
            continue
        for proj, heads in (("q_proj", n_head), ("k_proj", n_kv)):
            hf_name = f"model.layers.{i}.self_attn.{proj}.weight"
            t = source.get(hf_name)
            if t is None:
                raise UserError(f"{directory}: no tensor {hf_name!r} in the checkpoint")
            _check_heads(t, hf_name, heads, head_dim, config_path)


def _layer_spans(layers: set[int]) -> str:
    """'tensors for layers 0-3, 5' (the first few runs), or 'no model.layers.N tensors'."""
    if not layers:
        return "no model.layers.N tensors"
    spans: list[list[int]] = []
    for i in sorted(layers):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans[:4])
    return f"tensors for layers {text}{', ...' if len(spans) > 4 else ''}"


def _gguf_name(name_map: gguf.TensorNameMap, hf_name: str) -> str | None:
    """The GGUF name of an HF tensor, through a name map built for block 0 only: a map for every layer costs
    memory and time per layer (a hostile 'num_hidden_layers' used to grow past 1.3 GB building it)."""
    suffixes = (".weight", ".bias")
    m = _LAYER.match(hf_name)
    if m is None:
        return name_map.get_name(hf_name, try_suffixes=suffixes)
    index = m.group(1)
    if index != str(int(index)):  # "model.layers.01." is no layer name of ours
        return None
    name = name_map.get_name(f"model.layers.0.{hf_name[m.end() :]}", try_suffixes=suffixes)
    if name is None or not name.startswith("blk.0."):
        return None
    return f"blk.{index}.{name[len('blk.0.') :]}"


def plan_hf(directory: Path, name: str) -> F16Plan:
    """Check the checkpoint and plan its F16 tensors; nothing is read or written yet."""
    check_hf_dir(directory)
    stats = RangeStats()
    config = read_config(directory)
    spec = arch_spec(config, directory)
    config_path = directory / "config.json"
    if gemma3.is_gemma3(config):
        config = gemma3.text_config(config, config_path)
    check_hf_config(config, config_path)
    check_family(config, config_path)
    n_head = config["num_attention_heads"]
    n_head_kv = config.get("num_key_value_heads") or n_head
    vocab_size = config["vocab_size"]
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head
    if spec.permute_qk and head_dim % 2:
        raise UserError(f"{config_path}: head size {head_dim} is odd; rotary embeddings need an even one")
    source = read_checkpoint(directory)  # headers only: shapes bound what config.json may claim
    if gemma3.is_gemma3(config):  # the text model's tensors under their plain names; no vision tower
        source = {new: t for old, t in source.items() if (new := gemma3.text_tensor_name(old)) is not None}
    norm_shift = gemma3.NORM_SHIFT if gemma3.is_gemma3(config) else 0.0
    check_against_tensors(config, source, directory)
    name_map = gguf.TensorNameMap(spec.arch, 1)  # block 0 only: _gguf_name maps every layer through it
    tied = bool(config.get("tie_word_embeddings", False)) or _LM_HEAD not in source

    planned: list[PlannedTensor] = []
    rope = llama3_rope_factors(config, head_dim)
    if rope is not None:
        planned.append(PlannedTensor("rope_freqs.weight", rope.shape, np.dtype(np.float32), lambda r=rope: [r]))
    phi = longrope(config, head_dim)
    if phi is not None:
        for tensor, factors in (("rope_factors_long.weight", phi[0]), ("rope_factors_short.weight", phi[1])):
            planned.append(PlannedTensor(tensor, factors.shape, np.dtype(np.float32), lambda f=factors: [f]))
    for hf_name, t in source.items():
        if hf_name.endswith(_IGNORED_SUFFIXES) or (tied and hf_name == _LM_HEAD):
            continue
        gguf_name = _gguf_name(name_map, hf_name)
        if gguf_name is None:
            raise UserError(f"{t.file}: unexpected tensor {hf_name!r} for {spec.arch.name.lower()}")
        stats.source_dtypes.add(t.dtype)
        heads = None
        if hf_name.endswith("q_proj.weight"):
            _check_heads(t, hf_name, n_head, head_dim, config_path)
            heads = n_head if spec.permute_qk else None
        elif hf_name.endswith("k_proj.weight"):
            _check_heads(t, hf_name, n_head_kv, head_dim, config_path)
            heads = n_head_kv if spec.permute_qk else None
        dtype = target_dtype(gguf_name, t.shape)
        shift = norm_shift if hf_name.endswith("norm.weight") else 0.0
        planned.append(PlannedTensor(gguf_name, t.shape, dtype, _producer(t, heads, dtype, stats, shift)))

    vocab = load_vocab(directory, vocab_size)

    def make_writer(path: Path) -> gguf.GGUFWriter:
        w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[spec.arch])
        _add_hparams(w, config, head_dim, name)
        add_tokenizer(w, directory, vocab)
        add_sampling_defaults(w, directory)
        return w

    return F16Plan(planned, make_writer, stats)


def _producer(
    t: SafeTensor, heads: int | None, dtype: np.dtype, stats: RangeStats, shift: float = 0.0
) -> Callable[[], Iterator[np.ndarray]]:
    """Rows of `t` in `dtype`: Q/K rows permuted over `heads`, `shift` added (Gemma's norms are 1 + w)."""
    def produce() -> Iterator[np.ndarray]:
        # Q/K permutation mixes rows across a head, so those (small) tensors are converted whole.
        for rows in [slice(None)] if heads is not None or not t.shape else row_blocks(t.shape):
            x = t.to_f32(rows) if t.dtype != "F16" or shift else np.asarray(t.raw[rows])
            if heads is not None:
                x = permute_rotary(x, heads)
            if shift:
                x = x + np.float32(shift)
            if dtype == np.float16:
                yield x if x.dtype == np.float16 else stats.to_f16(x)
            else:
                yield x.astype(np.float32)

    return produce
