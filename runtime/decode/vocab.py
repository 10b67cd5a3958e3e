"""Whether one converted model can draft for another: the same vocabulary, token for token.

A draft model proposes token ids that the parent verifies, so both must mean the same thing by every id: the
same tokenizer model, each token's text and type, and the same special tokens (BOS, EOS, EOT, padding...).
Read by a vocab-only load of llama.cpp (no weights). As llama.cpp's `-md` allows, the
parent's vocabulary may extend the draft's by a few padding entries at its end (Qwen2.5-7B pads its
151,936 words to 152,064 with unused `[PAD…]` tokens): the draft can never propose one of those, and the
draft source stops drafting if the parent ever writes one (runtime/decode/drafts/model.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from runtime.decode.llama_backend import file_tokens
from runtime.errors import SpecQuantError, UserError
from runtime.models.cache import ModelDir, atomic_write_text

MAX_PADDING = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE: the most extra padding tokens a parent may have
SPECIAL_KEYS = ("bos", "eos", "eot", "eom", "unknown", "separator", "padding")
FILE = "vocab.json"  # a model's vocabulary fingerprint, beside its tiers (keyed by the tier it was read from)
READER = 2  # vocab.json's reader: 2, llama.cpp's token attributes (1, gguf's types, was read again)


@dataclass(frozen=True)
class Vocabulary:
    """One GGUF's tokenizer as far as drafting cares: which ids mean what."""

    model: str  # tokenizer.ggml.model ("gpt2", "llama", ...)
    pre: str  # the pre-tokenizer ("qwen2", "smollm", ...)
    tokens: tuple[str, ...]
    types: tuple[int, ...]
    special: tuple[tuple[str, int], ...]  # (name, id) of each special token the metadata names
    add_bos: bool | None

    @property
    def size(self) -> int:
        return len(self.tokens)

    def fingerprint(self) -> str:
        """A digest of everything `mismatch` compares: equal digests, interchangeable vocabularies."""
        raw = json.dumps([self.model, self.pre, self.tokens, self.types, self.special, self.add_bos])
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()


# llama.cpp's token attributes (LLAMA_TOKEN_ATTR_UNKNOWN = 1, UNUSED = 2, NORMAL = 4, CONTROL = 8,
# USER_DEFINED = 16, BYTE = 32) as the GGUF token types llama-vocab.cpp makes them from; a token with none of
# these bits is UNDEFINED, type 0.
_ATTR_TYPES = ((1, gguf.TokenType.UNKNOWN), (2, gguf.TokenType.UNUSED), (4, gguf.TokenType.NORMAL),
               (8, gguf.TokenType.CONTROL), (16, gguf.TokenType.USER_DEFINED), (32, gguf.TokenType.BYTE))


def read_vocabulary(path: Path) -> Vocabulary:
    """The vocabulary of the GGUF at `path`, from a vocab-only load by llama.cpp (a fifth of a second for the
    demo's 49,152 tokens, where gguf's reader parses every array for 4 s); a file without one is a one-line
    error naming it."""
    try:
        meta, texts, attrs = file_tokens(path)
    except SpecQuantError as e:  # one line naming the file (llama.cpp's own reason, or that it is missing)
        raise UserError(str(e)) from None
    if not texts:
        raise UserError(f"{path} has no vocabulary (tokenizer.ggml.tokens)")
    special = tuple(
        (name, int(v)) for name in SPECIAL_KEYS if (v := meta.get(f"tokenizer.ggml.{name}_token_id")) is not None
    )
    add_bos = meta.get("tokenizer.ggml.add_bos_token")
    return Vocabulary(
        meta.get("tokenizer.ggml.model", ""),
        meta.get("tokenizer.ggml.pre", ""),
        tuple(t.decode("utf-8", errors="replace") for t in texts),
        tuple(next((int(t) for bit, t in _ATTR_TYPES if a & bit), 0) for a in attrs),
        special,
        None if add_bos is None else add_bos == "true",
    )


def mismatch(draft: Vocabulary, parent: Vocabulary) -> str | None:
    """Why `draft` cannot draft for `parent`, in one phrase naming the first difference; None if it can."""
    if (draft.model, draft.pre) != (parent.model, parent.pre):
        return f"tokenizer {draft.model}/{draft.pre} against {parent.model}/{parent.pre}"
    shared = min(draft.size, parent.size)
    for i in range(shared):
        if draft.tokens[i] != parent.tokens[i]:
            return f"token {i} is {draft.tokens[i]!r} against {parent.tokens[i]!r}"
        if draft.types[i] != parent.types[i]:
            return f"token {i} ({draft.tokens[i]!r}) has type {draft.types[i]} against {parent.types[i]}"
    if draft.size > parent.size:
        extra = f"its token {shared} ({draft.tokens[shared]!r}) is not the parent's"
        return f"{draft.size} tokens against {parent.size}: {extra}"
    used = [i for i in range(shared, parent.size) if parent.types[i] != gguf.TokenType.UNUSED]
    if used or parent.size - shared > MAX_PADDING:
        first = used[0] if used else shared
        extra = f"the parent's token {first} ({parent.tokens[first]!r}) is not its"
        return f"{draft.size} tokens against {parent.size}: {extra}"
    if draft.special != parent.special:
        ours, theirs = dict(draft.special), dict(parent.special)
        name = next(n for n in SPECIAL_KEYS if ours.get(n) != theirs.get(n))
        return f"the {name} token is {_special(draft, ours.get(name))} against {_special(parent, theirs.get(name))}"
    if draft.add_bos != parent.add_bos:
        return f"add_bos_token is {draft.add_bos} against {parent.add_bos}"
    return None


def _special(vocab: Vocabulary, token: int | None) -> str:
    if token is None:
        return "unset"
    text = vocab.tokens[token] if 0 <= token < vocab.size else "?"
    return f"{token} ({text!r})"


def draft_tier(model: ModelDir, manifest: dict[str, Any]) -> str:
    """The tier a model drafts with: its cheapest (the smallest file)."""
    tiers = manifest.get("tiers") or {}
    if not tiers:
        raise UserError(f"model {model.name!r} has no tiers: run `specquant convert` again")
    return min(tiers, key=lambda t: tiers[t]["bytes"])


def model_vocabulary(model: ModelDir) -> Vocabulary:
    """A converted model's vocabulary (every tier shares it: read from the cheapest)."""
    manifest = model.read_manifest() or {}
    return read_vocabulary(model.tier_path(draft_tier(model, manifest)))


def check_draft_model(draft: ModelDir, parent: ModelDir) -> None:
    """Refuse, in one line naming the first differing token, a draft model whose vocabulary is not the parent's.
    Equal fingerprints (cached per tier file) settle it at once; only a difference reads both vocabularies again
    (a vocab-only load of 150,000 tokens still takes a second)."""
    ours, theirs = vocab_fingerprint(draft), vocab_fingerprint(parent)
    if ours is not None and theirs is not None and ours[0] == theirs[0]:
        return
    why = mismatch(model_vocabulary(draft), model_vocabulary(parent))
    if why is not None:
        raise UserError(
            f"model {draft.name!r} cannot draft for {parent.name!r}: its vocabulary differs ({why})"
        )


def vocab_fingerprint(model: ModelDir) -> tuple[str, int] | None:
    """(fingerprint, size) of a converted model's vocabulary, cached in its folder per tier file (reading
    150,000 tokens takes a second); None for a model that cannot say (incomplete, unreadable)."""
    manifest = model.read_manifest() or {}
    try:
        tier = draft_tier(model, manifest)
    except UserError:
        return None
    sha = manifest["tiers"][tier].get("sha256", "")
    path = model.path / FILE
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("sha256") == sha and sha and cached.get("reader") == READER:
            return str(cached["fingerprint"]), int(cached["size"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        vocab = read_vocabulary(model.tier_path(tier))
    except UserError:
        return None
    found = (vocab.fingerprint(), vocab.size)
    with contextlib.suppress(OSError):  # else read again next time
        facts = {"sha256": sha, "reader": READER, "fingerprint": found[0], "size": found[1]}
        atomic_write_text(path, json.dumps(facts) + "\n")
    return found


def draft_targets(models: Sequence[ModelDir]) -> dict[str, list[str]]:
    """Per model, the others it can draft for: the same vocabulary and a larger cheapest tier. By fingerprint
    (an identical vocabulary); a parent padded past the draft's vocabulary is found when the draft is chosen."""
    facts: dict[str, tuple[str, int]] = {}
    for m in models:
        manifest = m.read_manifest() or {}
        found = vocab_fingerprint(m) if manifest.get("complete") else None
        if found is not None:
            tiers = manifest["tiers"]
            facts[m.name] = (found[0], min(r["bytes"] for r in tiers.values()))
    out: dict[str, list[str]] = {}
    for name, (digest, size) in facts.items():
        out[name] = sorted(p for p, (d, s) in facts.items() if p != name and d == digest and s > size)
    return out
