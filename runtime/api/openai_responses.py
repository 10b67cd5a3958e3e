"""OpenAI's Responses API as a dialect (runtime.api.dialects): `POST /v1/responses` answers a `response` whole,
or streams its events (`response.created`, `response.in_progress`; per output item `response.output_item.added`,
for a message `response.content_part.added`, `response.output_text.delta`s and their `.done`s, for a function
call `response.function_call_arguments.delta` and `.done`; `response.output_item.done`; then
`response.completed`, or `response.incomplete` when the token limit cut the answer). The request is read in
runtime.api.responses_request. Each event has its `sequence_number`, as OpenAI's do.

A function call's arguments stream as `response.function_call_arguments.delta`s as the model writes them,
where its opener was the model's own token, else as one delta once the call is complete; a call that fails
after its item was added ends the stream with an `error` event, the item never done (runtime.api.blocks;
docs/api.md, "Tool calls"). A thinking model's thought is a `reasoning` item before the answer
(`response.reasoning_text.delta`s and `.done`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from runtime.api.blocks import BlockStream, Kind, layout
from runtime.api.dialects import Event, named
from runtime.api.requests import ChatCall
from runtime.api.responses import ApiError, api_facts, new_id
from runtime.api.responses_request import ResponsesCall, parse_responses
from runtime.engine.answer import Chunk
from runtime.engine.options import ChatOptions
from runtime.engine.tools import CallDelta

CUT = ("max_tokens", "length")  # stop reasons of an answer the token limit (or the context) cut short


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    content = [part] if status == "completed" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, thought: str, status: str = "completed") -> dict[str, Any]:
    """A thought as a `reasoning` item: its text as `reasoning_text` content, no summary."""
    content = [{"type": "reasoning_text", "text": thought}] if status == "completed" else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def call_item(call: CallDelta, request: ChatCall, item_id: str | None = None, status: str = "completed"
              ) -> dict[str, Any]:
    """A call as a `function_call` item; one of a namespace tool's functions names its namespace too."""
    item = {"type": "function_call", "id": item_id or new_id("fc_"), "call_id": call.id, "name": call.name,
            "arguments": call.arguments, "status": status}
    namespace = request.namespaces.get(call.name or "") if isinstance(request, ResponsesCall) else None
    return item | {"namespace": namespace} if namespace else item


def response(
    response_id: str, created: int, model: str, call: ChatCall, output: list[dict[str, Any]], last: Chunk | None
) -> dict[str, Any]:
    """The `response` object: in progress (no `last` yet), completed, or incomplete when the limit cut it."""
    echo = call.echo if isinstance(call, ResponsesCall) else {}
    out: dict[str, Any] = {
        "id": response_id, "object": "response", "created_at": created, "model": model, "output": output,
        "status": "in_progress", "error": None, "incomplete_details": None, "previous_response_id": None,
        "usage": None, **echo,
    }  # fmt: skip
    if last is not None:
        s = last.stats
        cut = s.stop_reason in CUT
        out["status"] = "incomplete" if cut else "completed"
        out["incomplete_details"] = {"reason": "max_output_tokens"} if cut else None
        out["usage"] = {
            "input_tokens": s.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},  # not told: PRIVATE_FACTS
            "output_tokens": s.tokens, "output_tokens_details": {"reasoning_tokens": s.thinking_tokens},
            "total_tokens": s.prompt_tokens + s.tokens,
        }  # fmt: skip
        out["specquant"] = api_facts(last)
    return out


class Responses:
    """`POST /v1/responses`."""

    prompt = "input"
    ping = None

    def parse(self, body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
        return parse_responses(body, base, n_ctx)

    def whole(self, model: str, call: ChatCall, chunks: list[Chunk]) -> dict[str, Any]:
        output = layout(chunks, lambda thought: reasoning_item(new_id("rs_"), thought),
                        lambda text: message_item(new_id("msg_"), text), lambda d: call_item(d, call))
        return response(new_id("resp_"), int(time.time()), model, call, output, chunks[-1])

    def stream(self, model: str, call: ChatCall) -> ResponseStream:
        return ResponseStream(model, call)


class ResponseStream(BlockStream):
    """A streamed response: its blocks (runtime.api.blocks) as output items, each `response.output_item.added`,
    its deltas, and its `.done`s."""

    def __init__(self, model: str, call: ChatCall) -> None:
        super().__init__()
        self.id, self.created, self.model, self.request = new_id("resp_"), int(time.time()), model, call
        self.sequence = 0
        self.output: list[dict[str, Any]] = []  # the items done
        self.item = ""  # the open (or last) item's id

    def start(self, prompt_tokens: int | None) -> list[Event]:
        head = response(self.id, self.created, self.model, self.request, [], None)
        return [self._event("response.created", response=head), self._event("response.in_progress", response=head)]

    def opened(self, kind: Kind) -> list[Event]:
        self.item = new_id({"thought": "rs_", "text": "msg_", "call": "fc_"}[kind])
        events = [self._event("response.output_item.added", output_index=self.index, item=self._item(kind, ""))]
        if kind == "text":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(self._event("response.content_part.added", **self._at(), content_index=0, part=part))
        return events

    def added(self, kind: Kind, text: str) -> list[Event]:
        if kind == "thought":
            return [self._event("response.reasoning_text.delta", **self._at(), content_index=0, delta=text)]
        if kind == "text":
            return [self._event("response.output_text.delta", **self._at(), content_index=0, delta=text, logprobs=[])]
        return [self._event("response.function_call_arguments.delta", **self._at(), delta=text)]

    def closed(self, kind: Kind) -> list[Event]:
        item = self._item(kind, self.said, "completed")
        if kind == "thought":
            events = [self._event("response.reasoning_text.done", **self._at(), content_index=0, text=self.said)]
        elif kind == "text":
            events = [self._event("response.output_text.done", **self._at(), content_index=0, text=self.said,
                                  logprobs=[]),
                      self._event("response.content_part.done", **self._at(), content_index=0,
                                  part=item["content"][0])]
        else:
            events = [self._event("response.function_call_arguments.done", **self._at(), name=item["name"],
                                  arguments=self.said)]
        self.output.append(item)
        return [*events, self._event("response.output_item.done", output_index=self.index, item=item)]

    def end(self, last: Chunk) -> list[Event]:
        events = self.close_all()
        done = response(self.id, self.created, self.model, self.request, self.output, last)
        return [*events, self._event(f"response.{done['status']}", response=done)]

    def failure(self, error: ApiError) -> list[Event]:
        return [self._event("error", code=error.code or error.kind, message=error.message, param=error.param)]

    def _item(self, kind: Kind, said: str, status: str = "in_progress") -> dict[str, Any]:
        """The open block's item, holding `said`, as it stands (`in_progress`) or done (`completed`)."""
        if kind == "thought":
            return reasoning_item(self.item, said, status)
        if kind == "text":
            return message_item(self.item, said, status)
        assert self.tool_call is not None
        return call_item(replace(self.tool_call, arguments=said), self.request, self.item, status)

    def _event(self, kind: str, **fields: Any) -> Event:
        self.sequence += 1
        return named({"type": kind, "sequence_number": self.sequence - 1, **fields})

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.item, "output_index": self.index}


RESPONSES = Responses()
