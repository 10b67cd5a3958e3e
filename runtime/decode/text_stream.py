"""Tokens in, text out: the incremental UTF-8 decoder, the stop strings' hold-back and the per-character
draft flags of one streamed answer. A multi-byte character split across tokens is never emitted in halves,
and text that may be the start of a stop string waits until it is known not to be one.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Mapping, Sequence


class TextStream:
    """`marks`: tokens shown as a text of their own instead of their bytes (a tool call's opener token, as
    runtime.engine.call_parser reads it): a character split before one is complete there (replaced)."""

    def __init__(self, token_bytes: Callable[[int], bytes], stops: Sequence[str] = (),
                 marks: Mapping[int, str] | None = None) -> None:
        self.token_bytes = token_bytes
        self.stops = tuple(stops)
        self.marks = dict(marks or {})
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.held = ""  # text that might be the start of a stop string
        self.held_flags: tuple[bool, ...] = ()
        self.stopped = False

    def add(self, tokens: Sequence[int], flags: Sequence[bool]) -> tuple[str, tuple[bool, ...], bool]:
        """(text safe to show now, its per-character draft flags, whether a stop string was reached)."""
        for tok, flag in zip(tokens, flags, strict=True):
            mark = self.marks.get(tok)
            if mark is not None:
                piece = self.decoder.decode(b"", final=True) + mark
                self.decoder.reset()
            else:
                piece = self.decoder.decode(self.token_bytes(tok))
            self.held += piece
            self.held_flags += (flag,) * len(piece)
        before = len(self.held)
        emit, self.held, self.stopped = split_stop(self.held, self.stops)
        emit_flags, self.held_flags = self.held_flags[: len(emit)], self.held_flags[before - len(self.held) :]
        return emit, emit_flags, self.stopped

    def finish(self) -> tuple[str, tuple[bool, ...]]:
        """What is left once the answer has ended: the held text and any incomplete character (replaced), or
        nothing after a stop string."""
        if self.stopped:
            return "", ()
        tail = self.held + self.decoder.decode(b"", final=True)
        return tail, self.held_flags + (False,) * (len(tail) - len(self.held_flags))


def split_stop(text: str, stops: Sequence[str]) -> tuple[str, str, bool]:
    """(text safe to emit, text held back, whether a stop string was found)."""
    if not stops:
        return text, "", False
    for s in stops:
        i = text.find(s)
        if i >= 0:
            return text[:i], "", True
    keep = max((len(s) - 1 for s in stops), default=0)
    # Hold back only a suffix that could still grow into a stop string.
    for n in range(min(keep, len(text)), 0, -1):
        if any(s.startswith(text[-n:]) for s in stops):
            return text[:-n], text[-n:], False
    return text, "", False
