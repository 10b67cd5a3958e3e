"""Byte-level BPE tokenizer metadata from a Hugging Face `tokenizer.json`, for GGUF.

llama.cpp re-implements each pre-tokenizer by name (`tokenizer.ggml.pre`). We pick that name by matching the
pre-tokenizer *definition* in tokenizer.json against a table of known ones, and refuse anything else by name:
a wrong guess would tokenize silently differently from the original model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from runtime.errors import UserError

_L3_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Each entry: the normalised pre-tokenizer steps -> llama.cpp's name for them.
KNOWN_PRE_TOKENIZERS: dict[tuple[tuple[Any, ...], ...], str] = {
    (("ByteLevel", None, True, False, None),): "gpt-2",
    (("Digits", None, None, None, True), ("ByteLevel", None, True, False, None)): "smollm",
    (("Split", _L3_RE, None, None, None), ("ByteLevel", None, False, False, None)): "llama-bpe",
    (("Split", _QWEN2_RE, None, None, None), ("ByteLevel", None, False, False, None)): "qwen2",
}


def _step_key(step: dict[str, Any]) -> tuple[Any, ...]:
    pattern = step.get("pattern") or {}
    regex = pattern.get("Regex") if isinstance(pattern, dict) else None
    return (
        step.get("type"),
        regex,
        step.get("use_regex"),
        step.get("add_prefix_space"),
        step.get("individual_digits"),
    )


def pre_tokenizer_name(tokenizer: dict[str, Any], path: Path) -> str:
    """llama.cpp's name for tokenizer.json's pre-tokenizer, or a UserError naming what it found."""
    pre = tokenizer.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    key = tuple(_step_key(s) for s in steps if isinstance(s, dict))
    name = KNOWN_PRE_TOKENIZERS.get(key)
    if name is None:
        kinds = "+".join(str(k[0]) for k in key) or "none"
        raise UserError(
            f"{path}: unknown pre-tokenizer ({kinds}); known: {', '.join(sorted(set(KNOWN_PRE_TOKENIZERS.values())))}"
        )
    return name


def _is_sentencepiece(tokenizer: dict[str, Any]) -> bool:
    model = tokenizer.get("model") or {}
    text = json.dumps([tokenizer.get("pre_tokenizer"), tokenizer.get("normalizer"), tokenizer.get("decoder")])
    return model.get("type") == "Unigram" or bool(model.get("byte_fallback")) or "Metaspace" in text or "▁" in text


@dataclass(frozen=True)
class BpeVocab:
    tokens: list[str]
    token_types: list[int]
    pre: str


def load_bpe_vocab(directory: Path, vocab_size: int) -> BpeVocab:
    """Tokens, token types and pre-tokenizer name, padded to the model's `vocab_size` with [PAD…] tokens."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        if (directory / "tokenizer.model").is_file():
            raise UserError(f"{directory}: SentencePiece tokenizers (tokenizer.model) are not supported yet")
        raise UserError(f"{directory}: tokenizer.json is missing")
    try:
        tokenizer = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        raise UserError(f"{path}: not valid JSON") from None
    if not isinstance(tokenizer, dict):
        raise UserError(f"{path}: not a JSON object")
    if _is_sentencepiece(tokenizer):
        raise UserError(f"{path}: SentencePiece tokenizers (Llama 2, TinyLlama) are not supported yet")
    model = tokenizer.get("model") or {}
    if model.get("type") != "BPE":
        raise UserError(f"{path}: tokenizer model {model.get('type')!r} is not supported (byte-level BPE only)")
    pre = pre_tokenizer_name(tokenizer, path)

    try:
        vocab = model["vocab"].items()
        by_id: dict[int, tuple[str, int]] = {_token_id(i): (str(t), gguf.TokenType.NORMAL) for t, i in vocab}
        for added in tokenizer.get("added_tokens") or []:
            kind = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
            by_id[_token_id(added["id"])] = (str(added["content"]), kind)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UserError(f"{path}: malformed BPE vocabulary (token ids must be whole numbers from 0)") from None
    if not by_id:
        raise UserError(f"{path}: the BPE vocabulary is empty")
    n = max(vocab_size, max(by_id) + 1)
    if n > vocab_size:
        raise UserError(f"{path}: the tokenizer has {n} tokens but config.json's vocab_size is {vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):
        text, kind = by_id.get(i, (f"[PAD{i}]", gguf.TokenType.UNUSED))
        tokens.append(text)
        types.append(int(kind))
    return BpeVocab(tokens, types, pre)


def _token_id(value: object) -> int:
    """A token id from tokenizer.json: a whole number >= 0 (else ValueError)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(value)
    return value


def add_tokenizer(writer: gguf.GGUFWriter, directory: Path, vocab: BpeVocab) -> None:
    """Write tokens, merges, special tokens and the chat template (through gguf.SpecialVocab)."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    special = gguf.SpecialVocab(directory, load_merges=True, n_vocab=len(vocab.tokens))
    if not special.merges:
        raise UserError(f"{directory / 'tokenizer.json'}: a BPE tokenizer without merges")
    special.add_to_gguf(writer, quiet=True)
