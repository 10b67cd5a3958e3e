"""One turn, assembled once for every front end: the conversation so far, the options (documents to answer
from among them), the persona (system prompt and sampling), and the toolbox (MCP and built-in tools less those
switched off, with its approver) become one `TurnSpec`; `run_turn` answers it and yields the same events to the CLI, the
window and the API.

    TurnSpec → run_turn(stream, spec) → RoundStarted, Chunk…, [CallProposed, CallDecided, CallFinished]…,
                                         LoopFinished

Without tools a turn is one round: its Chunks, then LoopFinished. With tools it is runtime.engine.tool_loop's
loop. The persona's system prompt and sampling are applied per answer, so `LoopFinished.messages` holds only
what was said (the conversation, the answers, calls and results), as a front end stores it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from runtime.engine.options import ChatOptions, Message
from runtime.engine.personas import Persona, apply_persona
from runtime.engine.tool_loop import (
    DEFAULT_ROUNDS,
    LoopEvent,
    LoopFinished,
    RoundStarted,
    Stream,
    read_answer,
    run_tool_loop,
)
from runtime.engine.tools import ToolRequest

if TYPE_CHECKING:  # the MCP SDK loads only when a turn has tools
    from runtime.chat.toolbox import McpToolbox

TurnEvent = LoopEvent


@dataclass(frozen=True)
class TurnSpec:
    """What one turn answers and with what: `messages` the conversation as the model reads it (earlier calls
    and results included), `options` (documents, sampling, format), `persona` (None: none), `toolbox` (None: no
    tools this turn), `max_rounds` answers at most, and the first answer's `first_choice` ("required": it
    must call)."""

    messages: Sequence[Message]
    options: ChatOptions
    persona: Persona | None = None
    toolbox: McpToolbox | None = None
    max_rounds: int = DEFAULT_ROUNDS
    first_choice: str = "auto"


def run_turn(stream: Stream, spec: TurnSpec, cancel: threading.Event | None = None) -> Iterator[TurnEvent]:
    """Answer `spec` through `stream(messages, options)` (one answer: Engine.stream_chat, or an EngineThread's).
    Yields the loop's events and ends with LoopFinished; a set `cancel` (or an answer that was cancelled)
    raises Cancelled."""
    cancel = cancel or threading.Event()
    chat, options = assemble(spec)
    added = len(chat) - len(spec.messages)  # the persona's system message, left out of LoopFinished
    if spec.toolbox is None:
        events = _one_round(stream, chat, options, cancel)
    else:
        box = spec.toolbox
        events = run_tool_loop(stream, chat, options, box, box.approve, spec.max_rounds, cancel, spec.first_choice)
    for event in events:
        if isinstance(event, LoopFinished) and added:
            event = replace(event, messages=event.messages[added:])
        yield event


def assemble(spec: TurnSpec) -> tuple[list[Message], ChatOptions]:
    """The chat and options of the turn's first answer: the persona's system prompt and sampling applied (a
    chat's own system message and the request's own sampling win), and, in a turn without a toolbox or
    tools of the request's own (an API client's), earlier calls and results shown but no tool offered."""
    chat = [dict(m) for m in spec.messages]
    options = spec.options
    if spec.toolbox is None and options.tools is None and any(m.get("role") == "tool" or m.get("tool_calls")
                                                               for m in chat):
        # Earlier calls and results are shown to the model as its template writes them; none is offered.
        options = replace(options, tools=ToolRequest((), "none"))
    if spec.persona is not None:  # only the request carries the persona: what is stored holds what was said
        chat, options = apply_persona(spec.persona, chat, options)
    return chat, options


def _one_round(
    stream: Stream, chat: list[Message], options: ChatOptions, cancel: threading.Event
) -> Iterator[TurnEvent]:
    yield RoundStarted(1)
    heard = yield from read_answer(stream, chat, options, cancel)
    yield LoopFinished([*chat, heard.message()], heard.last, 1, [], [heard.last])

