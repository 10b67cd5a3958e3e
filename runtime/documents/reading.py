"""Reading one file the walk found, and nothing else: not a link, pipe or other file swapped in under its name
since the walk.

The file is opened once, without following a link (O_NOFOLLOW) and without waiting (O_NONBLOCK: opening a
FIFO for reading would block until a writer comes); the open descriptor must then be a regular file with the
(st_dev, st_ino) the walk saw. Its bytes are read from that descriptor, and extraction works on those bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from runtime.documents.blocks import ExtractError

# Windows has neither flag: there a link is looked for just before opening (a narrower race, the best it allows),
# and a pipe cannot stand in a folder under a file's name.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_BLOCK = 1 << 20
UNKNOWN = (0, 0)  # no (st_dev, st_ino) from the walk: only "a regular file, not a link" is checked

REPLACED = "replaced by another file since the folder was walked: not read"
BECAME_LINK = "it became a link since the folder was walked: not followed"


@dataclass(frozen=True)
class Read:
    """A file's bytes with the size and modification time of the open file, taken before its bytes."""

    data: bytes
    size: int
    mtime_ns: int


def read_found(path: str, identity: tuple[int, int], max_bytes: int, follow: bool = False) -> Read:
    """The bytes of `path`, which the walk saw as `identity` (st_dev, st_ino); ExtractError with a one-line
    reason when it is no longer that regular file, or larger than `max_bytes`. `follow`: the user named this
    path, so a link there is followed (the identity still has to match what the walk saw through it).
    OSError (gone, permission denied) passes through."""
    if not follow and not _NOFOLLOW and os.path.islink(path):
        raise ExtractError(BECAME_LINK)
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _BINARY | (0 if follow else _NOFOLLOW))
    except OSError as e:
        # Linux and macOS say ELOOP for a link met with O_NOFOLLOW, FreeBSD EMLINK.
        if not follow and e.errno in (errno.ELOOP, errno.EMLINK):
            raise ExtractError(BECAME_LINK) from None
        raise
    try:
        st = os.fstat(fd)  # before reading: a change while it is read shows at the next sync
        if not stat.S_ISREG(st.st_mode):
            raise ExtractError(f"now {_kind(st.st_mode)}, not a regular file: not read")
        if identity != UNKNOWN and (st.st_dev, st.st_ino) != identity:
            raise ExtractError(REPLACED)
        if st.st_size > max_bytes:
            raise ExtractError(f"larger than the {max_bytes / 1e6:.3g} MB limit ({st.st_size / 1e6:.3g} MB)")
        data = _read_at_most(fd, max_bytes)
    finally:
        os.close(fd)
    return Read(data, st.st_size, st.st_mtime_ns)


def _read_at_most(fd: int, max_bytes: int) -> bytes:
    """Every byte of `fd` in blocks, refused past `max_bytes` (the file grew while it was read)."""
    blocks: list[bytes] = []
    total = 0
    while block := os.read(fd, _BLOCK):
        total += len(block)
        if total > max_bytes:
            raise ExtractError(f"grew past the {max_bytes / 1e6:.3g} MB limit while it was read")
        blocks.append(block)
    return b"".join(blocks)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "something else"


def within_roots(path: str, roots: list[str]) -> bool:
    """Whether `path`, every link in it resolved, lies in one of the added `roots` (resolved too): for a file
    left pending by an earlier run, which this run's walk did not see."""
    real = os.path.realpath(path)
    for root in roots:
        top = os.path.realpath(root)
        if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
            return True
    return False
