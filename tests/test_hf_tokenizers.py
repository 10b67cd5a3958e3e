"""Real tokenizers through the converter: llama.cpp, reading the converted GGUF, tokenizes as the tokenizer's
own library does, on tiny tokenizers the tests train (tests/tokenizer_files.py).

- SentencePiece (tokenizer.model): Mistral v0.3 and Llama 2 with the dummy prefix, Gemma 3 without it and with
  its turn markers as control tokens; the reference is the sentencepiece package.
- Byte-level BPE with Phi-4-mini's o200k pre-tokenizer (llama.cpp's `gpt-4o`) and Mistral Nemo's Tekken; the
  reference is tiktoken with the same ranks and pattern.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import gguf
import pytest

from converters.hf_to_gguf import plan_hf
from converters.hf_tokenizer import GPT4O_RE, TEKKEN_RE
from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from tests.hf_export import llama_to_family
from tests.tokenizer_files import write_spm, write_tiktoken_bpe

TEXTS = [
    "The capital of France is Paris, and the capital of Italy is",
    "Grüße aus Köln! Ça va? Привет, мир. こんにちは世界 👍🏽 🇫🇷",
    "  leading spaces\ttabs\nnew lines\r\n'quotes' don't I'LL WE'VE",
    "digits 1234567890 3.14159 and code: def f(x):\n    return x ** 2  # done",
]


def _checkpoint(micro_hf: Path, out: Path, arch: str) -> Path:
    """The micro checkpoint as `arch`, its stand-in tokenizer removed."""
    if arch == "LlamaForCausalLM":
        shutil.copytree(micro_hf, out)
    else:
        llama_to_family(micro_hf, out, arch)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).unlink()
    return out


def _convert(src: Path, path: Path) -> gguf.GGUFReader:
    plan_hf(src, "micro").write(path)
    return gguf.GGUFReader(path)


@pytest.mark.parametrize(("arch", "dummy_prefix"), [("MistralForCausalLM", True), ("Gemma3ForCausalLM", False)])
def test_sentencepiece_tokenizes_as_sentencepiece(micro_hf: Path, tmp_path: Path, arch: str,
                                                  dummy_prefix: bool) -> None:
    src = _checkpoint(micro_hf, tmp_path / "src", arch)
    turns = ("<start_of_turn>", "<end_of_turn>")
    sp = write_spm(src, dummy_prefix, turns)
    meta = _convert(src, tmp_path / "spm.gguf").fields
    assert meta["tokenizer.ggml.model"].contents() == "llama"
    assert meta["tokenizer.ggml.add_space_prefix"].contents() is dummy_prefix
    types = meta["tokenizer.ggml.token_type"].contents()
    assert types[sp.piece_to_id("<start_of_turn>")] == gguf.TokenType.CONTROL
    assert types[sp.piece_to_id("<0x41>")] == gguf.TokenType.BYTE
    with LlamaBackend(tmp_path / "spm.gguf", LoadOptions(n_ctx=64)) as b:
        for text in TEXTS:
            ids = sp.encode(text)
            assert b.tokenize(text, special=False) == ids, text
            assert b.detokenize(ids) == (" " + text if dummy_prefix else text)  # the pieces, prefix included
        assert (b.bos, b.eos) == (sp.bos_id(), sp.eos_id())
        turn = "<start_of_turn>user\nHi<end_of_turn>"
        ids = b.tokenize(turn)
        assert ids[0] == sp.piece_to_id("<start_of_turn>") and ids[-1] == sp.piece_to_id("<end_of_turn>")
        if not dummy_prefix:  # sentencepiece alone puts its dummy "▁" before a leading special piece
            assert ids == sp.encode(turn)


@pytest.mark.parametrize(("arch", "pattern", "pre"), [
    ("Phi3ForCausalLM", GPT4O_RE, "gpt-4o"), ("MistralForCausalLM", TEKKEN_RE, "tekken")])
def test_byte_level_bpe_tokenizes_as_tiktoken(micro_hf: Path, tmp_path: Path, arch: str, pattern: str,
                                              pre: str) -> None:
    src = _checkpoint(micro_hf, tmp_path / "src", arch)
    enc = write_tiktoken_bpe(src, pattern, ("<|endoftext|>", "<|end|>"))
    meta = _convert(src, tmp_path / "bpe.gguf").fields
    assert meta["tokenizer.ggml.model"].contents() == "gpt2"
    assert meta["tokenizer.ggml.pre"].contents() == pre
    with LlamaBackend(tmp_path / "bpe.gguf", LoadOptions(n_ctx=64)) as b:
        for text in TEXTS:
            ids = enc.encode_ordinary(text)
            assert b.tokenize(text, special=False) == ids, text
            assert b.detokenize(ids) == text
        text = "Hi<|end|><|endoftext|>"
        assert b.tokenize(text) == enc.encode(text, allowed_special="all")
