"""Test helper: tiny real tokenizers written into a Hugging Face directory, with the library that reads them.

- `write_spm`: a SentencePiece BPE model trained by the sentencepiece package (byte fallback, Llama/Mistral's
  dummy prefix or Gemma's none), as tokenizer.model; the processor is the reference.
- `write_tiktoken_bpe`: a byte-level BPE with a given pre-tokenizer pattern (o200k's, Tekken's), as the
  tokenizer.json Hugging Face ships for Phi-4-mini and Mistral Nemo; tiktoken with the same ranks and pattern
  is the reference (OpenAI's and Mistral's own tokenizers are tiktoken).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

CORPUS = [
    "The capital of France is Paris, and the capital of Italy is Rome.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)",
    "What is the shipping status of order A-4521? Use the tool to look it up.",
    "Grüße aus Köln! Ça va? ¿Qué tal? Привет, мир. The weather today is 23 degrees and sunny.",
    "I'll say it's what they've done; we'd rather not. DON'T SHOUT, You're HERE.",
    "Numbers 1234567890 and 3.14159, dates like 2026-12-06, prices $19.99.",
] * 4


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte, as byte-level tokenizer.json files spell tokens."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def _train_merges(words: list[bytes], n_merges: int) -> list[tuple[bytes, bytes]]:
    """Greedy byte-pair merges over `words` (most frequent pair first)."""
    seqs = [[bytes([b]) for b in w] for w in words]
    merges = []
    for _ in range(n_merges):
        pairs = Counter(p for s in seqs for p in itertools.pairwise(s))
        if not pairs:
            break
        (a, b), _count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if s[i] == a and s[i + 1] == b:
                    s[i : i + 2] = [a + b]
                i += 1
    return merges


def write_tiktoken_bpe(out: Path, pattern: str, special_tokens: tuple[str, ...], n_merges: int = 300):
    """tokenizer.json (Split by `pattern`, then ByteLevel) and tokenizer_config.json in `out`; returns the
    tiktoken Encoding of the same ranks, pattern and special tokens (numbered after the merges)."""
    import regex
    import tiktoken

    # Merges learnt across the pattern's boundaries ("n't", "123", "(n"), so the split decides the ids.
    words = [w.encode() for text in CORPUS for w in regex.findall(r" ?\S+|\s+", text)]
    merges = _train_merges(words, n_merges)
    ranks = {bytes([b]): b for b in range(256)}
    for a, b in merges:
        ranks.setdefault(a + b, len(ranks))
    specials = {t: len(ranks) + i for i, t in enumerate(special_tokens)}
    enc = tiktoken.Encoding("micro", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    char = _bytes_to_unicode()

    def spell(t: bytes) -> str:
        return "".join(char[b] for b in t)

    tokenizer = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for t, i in specials.items()],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Removed", "invert": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {spell(t): i for t, i in ranks.items()},
                  "merges": [f"{spell(a)} {spell(b)}" for a, b in merges]},
    }
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    first = min(specials, key=specials.__getitem__)
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": first, "eos_token": first, "add_bos_token": False, "tokenizer_class": "GPT2Tokenizer"}))
    return enc


def write_spm(out: Path, dummy_prefix: bool, specials: tuple[str, ...] = ()):
    """tokenizer.model (SentencePiece BPE, byte fallback, `specials` as user-defined pieces) and a
    tokenizer_config.json marking the specials special, as Gemma's does; returns the processor."""
    import sentencepiece as spm

    prefix = out / "tokenizer"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_prefix=str(prefix), vocab_size=420, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=dummy_prefix, split_digits=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, user_defined_symbols=list(specials), minloglevel=2,
    )
    prefix.with_suffix(".vocab").unlink()
    prefix.with_suffix(".model").rename(out / "tokenizer.model")
    processor = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    decoder = {str(processor.piece_to_id(t)): {"content": t, "special": True} for t in specials}
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
         "added_tokens_decoder": decoder, "tokenizer_class": "LlamaTokenizer"}))
    return processor
