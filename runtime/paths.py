"""The per-user folders, in one place: data (models, documents, conversations), config (presets, MCP
servers, approvals) and cache (prompt states, machine probes). Environment variables move them (tests,
portable installs).

Private by default: what SpecQuant creates is the user's alone, folders 0700 and files 0600 (`private_dir`,
runtime.atomic), as the XDG spec asks of these folders: a saved prompt state holds a whole chat. Where an
older version left one of the default folders wider (0755), its first use narrows it. On Windows the files
inherit the user's profile ACLs, which already keep other users out; nothing is changed there."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import platformdirs

APP = "specquant"  # every folder of ours, with no author folder
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def data_dir() -> Path:
    """$SPECQUANT_DATA_DIR, else the per-user data directory."""
    env = os.environ.get("SPECQUANT_DATA_DIR")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir(APP, appauthor=False))


def config_dir() -> Path:
    """$SPECQUANT_CONFIG_DIR, else the per-user config directory."""
    env = os.environ.get("SPECQUANT_CONFIG_DIR")
    return Path(env).expanduser() if env else Path(platformdirs.user_config_dir(APP, appauthor=False))


def cache_dir() -> Path:
    """The per-user cache directory (prompt states, machine probes): what can be made again."""
    return Path(platformdirs.user_cache_dir(APP, appauthor=False))


def _default_roots() -> tuple[Path, ...]:
    return tuple(Path(f(APP, appauthor=False)) for f in (
        platformdirs.user_data_dir, platformdirs.user_config_dir, platformdirs.user_cache_dir))


def private_dir(path: Path) -> Path:
    """Create `path` and each missing folder above it owner-only (0700; the rest is as it was), and narrow
    a default SpecQuant folder above it that an older version made wider. Raises OSError."""
    if sys.platform == "win32":  # the profile's ACLs hold; a mode would replace them (Python 3.13+)
        path.mkdir(parents=True, exist_ok=True)
        return path
    missing = []
    at = path
    while not at.is_dir():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # another process made it (or a file is in the way: raised below)
            if not folder.is_dir():
                raise
            continue
        os.chmod(folder, PRIVATE_DIR)  # mkdir's mode is masked by the umask: a 0o277 umask must not lock us out
    for root in _default_roots():
        if path == root or root in path.parents:
            narrow(root)
    return path


def narrow(folder: Path) -> None:
    """`folder` owner-only where it is ours and wider (best effort: a folder we cannot change stays)."""
    with contextlib.suppress(OSError):
        st = folder.stat()
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.chmod(folder, PRIVATE_DIR)


def create_private(path: Path) -> None:
    """Create `path` empty and owner-only (0600) unless it exists: a file another program then opens (an
    SQLite database, whose -wal and -shm files take its mode) starts private."""
    if sys.platform == "win32":
        return
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
