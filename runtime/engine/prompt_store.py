"""Prompt states saved to disk (as llama-server's slot save): the KV state of a prompt whose long, stable
prefix (a grounded answer's whole documents, a long system prompt) is worth keeping across restarts.

One file per stable prefix, named by a hash of the `Identity` (model file, tier, build and kernels, context,
party) and the prefix's exact tokens. It holds the state llama.cpp serialised after the answer
(llama_state_seq_get_data: the prefix, the question and the answer), with those tokens: a later prompt that
starts with the same prefix restores it and keeps the tokens it shares, so a new question skips the
documents and a follow-up skips the whole first turn. Written atomically (runtime.atomic) under a file lock,
least recently used out within a byte budget. A file that is truncated, damaged or made for another identity
or prefix, or that llama.cpp refuses, is never used and never fails a request: one log line, the file is
deleted (counted in `dropped`; the answer writes a good one) and the prompt is read as if there were none.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import filelock
import numpy as np

from runtime.atomic import write_bytes_atomic
from runtime.engine.prompt_cache import Identity, StateBackend, shared_prefix
from runtime.errors import UserError
from runtime.paths import cache_dir, private_dir

log = logging.getLogger(__name__)

MAGIC = b"SPECQUANT-KV1\n"
MIN_TOKENS = 256  # a shorter stable prefix is read again in well under a second: not worth a file
DEFAULT_MAX_BYTES = 4 << 30  # or 10% of the disk's free space, whichever is smaller
SUFFIX = ".kv"


def default_folder() -> Path:
    """$SPECQUANT_PROMPT_STATES_DIR, else `prompt-states` in the user's cache folder (platformdirs)."""
    env = os.environ.get("SPECQUANT_PROMPT_STATES_DIR")
    if env:
        return Path(env).expanduser()
    return cache_dir() / "prompt-states"


def stable_prefix(
    render: Callable[[list[dict[str, str]]], list[int]], messages: Sequence[dict], prompt: Sequence[int]
) -> int:
    """How many leading `prompt` tokens stay put while the conversation goes on: those it shares with the
    system message followed by an empty user turn (the template's text up to where the user's words begin).
    0 without a system message, or where the template cannot render that."""
    if not messages or messages[0].get("role") != "system" or not isinstance(messages[0].get("content"), str):
        return 0
    if len(messages[0]["content"]) < MIN_TOKENS * 2:  # too short to matter: no second render
        return 0
    try:
        head = render([dict(messages[0]), {"role": "user", "content": ""}])
    except UserError:  # a template that refuses the probe: no stable prefix, not an error
        return 0
    return shared_prefix(head, prompt)


class PromptStore:
    """Prompt states on disk in `folder`, within `max_bytes` (0: off); writes run on one background thread."""

    def __init__(self, folder: Path | None = None, max_bytes: int | None = None) -> None:
        self.folder = folder or default_folder()
        self.max_bytes = max(0, max_bytes) if max_bytes is not None else -1  # -1: decided at the first write
        self.hits = 0
        self.written = 0
        self.dropped = 0  # files deleted as unreadable, damaged or refused by llama.cpp
        self._writer: threading.Thread | None = None
        self._seen: dict[Path, tuple[int, ...]] = {}  # the tokens of files read or written: a read is skipped
        # where the live KV cache already holds all that a file shares with the prompt

    @property
    def on(self) -> bool:
        return self.max_bytes != 0

    def path(self, identity: Identity, prefix: Sequence[int]) -> Path:
        h = hashlib.sha256(json.dumps(asdict(identity), sort_keys=True).encode())
        h.update(np.asarray(prefix, dtype="<i4").tobytes())
        return self.folder / f"{h.hexdigest()[:32]}{SUFFIX}"

    # --- reading ----------------------------------------------------------------------------------
    def load(self, identity: Identity, prefix: Sequence[int]) -> tuple[tuple[int, ...], bytes] | None:
        """The saved tokens and state for `prefix` under `identity`, or None (absent, or not to be trusted)."""
        if not self.on:
            return None
        path = self.path(identity, prefix)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("prompt state %s unreadable, not used: %s", path, e)
            return None
        found = decode_state(data, identity, prefix)
        if isinstance(found, str):
            self.drop(path, found)
            return None
        with contextlib.suppress(OSError):  # least recently used goes first: a hit is a use
            os.utime(path)
        self._seen[path] = found[0]
        return found

    def restore(self, identity: Identity, backend: StateBackend, prompt: Sequence[int], stable: int) -> int:
        """Restore the saved state for `prompt`'s first `stable` tokens where it beats the live KV cache; how
        many leading prompt tokens the KV cache then holds (at most all but one)."""
        live = backend.common_prefix(prompt)
        if not self.on or stable < MIN_TOKENS:
            return live
        seen = self._seen.get(self.path(identity, prompt[:stable]))
        if live >= stable and (seen is None or min(shared_prefix(seen, prompt), len(prompt) - 1) <= live):
            return live  # the file could not add to what the live cache holds (e.g. this chat's own follow-up)
        found = self.load(identity, prompt[:stable])
        if found is None:
            return live
        tokens, state = found
        keep = min(shared_prefix(tokens, prompt), len(prompt) - 1)
        if keep <= live:
            return live
        if not backend.restore_prefix_state(tokens, state, keep):
            self.drop(self.path(identity, prompt[:stable]), "refused by llama.cpp")
            return 0
        self.hits += 1
        return keep

    def drop(self, path: Path, why: str) -> None:
        """A file not to use again: one log line, and gone (its name is this prompt's: the answer writes a good
        one, where a kept bad file would be read, and refused, on every request)."""
        log.warning("prompt state %s not used, deleted: %s", path, why)
        self._seen.pop(path, None)
        with contextlib.suppress(OSError):
            path.unlink()
        self.dropped += 1

    # --- writing ----------------------------------------------------------------------------------
    def keep(self, identity: Identity, backend: StateBackend, stable: int) -> None:
        """After an answer: save the live state under its first `stable` tokens, unless a file has them."""
        if not self.on or stable < MIN_TOKENS or len(backend.tokens) < stable:
            return
        prefix = backend.tokens[:stable]
        if self.path(identity, prefix).is_file():
            return  # the documents are on disk already; a follow-up's longer state is kept in RAM
        tokens, state = backend.save_prefix_state()  # a copy, on the engine's thread
        self._seen[self.path(identity, prefix)] = tokens
        self.wait()  # one write at a time
        self._writer = threading.Thread(
            target=self._write, args=(identity, tokens, stable, state), name="prompt-store", daemon=True
        )
        self._writer.start()

    def wait(self) -> None:
        """Until the last write is on disk (Engine.close, and tests)."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None

    def _write(self, identity: Identity, tokens: tuple[int, ...], stable: int, state: bytes) -> None:
        try:
            private_dir(self.folder)
            if self.max_bytes < 0:
                self.max_bytes = default_disk_budget(self.folder)
            data = encode(identity, tokens, stable, state)
            if len(data) > self.max_bytes:
                return
            with filelock.FileLock(self.folder / ".lock", timeout=30):
                write_bytes_atomic(self.path(identity, tokens[:stable]), data)
                self.written += 1
                evict(self.folder, self.max_bytes)
        except (OSError, filelock.Timeout) as e:  # a full or read-only disk: the answer is not affected
            log.warning("prompt state not saved in %s: %s", self.folder, e)


def default_disk_budget(folder: Path) -> int:
    """min(4 GiB, 10% of the free space where the states go)."""
    import shutil

    while not folder.is_dir() and folder.parent != folder:  # not made yet: the disk it will be on
        folder = folder.parent
    return min(DEFAULT_MAX_BYTES, shutil.disk_usage(folder).free // 10)


def store_usage(folder: Path | None = None) -> tuple[int, int]:
    """How many prompt states `folder` (default: the user's) holds, and their bytes."""
    files = sizes(folder or default_folder())
    return len(files), sum(files.values())


def clear(folder: Path | None = None) -> tuple[int, int]:
    """Remove every prompt state in `folder` (default: the user's), and leftovers of killed writes, under the
    writers' lock (`specquant cache clear`, the window's Settings); how many states and bytes went.
    Raises OSError (a folder that cannot be changed), filelock.Timeout (a write that does not end)."""
    folder = folder or default_folder()
    if not folder.is_dir():
        return 0, 0
    with filelock.FileLock(folder / ".lock", timeout=30):
        files = sizes(folder)
        for p in [*files, *folder.glob(f".*{SUFFIX}.*.partial")]:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    return len(files), sum(files.values())


def sizes(folder: Path) -> dict[Path, int]:
    found = {}
    for p in folder.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            found[p] = p.stat().st_size
    return found


def evict(folder: Path, max_bytes: int) -> None:
    """Remove the least recently used states (oldest modification time first) until they fit `max_bytes`."""
    files = []
    for p in folder.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            st = p.stat()
            files.append((st.st_mtime_ns, st.st_size, p))
    files.sort()
    total = sum(size for _, size, _ in files)
    for _, size, p in files:
        if total <= max_bytes:
            break
        with contextlib.suppress(OSError):  # on Windows, a file another process is reading stays
            p.unlink()
            total -= size


# --- the file: MAGIC, a JSON header's length (4 bytes, little-endian), the header, tokens (int32), the state
def encode(identity: Identity, tokens: Sequence[int], stable: int, state: bytes) -> bytes:
    header = json.dumps({
        "identity": asdict(identity), "n_tokens": len(tokens), "stable": stable,
        "state_bytes": len(state), "crc32": zlib.crc32(state),
    }).encode()
    body = np.asarray(tokens, dtype="<i4").tobytes()
    return b"".join([MAGIC, struct.pack("<I", len(header)), header, body, state])


def decode_state(data: bytes, identity: Identity, prefix: Sequence[int]) -> tuple[tuple[int, ...], bytes] | str:
    """The tokens and state in `data`, or why they must not be used (never an exception: any file may be
    damaged, or written by someone else)."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        return "not a SpecQuant prompt state"
    at = len(MAGIC) + 4
    (n,) = struct.unpack("<I", data[len(MAGIC) : at])
    try:
        header = json.loads(data[at : at + n])
        n_tokens, stable, size, crc = (int(header[k]) for k in ("n_tokens", "stable", "state_bytes", "crc32"))
        saved_identity = header["identity"]
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return "damaged header"
    if min(n_tokens, stable, size, crc) < 0 or stable > n_tokens:
        return "damaged header (a negative or inconsistent count)"
    if saved_identity != json.loads(json.dumps(asdict(identity))):
        return "made for another model file, build, context or party"
    at += n
    if len(data) != at + 4 * n_tokens + size:
        return "truncated"
    tokens = tuple(int(t) for t in np.frombuffer(data, dtype="<i4", count=n_tokens, offset=at))
    if stable != len(prefix) or tokens[:stable] != tuple(prefix):
        return "made for another prompt"
    state = data[at + 4 * n_tokens :]
    if zlib.crc32(state) != crc:
        return "damaged (checksum)"
    return tokens, state
