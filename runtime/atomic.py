"""Atomic file writes with a unique temporary name per writer.

Two processes (or threads) may write the same file at once: each writes its own temporary file in the
target's folder (same file system, so the rename is atomic), fsyncs it and renames it over the target. Readers
see the old file or one whole new one, never a mix; the last rename wins. On any failure the temporary file is
removed and the OSError propagates, for the caller to word or to shrug off.

A new file is the user's alone (0600, runtime.paths): prompt states, chats' exports, settings. Only what is
made for others to read (an installer's artefacts) asks for `shared=True`, the usual 0644 (0755 where the
writer made it executable).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: Path, shared: bool = False) -> Iterator[Path]:
    """A unique temporary name beside `path` for the block to write (itself, or another program): when the
    block ends without error the file is fsynced and renamed over `path`; on any error it is removed and the
    error propagates, `path` untouched. Owner-only unless `shared` (see the module's docstring)."""
    # Hidden (a leading dot), and .partial: the cache's sweep of a killed run's leftovers removes it too.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY if sys.platform != "win32" else os.O_RDWR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if sys.platform != "win32":
            os.chmod(tmp, _mode(path, tmp, shared))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # best effort: some file systems cannot fsync a folder
        fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically; raises OSError (the target untouched) on failure."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: Path, text: str) -> None:
    """`write_bytes_atomic` for UTF-8 text."""
    write_bytes_atomic(path, text.encode("utf-8"))


def _mode(path: Path, tmp: Path, shared: bool) -> int:
    """Private: the owner's bits of the old file, else of the writer's new file (an executable keeps its x):
    never readable by others, even where an older version wrote the file 0644. Shared: the old file's mode;
    else the one the writer gave the new file; mkstemp's 0600 else becomes a usual 0644."""
    # Not 0o666 & ~umask: os.umask can only be read by setting it, which races with other threads.
    with contextlib.suppress(OSError):
        old = path.stat().st_mode & 0o777
        return old if shared else old & 0o700 | 0o600
    mode = tmp.stat().st_mode & 0o777
    if not shared:
        return mode & 0o700 | 0o600
    return 0o644 if mode == 0o600 else mode


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (a no-op on Windows, which cannot open a folder); raises OSError."""
    if sys.platform == "win32":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
