"""Finding the files under an added path: hidden entries and formats we do not read are passed over; links
that loop, dangle or lead out of the added folder, unreadable folders and oversized files are refused with
a reason. Links are never followed (one inside the folder leads to a file the walk finds under its own path)."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from runtime.documents.extract import detect_format

MAX_FILE_BYTES = 100 * 1000 * 1000


def display_path(path: str | bytes) -> str:
    """A path for people and JSON: bytes that are not UTF-8 (a name from another system) as U+FFFD."""
    raw = path if isinstance(path, bytes) else os.fsencode(path)
    return raw.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Found:
    path: str
    format: str
    size: int
    mtime_ns: int
    # (st_dev, st_ino) as the walk saw it: reading checks that the file opened is still this one, not a link or
    # a pipe swapped in since. (0, 0) where the OS's folder listing does not give it (Windows).
    identity: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class Refused:
    path: str
    reason: str


@dataclass
class Passed:
    """What a walk passed over without a word: hidden entries, other formats, links to inside the folder."""

    hidden: int = 0
    other: int = 0
    links: int = 0


def walk(
    root: str,
    passed: Passed,
    excluded: frozenset[str] = frozenset(),
    max_bytes: int = MAX_FILE_BYTES,
    cancel: threading.Event | None = None,
) -> Iterator[Found | Refused]:
    """Files under `root` (an absolute path; a file stands for itself) in name order. A missing root yields
    nothing: its files are gone. `excluded`: absolute paths removed from under an added folder."""
    try:
        st = os.stat(root)  # the root itself is followed: the user named it
    except FileNotFoundError:
        return
    except OSError as e:
        yield Refused(root, _os_reason(e))
        return
    if stat.S_ISREG(st.st_mode):
        yield _file(root, detect_format(root, named=True) or "text", st, max_bytes)
        return
    if not stat.S_ISDIR(st.st_mode):
        yield Refused(root, "not a regular file or folder")
        return
    top = os.path.realpath(root)
    stack = [root]
    while stack:
        if cancel is not None and cancel.is_set():
            return
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)  # reversed: the stack pops in order
        except OSError as e:
            yield Refused(folder, f"cannot open the folder: {e.strerror or e}")
            continue
        for entry in entries:
            if entry.path in excluded:
                continue
            if _hidden(entry):
                passed.hidden += 1
            elif entry.is_symlink():
                refused = _link(entry.path, top)
                if refused is None:
                    passed.links += 1
                else:
                    yield refused
            elif entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif not entry.is_file(follow_symlinks=False) or (fmt := detect_format(entry.name)) is None:
                passed.other += 1  # another format, or a pipe, socket or device
            else:
                try:
                    yield _file(entry.path, fmt, entry.stat(follow_symlinks=False), max_bytes)
                except OSError as e:  # gone since the folder was listed
                    yield Refused(entry.path, _os_reason(e))


def _file(path: str, fmt: str, st: os.stat_result, max_bytes: int) -> Found | Refused:
    if st.st_size > max_bytes:
        return Refused(path, f"larger than the {max_bytes / 1e6:.3g} MB limit ({st.st_size / 1e6:.3g} MB)")
    return Found(path, fmt, st.st_size, st.st_mtime_ns, (st.st_dev, st.st_ino))


def _hidden(entry: os.DirEntry[str]) -> bool:
    if entry.name.startswith("."):
        return True
    if os.name == "nt":  # Windows' hidden attribute (stat from the folder listing: no extra call)
        return bool(getattr(entry.stat(follow_symlinks=False), "st_file_attributes", 0) & stat.FILE_ATTRIBUTE_HIDDEN)
    return False


def _link(path: str, top: str) -> Refused | None:
    """A link's reason to be refused, or None for one that stays inside the added folder."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return Refused(path, "symlink loop")
        return Refused(path, f"broken link: {e.strerror or e}")
    target = os.path.realpath(path)
    if not _within(target, top):
        return Refused(path, f"link points outside the added folder, to {display_path(target)}")
    if stat.S_ISDIR(st.st_mode) and _within(os.path.realpath(os.path.dirname(path)), target):
        return Refused(path, "symlink loop: it leads back to a folder above it")
    return None


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _os_reason(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "symlink loop"
    return e.strerror or str(e)
