"""Tokenizer metadata for GGUF from a Hugging Face directory: byte-level BPE (`tokenizer.json`) or SentencePiece
(`tokenizer.model`, as Llama 2, Mistral v0.3 and Gemma ship it).

llama.cpp re-implements each BPE pre-tokenizer by name (`tokenizer.ggml.pre`). We pick that name by matching the
pre-tokenizer *definition* in tokenizer.json against a table of known ones, and refuse anything else by name:
a wrong guess would tokenize silently differently from the original model. A SentencePiece model is read by
gguf's SentencePieceVocab (through the sentencepiece package): pieces, scores and types as llama.cpp's `llama`
tokenizer runs them.
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

# Phi-4-mini's o200k (tiktoken's o200k_base pattern) and Mistral Nemo/Small's Tekken, as their tokenizer.json
# spell them; llama.cpp's llama-vocab.cpp quotes the same originals for `gpt-4o` and `tekken`.
_LETTERS = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
_CAPS = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_REST = r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
GPT4O_RE = f"{_LETTERS}{_CONTRACTIONS}|{_CAPS}{_CONTRACTIONS}|\\p{{N}}{{1,3}}|{_REST}"
TEKKEN_RE = f"{_LETTERS}|{_CAPS}|\\p{{N}}|{_REST}"
_BYTE_LEVEL_AFTER_SPLIT = ("ByteLevel", None, False, False, None)

# Each entry: the normalised pre-tokenizer steps -> llama.cpp's name for them.
KNOWN_PRE_TOKENIZERS: dict[tuple[tuple[Any, ...], ...], str] = {
    (("ByteLevel", None, True, False, None),): "gpt-2",
    (("Digits", None, None, None, True), ("ByteLevel", None, True, False, None)): "smollm",
    (("Split", _L3_RE, None, None, None), _BYTE_LEVEL_AFTER_SPLIT): "llama-bpe",
    (("Split", _QWEN2_RE, None, None, None), _BYTE_LEVEL_AFTER_SPLIT): "qwen2",
    (("Split", GPT4O_RE, None, None, None), _BYTE_LEVEL_AFTER_SPLIT): "gpt-4o",
    (("Split", TEKKEN_RE, None, None, None), _BYTE_LEVEL_AFTER_SPLIT): "tekken",
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
class Vocab:
    """What the GGUF's tokenizer keys hold: llama.cpp's tokenizer model (`gpt2`: byte-level BPE with merges;
    `llama`: SentencePiece with scores), the tokens, their types, and the pre-tokenizer name."""

    model: str
    tokens: list[str] | list[bytes]
    token_types: list[int]
    pre: str
    scores: list[float] | None = None
    add_space_prefix: bool | None = None  # SentencePiece's dummy prefix: a space before the text


def load_vocab(directory: Path, vocab_size: int) -> Vocab:
    """The directory's tokenizer, padded to the model's `vocab_size` with [PAD…] tokens: SentencePiece where a
    tokenizer.model is there and tokenizer.json (if any) is its SentencePiece twin, else byte-level BPE."""
    path = directory / "tokenizer.json"
    spm = directory / "tokenizer.model"
    if not path.is_file():
        if spm.is_file():
            return load_spm_vocab(directory, vocab_size)
        raise UserError(f"{directory}: tokenizer.json is missing")
    tokenizer = _read_json(path)
    if _is_sentencepiece(tokenizer):
        if spm.is_file():
            return load_spm_vocab(directory, vocab_size)
        raise UserError(f"{path}: a SentencePiece tokenizer.json without its tokenizer.model is not supported; "
                        "add the repo's tokenizer.model")
    return load_bpe_vocab(path, tokenizer, vocab_size)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        raise UserError(f"{path}: not valid JSON") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a JSON object")
    return data


def load_bpe_vocab(path: Path, tokenizer: dict[str, Any], vocab_size: int) -> Vocab:
    """Tokens, token types and pre-tokenizer name of a byte-level BPE tokenizer.json."""
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
    return Vocab("gpt2", tokens, types, pre)


def load_spm_vocab(directory: Path, vocab_size: int) -> Vocab:
    """Pieces, scores and types of tokenizer.model (gguf's SentencePieceVocab), with the added tokens that
    tokenizer_config.json marks special made CONTROL, as llama.cpp's own converter does."""
    path = directory / "tokenizer.model"
    try:
        spm = gguf.vocab.SentencePieceVocab(directory)
    except RuntimeError as e:
        if "not installed" in str(e):
            raise UserError(f"{path}: reading a SentencePiece tokenizer needs the sentencepiece package "
                            "(pip install sentencepiece)") from None
        raise UserError(f"{path}: not a SentencePiece model ({str(e).splitlines()[0] if str(e) else e!r})") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a SentencePiece model ({e})") from None
    entries = [[text, score, int(kind)] for text, score, kind in spm.all_tokens()]
    if len(entries) > vocab_size:
        raise UserError(f"{path}: the tokenizer has {len(entries)} tokens but config.json's vocab_size is {vocab_size}")
    entries += [[f"[PAD{i}]".encode(), -1000.0, int(gguf.TokenType.UNUSED)] for i in range(len(entries), vocab_size)]
    for token_id, content, special in _added_tokens(directory):
        if token_id >= vocab_size:  # Gemma 3 1B lists <image_soft_token> past its vocabulary; llama.cpp skips it
            continue
        kind = gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED
        entries[token_id] = [content.encode(), -1000.0, int(kind)]
    # The dummy prefix (a space before the text, SentencePiece's default; Gemma's model has none) shows in
    # how a bare word is split: with it, "a" becomes "▁a".
    prefixed = spm.sentencepiece_tokenizer.EncodeAsPieces("a")[:1] in (["▁a"], ["▁"])
    return Vocab("llama", [e[0] for e in entries], [e[2] for e in entries], "default",
                 [float(e[1]) for e in entries], prefixed)


def _added_tokens(directory: Path) -> list[tuple[int, str, bool]]:
    """(id, text, special) for tokenizer_config.json's added_tokens_decoder, else tokenizer.json's added_tokens."""
    config_path = directory / "tokenizer_config.json"
    try:
        if config_path.is_file():
            decoder = _read_json(config_path).get("added_tokens_decoder")
            if decoder is not None:
                return [(_token_id(int(i)), str(t["content"]), bool(t.get("special"))) for i, t in decoder.items()]
        json_path = directory / "tokenizer.json"
        if json_path.is_file():
            added = _read_json(json_path).get("added_tokens") or []
            return [(_token_id(t["id"]), str(t["content"]), bool(t.get("special"))) for t in added]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UserError(f"{config_path}: malformed added tokens (ids must be whole numbers from 0)") from None
    return []


def _token_id(value: object) -> int:
    """A token id from tokenizer.json: a whole number >= 0 (else ValueError)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(value)
    return value


def add_tokenizer(writer: gguf.GGUFWriter, directory: Path, vocab: Vocab) -> None:
    """Write tokens (with merges or scores), special tokens and the chat template (through gguf.SpecialVocab)."""
    writer.add_tokenizer_model(vocab.model)
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    if vocab.scores is not None:
        writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.token_types)
    if vocab.add_space_prefix is not None:
        writer.add_add_space_prefix(vocab.add_space_prefix)
    bpe = vocab.model == "gpt2"
    special = gguf.SpecialVocab(directory, load_merges=bpe, n_vocab=len(vocab.tokens))
    if bpe and not special.merges:
        raise UserError(f"{directory / 'tokenizer.json'}: a BPE tokenizer without merges")
    special.add_to_gguf(writer, quiet=True)
