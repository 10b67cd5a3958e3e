"""What Anthropic's messages and OpenAI's responses share (runtime.api.anthropic_messages,
runtime.api.openai_responses): an answer as a row of blocks (its thought, its text, each tool call), laid out
whole by `layout` and streamed by a `BlockStream`, which opens, adds to and closes each block in turn; each
dialect says only what its blocks and events look like. (Chat completions have no blocks: a call's pieces are
its `delta.tool_calls`, runtime.api.responses.call_deltas.)

A call's block opens with its first piece (its id and a name already checked: runtime.engine.call_parser), takes
its arguments as the model writes them, and closes with its last piece, once the call is complete and passed its
check. A streamed call that fails after it opened is never closed: the stream ends with its dialect's error
(runtime.api.answers.failed_call), so that no client takes what it had of the call for one to make.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from runtime.api.dialects import Event
from runtime.engine.answer import Chunk
from runtime.engine.tools import CallDelta, assemble_calls

Kind = Literal["thought", "text", "call"]
Block = TypeVar("Block")


def whole_calls(chunks: Sequence[Chunk]) -> list[CallDelta]:
    """The answer's calls, each whole (a streamed call's pieces joined), in order."""
    calls = assemble_calls([d for c in chunks for d in c.calls])
    return [CallDelta(i, c["id"], c["function"]["name"], c["function"]["arguments"]) for i, c in enumerate(calls)]


def layout(
    chunks: Sequence[Chunk],
    thought: Callable[[str], Block],
    text: Callable[[str], Block],
    call: Callable[[CallDelta], Block],
) -> list[Block]:
    """A whole answer's blocks: its thought, if any; its text (even empty, when it made no call); its calls."""
    said, words, calls = "".join(c.thinking for c in chunks), "".join(c.text for c in chunks), whole_calls(chunks)
    return ([thought(said)] if said else []) + ([text(words)] if words or not calls else []) + [call(c) for c in calls]


class BlockStream:
    """A streamed answer's blocks, one open at a time: a thought opens at its first piece and closes when the
    answer begins; the text opens at its first piece and closes before a call's block; each call is a block of
    its own; an answer with no text and no call still gets one empty text block, as a whole one does. A subclass says
    what opening (`opened`), adding to (`added`) and closing (`closed`) each kind of block sends."""

    def __init__(self) -> None:
        self.blocks = 0  # blocks opened so far: the open (or last) one's index is blocks - 1
        self.kind: Kind | None = None  # the open block's
        self.said = ""  # what the open block holds so far: a thought, text or a call's arguments
        self.tool_call: CallDelta | None = None  # the last call's first piece: its index, id and name
        self.answered = False  # a text or a call block opened

    @property
    def index(self) -> int:
        return self.blocks - 1

    def opened(self, kind: Kind) -> list[Event]:
        raise NotImplementedError

    def added(self, kind: Kind, text: str) -> list[Event]:
        raise NotImplementedError

    def closed(self, kind: Kind) -> list[Event]:
        raise NotImplementedError

    def piece(self, chunk: Chunk) -> list[Event]:
        events = self._add("thought", chunk.thinking) + self._add("text", chunk.text)
        for delta in chunk.calls:
            if delta.problem is not None:
                break  # a failed call: the stream ends with an error (runtime.api.answers), its block open
            if delta.id is not None:
                self.tool_call = delta
            events += self._add("call", delta.arguments, new=delta.id is not None)
            if delta.done:
                events += self._close()
        return events

    def close_all(self) -> list[Event]:
        """The answer's end: its open block closed (one with no text and no call gets an empty text block)."""
        events = self._close()
        if not self.answered:
            events += self._add("text", "", new=True) + self._close()
        return events

    def _add(self, kind: Kind, text: str, new: bool = False) -> list[Event]:
        events: list[Event] = []
        if new or (text and self.kind != kind):
            events += self._close()
            self.blocks, self.kind, self.said = self.blocks + 1, kind, ""
            self.answered = self.answered or kind != "thought"
            events += self.opened(kind)
        if text:
            self.said += text
            events += self.added(kind, text)
        return events

    def _close(self) -> list[Event]:
        if self.kind is None:
            return []
        events, self.kind = self.closed(self.kind), None
        return events
