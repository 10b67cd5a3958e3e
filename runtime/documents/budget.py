"""One file's time budget for extraction. Extractors check it between pages, blocks and passages, so a file
that takes too long (a crafted PDF, a huge page) stops with a one-line reason and the folder goes on.

The check is cooperative: a single call into a parser (one PDF page's text, lexbor's parse of one page of HTML)
runs to its end. Those are bounded by each extractor's own caps (sizes, pages, nesting depth) instead.
"""

from __future__ import annotations

import time

from runtime.documents.blocks import ExtractError

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
