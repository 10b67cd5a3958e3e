"""Atomic file writes with a unique temporary name per writer.

Two processes (or threads) may write the same file at once: each writes its own temporary file in the
target's folder (same file system, so the rename is atomic), fsyncs it and renames it over the target. Readers
see the old file or one whole new one, never a mix; the last rename wins. On any failure the temporary file is
removed and the OSError propagates, for the caller to word or to shrug off.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically; raises OSError (the target untouched) on failure."""
    # Hidden (a leading dot), and .partial: the cache's sweep of a killed run's leftovers removes it too.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if sys.platform != "win32":
            os.chmod(tmp, _mode(path))  # mkstemp makes 0600: keep the old file's mode, else a usual one
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # best effort: some file systems cannot fsync a folder
        fsync_dir(path.parent)


def write_text_atomic(path: Path, text: str) -> None:
    """`write_bytes_atomic` for UTF-8 text."""
    write_bytes_atomic(path, text.encode("utf-8"))


def _mode(path: Path) -> int:
    # Not 0o666 & ~umask: os.umask can only be read by setting it, which races with other threads.
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o644


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (a no-op on Windows, which cannot open a folder); raises OSError."""
    if sys.platform == "win32":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
