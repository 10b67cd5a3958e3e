"""A worker's tensor cache (`specquant worker`, runtime.machine.rpc.serve_rpc): what ggml's RPC server may load by
name is only what Python has verified to hash to that name.

ggml's RPC server (C++) keeps every received tensor over 10 MiB as cache_dir/<FNV-1a 64 of its bytes, as
%016x>, written in place (not atomically), and loads such a file for SET_TENSOR_HASH by name alone, without
checking its size or hash. Python cannot step in between, so only files it has verified stay where ggml
looks: at start everything else moves aside to PENDING and comes back once its bytes hash to its name.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from runtime.atomic import write_text_atomic
from runtime.paths import private_dir

CACHE_QUOTA_BYTES = 64 * 10**9
PENDING = ".pending"
INDEX = "index.json"  # name -> [size, mtime_ns] of entries verified here: those are not hashed again
_FNV_BASIS, _FNV_PRIME, _MASK64 = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1
_HASH_CHUNK = 1 << 22
_index_lock = threading.Lock()


def _is_entry(name: str) -> bool:
    return len(name) == 16 and all(c in "0123456789abcdef" for c in name)


def fnv1a64(path: Path) -> int:
    """ggml-rpc's fnv_hash of a file's bytes (FNV-1a, 64 bits), at numpy speed.

    FNV-1a is h = (h ^ byte) * P mod 2^64. The xor changes only h's low byte, whose next value depends only on
    the low byte and the input byte (P is odd), and bit k of that depends on bit k of the xor and lower bits
    only; so the low bytes come out bit by bit as prefix xors, and the rest is the linear recurrence
    h' = (h + d) * P, a dot product with powers of P."""
    import numpy as np

    powers = np.cumprod(np.full(_HASH_CHUNK, _FNV_PRIME, dtype=np.uint64), dtype=np.uint64)[::-1].copy()
    h = _FNV_BASIS
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            b = np.frombuffer(chunk, dtype=np.uint8)
            n, l0 = b.size, h & 0xFF
            low = np.zeros(n, dtype=np.uint8)  # h's low byte before each input byte, built bit by bit
            low[0] = l0
            for k in range(8):
                below = (low ^ b) & np.uint8((1 << k) - 1)
                flips = (((below * np.uint8(0xB3)) >> np.uint8(k)) ^ (b >> np.uint8(k))) & np.uint8(1)
                bits = np.bitwise_xor.accumulate(flips) ^ np.uint8((l0 >> k) & 1)
                low[1:] |= bits[:-1] << np.uint8(k)
            d = ((low ^ b).astype(np.int64) - low.astype(np.int64)).view(np.uint64)
            tail = int(np.sum(d * powers[_HASH_CHUNK - n :], dtype=np.uint64))
            h = (h * pow(_FNV_PRIME, n, 1 << 64) + tail) & _MASK64
    return h


def _read_index(cache: Path) -> dict[str, list[int]]:
    try:
        data = json.loads((cache / INDEX).read_text())
        return {k: v for k, v in data.items() if _is_entry(k) and isinstance(v, list) and len(v) == 2}
    except (OSError, ValueError, AttributeError):
        return {}


def _write_index(cache: Path, index: dict[str, list[int]]) -> None:
    # Atomic: a worker killed here leaves the old index or the new one.
    write_text_atomic(cache / INDEX, json.dumps(index))


@dataclass
class CacheSweep:
    """What preparing the cache did: files removed (temporary, foreign, over the quota), set aside to verify."""

    removed: list[str]
    pending: list[str]
    kept: int


def prepare_cache(cache: Path, quota: int = CACHE_QUOTA_BYTES) -> CacheSweep:
    """Before ggml's server starts: remove temporary and foreign files, move every entry not verified here
    before (or changed since) to PENDING, and delete the oldest entries until all fit in `quota` bytes."""
    private_dir(cache)
    pending = cache / PENDING
    private_dir(pending)
    index, removed = _read_index(cache), []
    entries: list[tuple[int, int, Path]] = []  # (mtime_ns, size, path) of trusted and pending entries
    for path in [*cache.iterdir(), *pending.iterdir()]:
        if path.name in (INDEX, PENDING) and path.parent == cache:
            continue
        st = path.lstat()
        if not path.is_file() or path.is_symlink() or not _is_entry(path.name) or st.st_size == 0:
            _remove(path, removed)  # a temporary file, a truncated write's leftovers, or not ours
            continue
        known = path.parent == cache and index.get(path.name) == [st.st_size, st.st_mtime_ns]
        if not known and path.parent == cache:
            target = pending / path.name
            os.replace(path, target)  # out of ggml's sight until its bytes hash to its name
            path = target
        entries.append((st.st_mtime_ns, st.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):  # the oldest first
        if total <= quota:
            break
        _remove(path, removed)
        total -= size
    index = {
        p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in cache.iterdir() if p.is_file() and _is_entry(p.name)
    }
    _write_index(cache, index)
    waiting = sorted(p.name for p in pending.iterdir() if _is_entry(p.name))
    return CacheSweep(removed, waiting, len(index))


def _remove(path: Path, removed: list[str]) -> None:
    try:
        path.unlink()
        removed.append(path.name)
    except OSError:  # another process's file, or open elsewhere (Windows): left for the next start
        pass


def verify_pending(cache: Path) -> tuple[list[str], list[str]]:
    """Hash every PENDING entry: one whose bytes hash to its name (and so has the size it was written with)
    goes back where ggml looks, any other is deleted. (restored, deleted)"""
    pending, restored, deleted = cache / PENDING, [], []
    for path in sorted(pending.glob("*")):
        try:
            good = _is_entry(path.name) and fnv1a64(path) == int(path.name, 16)
        except OSError:
            continue
        target = cache / path.name
        if not good:
            _remove(path, deleted)
        elif target.exists():  # ggml wrote it again meanwhile, from the bytes it received
            _remove(path, [])
        else:
            os.replace(path, target)
            restored.append(path.name)
            with _index_lock:  # the index is rewritten whole: one writer at a time
                index = _read_index(cache)
                st = target.stat()
                index[target.name] = [st.st_size, st.st_mtime_ns]
                _write_index(cache, index)
    return restored, deleted
