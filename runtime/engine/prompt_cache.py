"""Prompt caches kept in RAM across turns, chats and API requests (as llama-server's `--cache-ram`): a tier's
KV state for a token sequence, saved when the live KV cache is about to lose it, and restored when a later
prompt shares more of it than the live cache does. Least recently used out, within a byte budget.

An entry is used only for the same `Identity`: the same model file (path, size, mtime and sha256), the same
llama.cpp build and CPU kernels, the same context size, and the same party (ChatOptions.cache_key), so how
fast an answer starts never tells one party what another asked. Within that, the longest common prefix with
the new prompt wins. The state is llama.cpp's own serialisation of the sequence's KV cells: restored, the
prompt continues from exactly the cells a fresh prefill would have written, so answers do not change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB, or 10% of the RAM available at start, whichever is smaller
MIN_TOKENS = 16  # a shorter prefix costs less to read again than to keep
# The live state is copied whole: losing a shorter tail (a follow-up re-renders the last answer's end) is
# cheaper to read again than the copy is to make, each turn.
MIN_LOST = 64


def default_ram_budget() -> int:
    """min(1 GiB, 10% of available RAM): room for a few long chats without pushing the tiers out of RAM."""
    import psutil

    return min(DEFAULT_MAX_BYTES, psutil.virtual_memory().available // 10)


@dataclass(frozen=True)
class Identity:
    """What a saved KV state is valid for, besides its tokens."""

    model: str
    tier: str
    file: tuple[str, int, int, str]  # path, bytes, mtime_ns, sha256 (from the manifest)
    build: str  # llama_cpp.__version__ and the CPU kernels ggml chose
    n_ctx: int
    party: str  # ChatOptions.cache_key

    @classmethod
    def of(cls, model: str, tier: str, path: Path, sha256: str, n_ctx: int, party: str) -> Identity:
        import llama_cpp

        from runtime.machine.hardware import ensure_backends

        st = path.stat()
        build = f"llama-cpp-python {llama_cpp.__version__}, {ensure_backends().variant}"
        return cls(model, tier, (str(path.resolve()), st.st_size, st.st_mtime_ns, sha256), build, n_ctx, party)


class StateBackend(Protocol):
    """What the cache needs of a loaded tier (runtime.decode.llama_backend.LlamaBackend)."""

    tokens: list[int]

    def common_prefix(self, tokens: Sequence[int]) -> int: ...

    def save_prefix_state(self) -> tuple[tuple[int, ...], bytes]: ...

    def restore_prefix_state(self, tokens: Sequence[int], state: bytes, keep: int) -> bool: ...


@dataclass
class CachedPrompt:
    identity: Identity
    tokens: tuple[int, ...]
    state: bytes


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PromptCache:
    """Saved KV states, least recently used first, within `max_bytes` (0: off)."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = default_ram_budget() if max_bytes is None else max(0, max_bytes)
        self._entries: OrderedDict[int, CachedPrompt] = OrderedDict()
        self._next = 0
        self.hits = 0
        self.saved = 0

    @property
    def bytes(self) -> int:
        return sum(len(e.state) for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def best(self, identity: Identity, prompt: Sequence[int]) -> tuple[CachedPrompt, int] | None:
        """The entry for `identity` sharing the longest prefix with `prompt`, and that length."""
        found: tuple[CachedPrompt, int] | None = None
        for entry in self._entries.values():
            if entry.identity != identity:
                continue
            n = shared_prefix(entry.tokens, prompt)
            if found is None or n > found[1]:
                found = (entry, n)
        return found

    def put(self, identity: Identity, tokens: tuple[int, ...], state: bytes) -> None:
        """Keep a state; one whose tokens an entry's already begin with is the same state, smaller."""
        if self.max_bytes == 0 or len(state) > self.max_bytes:
            return
        for key, entry in list(self._entries.items()):
            if entry.identity != identity:
                continue
            if entry.tokens[: len(tokens)] == tokens:  # already kept, as part of a longer one
                self._entries.move_to_end(key)
                return
            if tokens[: len(entry.tokens)] == entry.tokens:  # the new one holds all of it
                del self._entries[key]
        self._entries[self._next] = CachedPrompt(identity, tokens, state)
        self._next += 1
        self.saved += 1
        while self.bytes > self.max_bytes:
            self._entries.popitem(last=False)

    def keep_live(self, identity: Identity, backend: StateBackend, prompt: Sequence[int]) -> None:
        """Save the live KV cache before `prompt` overwrites part of it (it keeps only their shared prefix)."""
        if self.max_bytes == 0 or len(backend.tokens) < MIN_TOKENS:
            return
        if len(backend.tokens) - backend.common_prefix(prompt) < MIN_LOST:
            return  # little or nothing of it is lost
        tokens, state = backend.save_prefix_state()
        self.put(identity, tokens, state)

    def restore(self, identity: Identity, backend: StateBackend, prompt: Sequence[int]) -> int:
        """Restore the longest saved prefix of `prompt` where it beats the live KV cache; how many leading
        prompt tokens the KV cache then holds (one at least is always read: its logits start the answer)."""
        live = backend.common_prefix(prompt)
        found = self.best(identity, prompt) if self.max_bytes else None
        if found is None:
            return live
        entry, n = found
        keep = min(n, len(prompt) - 1)
        if keep <= live or keep < MIN_TOKENS:
            return live
        for key, e in self._entries.items():
            if e is entry:
                self._entries.move_to_end(key)
                break
        if not backend.restore_prefix_state(entry.tokens, entry.state, keep):
            self._entries = OrderedDict((k, e) for k, e in self._entries.items() if e is not entry)
            return 0
        self.hits += 1
        return keep
