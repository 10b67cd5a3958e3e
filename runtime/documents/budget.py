"""One file's budgets for extraction: time, and the memory its decompressed parts may take.

Memory: an archive (a DOCX's zip) is decompressed in blocks against a byte count fixed before it is opened,
whatever its headers declare, so no file can push the machine into swap: FILE_MEMORY_MAX at most, and on a
small machine 1/32 of its RAM (psutil), never under FILE_MEMORY_MIN. A file refused for it says so in its
reason ("... past the 24 MiB of XML one file may take: 300 MiB of memory on this machine").

One file's time budget for extraction. Extractors check it between pages, blocks and passages, so a file
that takes too long (a crafted PDF, a huge page) stops with a one-line reason and the folder goes on.

The check is cooperative: a single call into a parser (one PDF page's text, lexbor's parse of one page of HTML)
runs to its end. Those are bounded by each extractor's own caps (sizes, pages, nesting depth) instead.
"""

from __future__ import annotations

import functools
import time

from runtime.documents.blocks import ExtractError

FILE_MEMORY_MAX = 300 * 2**20  # what one file's extraction may take at most, on any machine
FILE_MEMORY_MIN = 64 * 2**20  # and at least: below it a real report would be refused (a 2 GB machine)
RAM_SHARE = 32  # of the machine's RAM: 256 MiB on 8 GB, 128 MiB on 4 GB


def file_memory_budget(total_ram: int | None = None) -> int:
    """The bytes one file's extraction may take on a machine of `total_ram` bytes (None: this one, psutil)."""
    if total_ram is None:
        total_ram = _total_ram()
    return max(FILE_MEMORY_MIN, min(FILE_MEMORY_MAX, total_ram // RAM_SHARE))


@functools.cache
def _total_ram() -> int:
    import psutil

    return int(psutil.virtual_memory().total)

# Seconds one file's extraction may take. The largest real files measured take a few seconds here (a 1.9 MB
# HTML book 0.2 s, a 200-page PDF 0.4 s); two minutes leaves room for a slow machine under load.
MAX_FILE_SECONDS = 120.0


class Deadline:
    """A point in time past which `check` raises ExtractError; `seconds` None never expires."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = seconds
        self._end = None if seconds is None else time.monotonic() + seconds

    def check(self) -> None:
        if self._end is not None and time.monotonic() > self._end:
            raise ExtractError(f"took longer than the {self.seconds:g} s allowed to read one file")


NO_DEADLINE = Deadline()
