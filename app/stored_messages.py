"""What the window's store keeps of a chat, as plain records: a conversation's row, a stored message and how
an answer that called tools replays to the engine (`tool_rounds`, `chat_history`). No SQLite and no Qt here:
app/store.py reads and writes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

TOOL_TURN = "tool_turn"  # an answer's meta: the rounds of tool calls before its last words (`tool_rounds`)
TOOLS_UNUSED = "tools_unused"  # an answer's meta: True when tools were offered and the model called none
THINKING = "thinking"  # an answer's meta: a thinking model's thought, apart from its content (old files: none)
CALL_FIELDS = ("id", "name", "arguments", "server", "tool", "outcome", "result", "is_error", "elapsed_s")


@dataclass(frozen=True)
class StoredConversation:
    id: int
    title: str
    updated: float


@dataclass(frozen=True)
class StoredMessage:
    id: int
    role: str
    content: str
    meta: dict[str, Any] = field(default_factory=dict)

    def as_chat(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}

    def as_chats(self) -> list[dict[str, Any]]:
        """The message as the engine reads it: an answer that called tools first replays each round (its words
        and `tool_calls`, then a `tool` message per result), then says its last words."""
        out: list[dict[str, Any]] = []
        for r in tool_rounds(self.meta) if self.role == "assistant" else []:
            calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                     for c in r["calls"]]
            out.append({"role": "assistant", "content": r["content"], "tool_calls": calls})
            out += [{"role": "tool", "tool_call_id": c["id"], "name": c["name"], "content": c["result"]}
                    for c in r["calls"]]
        last: dict[str, Any] = dict(self.as_chat())
        thought = self.meta.get(THINKING) if self.role == "assistant" else None
        if isinstance(thought, str) and thought:  # the model's template keeps or drops it (runtime.engine.thinking)
            last["reasoning_content"] = thought
        out.append(last)
        return out


def tool_rounds(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """An answer's rounds of tool calls, each `{"content": words, "calls": [call, ...]}` with a call's fields
    (CALL_FIELDS: OpenAI's id, name and arguments; server, tool, outcome allowed/denied/stopped, the result the
    model read, whether it was an error, seconds). Malformed entries (an edited or imported
    file) are left out, so what is replayed is always a valid chat."""
    rounds = meta.get(TOOL_TURN)
    out: list[dict[str, Any]] = []
    for r in rounds if isinstance(rounds, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("calls"), list):
            continue
        calls = [
            {k: c.get(k) for k in CALL_FIELDS}
            for c in r["calls"]
            if isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("id", "name", "arguments", "result"))
        ]
        if calls:
            out.append({"content": r.get("content") if isinstance(r.get("content"), str) else "", "calls": calls})
    return out


def chat_history(messages: Sequence[StoredMessage]) -> list[dict[str, Any]]:
    """The stored messages as the engine reads them (`StoredMessage.as_chats`)."""
    return [m for message in messages for m in message.as_chats()]
