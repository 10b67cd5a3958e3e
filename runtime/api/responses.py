"""OpenAI's response shapes for chat completions, built from the Engine's Chunks: a whole `chat.completion`,
the `chat.completion.chunk`s of a stream, the usage chunk, and errors (`ApiError`). The pieces both endpoints
share (usage, finish_reason, our `specquant` facts) are here too; runtime.api.completions shapes the text
endpoint's answers with them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from runtime.engine.answer import Chunk, TokenChoice
from runtime.engine.summary import answer_facts
from runtime.engine.tools import CallDelta, assemble_calls

FINISH_REASON = {"eos": "stop", "stop": "stop", "max_tokens": "length", "length": "length"}
# What one client must not learn of another's: how much of its prompt the shared KV cache already held.
PRIVATE_FACTS = ("reused_tokens",)


class ApiError(Exception):
    """An HTTP error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def api_facts(last: Chunk) -> dict[str, Any]:
    """The answer's `specquant` object for API clients: the window's facts, less what tells of other chats."""
    return {k: v for k, v in answer_facts(last).items() if k not in PRIVATE_FACTS}


def new_id(prefix: str) -> str:
    """A response's or item's id for every dialect: `prefix` (with its separator, "chatcmpl-", "msg_", ...) and
    24 random hex digits, as the official APIs shape theirs."""
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def chat_usage(last: Chunk) -> dict[str, int]:
    s = last.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.tokens, "total_tokens": s.prompt_tokens + s.tokens}


def finish_reason(last: Chunk, called: bool = False) -> str:
    """OpenAI's finish_reason: "tool_calls" when an answer that ended by itself made calls."""
    reason = FINISH_REASON.get(last.stats.stop_reason or "", "stop")
    return "tool_calls" if called and reason == "stop" else reason


def logprobs_content(choices: Sequence[TokenChoice]) -> list[dict[str, Any]]:
    """`logprobs.content`: each token's text, log-probability, bytes and its `top_logprobs`."""
    return [
        {
            "token": c.text,
            "logprob": c.logprob,
            "bytes": list(c.bytes),
            "top_logprobs": [{"token": t, "logprob": x, "bytes": list(b)} for t, b, x in c.top],
        }
        for c in choices
    ]


def call_deltas(deltas: Sequence[CallDelta]) -> list[dict[str, Any]]:
    """`delta.tool_calls`: a call's first piece has its id, type and name; later ones add to its arguments (a
    streamed call's last piece, or the one that says it failed, may add nothing: not sent)."""
    out = []
    for d in deltas:
        if d.id is None and not d.arguments:
            continue
        item: dict[str, Any] = {"index": d.index}
        function: dict[str, str] = {"arguments": d.arguments}
        if d.id is not None:
            item |= {"id": d.id, "type": "function"}
            function = {"name": d.name or "", **function}
        out.append(item | {"function": function})
    return out


def completion(
    call_id: str,
    model: str,
    text: str,
    last: Chunk,
    created: int | None = None,
    calls: Sequence[CallDelta] = (),
    logprobs: Sequence[TokenChoice] | None = None,
    thinking: str = "",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if thinking:  # a thinking model's thought, as llama-server and DeepSeek's API return it
        message["reasoning_content"] = thinking
    if calls:
        message["tool_calls"] = assemble_calls(calls)
    return {
        "id": call_id,
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(last, bool(calls)),
                "logprobs": None if logprobs is None else {"content": logprobs_content(logprobs)},
            }
        ],
        "usage": chat_usage(last),
        "specquant": api_facts(last),
    }


def stream_chunk(
    call_id: str,
    model: str,
    created: int,
    delta: dict[str, Any],
    finish: Chunk | None = None,
    logprobs: Sequence[TokenChoice] | None = None,
    called: bool = False,
) -> dict[str, Any]:
    """One `chat.completion.chunk`; the one with `finish` (the last Chunk) carries our facts. Never usage: as
    OpenAI's, only the extra last chunk of `include_usage` has it (a client adds up every usage it sees)."""
    out: dict[str, Any] = {
        "id": call_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": None if finish is None else finish_reason(finish, called),
                "logprobs": None if logprobs is None else {"content": logprobs_content(logprobs)},
            }
        ],
    }
    if finish is not None:
        out["specquant"] = api_facts(finish)
    return out


def usage_chunk(piece: dict[str, Any], last: Chunk) -> dict[str, Any]:
    """`stream_options.include_usage`: after the stream's last `piece`, one like it with no choices and the
    usage (the facts are on the finishing chunk already)."""
    head = {k: piece[k] for k in ("id", "object", "created", "model")}
    return head | {"choices": [], "usage": chat_usage(last)}
