"""An assistant that acts: the model calls tools, the user approves each call, the tool runs, its result goes
back as a tool message, and the model goes on, for up to `max_rounds` answers.

    model → tool calls (grammar-held, runtime.engine.tools) → approval → the tool runs → tool message → model

Where the tools come from is a `Toolbox` (MCP servers through runtime.mcp, the documents search below, or a
test's own); who approves is an `Approve` callback (the CLI's prompt, the window's dialog, a fixed policy).
The loop never lets a tool's result decide anything: a result is text in a tool message, read by the model
only; approvals come from the callback alone. Nor is every call the model writes a call: each is checked first
(runtime.engine.call_check: an offered tool, arguments its schema accepts), and one that fails is neither put
to the approver nor run; the model reads why, as the call's result (`CallRefused`).

Each round is one answer on the same chat, so the engine keeps the KV cache of the conversation so far and
round two starts with only the new call and result to read (`Chunk.stats.reused_tokens` says how much).
Front ends read the loop as events: `RoundStarted`, the answer's `Chunk`s, `CallProposed`, `CallDecided`,
`CallFinished`, `CallRefused`, and `LoopFinished` with the whole chat.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from runtime.engine.answer import Chunk
from runtime.engine.call_check import call_problem
from runtime.engine.options import ChatOptions, Message
from runtime.engine.tools import Tool, ToolRequest, assemble_calls
from runtime.errors import Cancelled, UserError
from runtime.mcp.approval import DENIED  # what the model reads for a refused call, whoever refused it
from runtime.mcp.results import ToolResult  # one result type, built-in tools' and MCP servers' alike

DEFAULT_ROUNDS = 8


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: OpenAI's id, the tool's name and its arguments as the model wrote them."""

    id: str
    name: str
    arguments: str

    def parsed(self) -> dict[str, Any]:
        """The arguments as an object (the grammar makes them one; {} for an empty text)."""
        value = json.loads(self.arguments) if self.arguments.strip() else {}
        if not isinstance(value, dict):
            raise UserError(f"the call to {self.name} has arguments that are not an object")
        return value


class Toolbox(Protocol):
    """Tools and how to run them."""

    def tools(self) -> Sequence[Tool]: ...

    def source(self, name: str) -> str:
        """Where the tool `name` runs, as the approval shows it (an MCP server's name, or "built-in")."""
        ...

    def call(self, name: str, arguments: dict[str, Any], cancel: threading.Event) -> ToolResult: ...


# (call, source) → True: run it; False: refused (the model reads DENIED); a text: refused, the model reads that.
Approve = Callable[["ToolCall", str], "bool | str"]


@dataclass(frozen=True)
class RoundStarted:
    n: int  # 1-based


@dataclass(frozen=True)
class CallProposed:
    call: ToolCall
    source: str


@dataclass(frozen=True)
class CallDecided:
    call: ToolCall
    allowed: bool


@dataclass(frozen=True)
class CallFinished:
    call: ToolCall
    result: ToolResult


@dataclass(frozen=True)
class CallRefused:
    """A call that failed the check (runtime.engine.call_check): not asked about, not run; `result` tells the
    model why."""

    call: ToolCall
    result: ToolResult


@dataclass(frozen=True)
class LoopFinished:
    """The chat with every round's answers, calls and results; the last answer's last Chunk; the rounds run."""

    messages: list[Message]
    last: Chunk
    rounds: int
    calls: list[tuple[ToolCall, bool, ToolResult]] = field(default_factory=list)  # (call, allowed, result)
    round_stats: list[Chunk] = field(default_factory=list)  # each round's last Chunk


LoopEvent = RoundStarted | Chunk | CallProposed | CallDecided | CallFinished | CallRefused | LoopFinished
Stream = Callable[[list[Message], ChatOptions], Iterator[Chunk]]


@dataclass(frozen=True)
class Heard:
    """One answer read whole off its stream: its words, a thinking model's thought, the pieces of its calls
    (`Chunk.calls`) and its last Chunk."""

    text: str
    thinking: str
    deltas: list[dict[str, Any]]
    last: Chunk

    def message(self) -> Message:
        """The answer as the chat's assistant turn. A thinking model's thought goes with it; its template keeps
        or drops it (runtime.engine.thinking)."""
        said: Message = {"role": "assistant", "content": self.text}
        if self.thinking:
            said["reasoning_content"] = self.thinking
        return said


def read_answer(
    stream: Stream, chat: list[Message], options: ChatOptions, cancel: threading.Event
) -> Generator[Chunk, None, Heard]:
    """One answer (`yield from` it): its Chunks as they come, then what it said. A set `cancel`, or an answer
    that was cancelled or never began, raises Cancelled."""
    text: list[str] = []
    thought: list[str] = []
    deltas: list[dict[str, Any]] = []
    last: Chunk | None = None
    for chunk in stream(chat, options):
        text.append(chunk.text)
        thought.append(chunk.thinking)
        deltas.extend(chunk.calls)
        last = chunk
        yield chunk
    if last is None or cancel.is_set() or last.stats.stop_reason == "cancelled":
        raise Cancelled("stopped during the answer")
    return Heard("".join(text), "".join(thought), deltas, last)


def run_tool_loop(
    stream: Stream,
    messages: Sequence[Message],
    options: ChatOptions,
    toolbox: Toolbox,
    approve: Approve,
    max_rounds: int = DEFAULT_ROUNDS,
    cancel: threading.Event | None = None,
    first_choice: str = "auto",
) -> Iterator[LoopEvent]:
    """Answer `messages`, running the tools the model calls (those `approve` allows) and answering again
    with their results, until an answer calls nothing or `max_rounds` answers were written (the last of
    them may not call: its tools are shown but `tool_choice` is none). `stream(messages, options)` is one
    answer (Engine.stream_chat, or an EngineThread's). A set `cancel` stops a running answer or tool call:
    Cancelled is raised. `first_choice`: the first answer's `tool_choice` ("required": it must call)."""
    if max_rounds < 1:
        raise UserError(f"max rounds {max_rounds} must be at least 1")
    cancel = cancel or threading.Event()
    tools = tuple(toolbox.tools())
    chat = [dict(m) for m in messages]
    done: list[tuple[ToolCall, bool, ToolResult]] = []
    rounds: list[Chunk] = []
    answer_now = False  # the last round only repeated calls whose results the model has: it must answer
    for n in range(1, max_rounds + 1):
        yield RoundStarted(n)
        choice = (first_choice if n == 1 else "auto") if n < max_rounds and not answer_now else "none"
        # A call, its result, then on; a call that fails the check comes as a call, refused below
        request = ToolRequest(tools, choice, parallel=False, refused_as_text=False) if tools else None
        heard = yield from read_answer(stream, chat, replace(options, tools=request), cancel)
        rounds.append(heard.last)
        calls = [ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                 for c in assemble_calls(heard.deltas)]
        if not calls:
            chat.append(heard.message())
            yield LoopFinished(chat, heard.last, n, done, rounds)
            return
        if {_key(c) for c in calls} <= {_key(call) for call, _, _ in done}:
            # Small models often call again with the same arguments after the result came back (Qwen2.5-Coder
            # 1.5B, greedy, on issue 50's question, until the rounds ran out, then said nothing): the model
            # has those results, so the calls are not run again and the next round must answer with text.
            answer_now = True
            continue
        chat.append({**heard.message(), "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ]})
        for call in calls:
            problem = call_problem(call.name, call.arguments, request.callable if request is not None else ())
            if problem is not None:
                result = ToolResult(f"error: this call was not run: {problem}", True)
                done.append((call, False, result))
                yield CallRefused(call, result)
                chat.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.text})
                continue
            source = toolbox.source(call.name)
            yield CallProposed(call, source)
            verdict = approve(call, source)
            allowed = verdict is True
            yield CallDecided(call, allowed)
            refusal = verdict if isinstance(verdict, str) and verdict else DENIED
            result = _run(toolbox, call, source, cancel) if allowed else ToolResult(refusal, source=source)
            if cancel.is_set():
                raise Cancelled("stopped during a tool call")
            done.append((call, allowed, result))
            yield CallFinished(call, result)
            chat.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.text})
    raise AssertionError("unreachable: the last round cannot call")  # pragma: no cover


def _key(call: ToolCall) -> tuple[str, str]:
    """A call's name and arguments, the same however the model laid the JSON out."""
    try:
        return call.name, json.dumps(json.loads(call.arguments), sort_keys=True)
    except ValueError:
        return call.name, call.arguments


def _run(toolbox: Toolbox, call: ToolCall, source: str, cancel: threading.Event) -> ToolResult:
    """The call's result; arguments that are not an object, and a tool that raises, are error results the
    model reads (it may try again), never an end of the loop."""
    started = time.monotonic()
    try:
        return toolbox.call(call.name, call.parsed(), cancel)
    except (ValueError, UserError) as e:
        return ToolResult(f"error: {e}", True, time.monotonic() - started, source)
