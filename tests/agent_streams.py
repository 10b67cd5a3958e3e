"""A coding agent's request sent to `specquant serve` as the client sends it (its method, path, headers and
body), its stream of server-sent events read as the client reads it, and the stream checked whole in its
dialect (Anthropic's Messages, OpenAI's Responses or chat completions): what tests/test_api_agents.py and
tests/test_api_agents_captured.py share."""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from typing import Any

from tests.test_server import Served


@dataclass
class Sse:
    """One thing read off a stream: an event (its name and decoded data) or a comment."""

    event: str | None
    data: Any
    comment: str | None = None
    at: float = 0.0  # seconds since the request was sent


def endpoint(sent: dict[str, Any]) -> str:
    return sent["path"].split("?")[0]


def send(
    server: Served, sent: dict[str, Any], body: dict[str, Any], timeout: float = 300
) -> tuple[http.client.HTTPConnection, Any]:
    host, port = server.base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    conn.request(sent["method"], sent["path"], json.dumps(body).encode(), sent["headers"])
    return conn, conn.getresponse()


def stream(server: Served, sent: dict[str, Any], body: dict[str, Any], timeout: float = 300) -> list[Sse]:
    """The request as the client sends it, and its whole stream of server-sent events (and comments)."""
    started = time.monotonic()
    conn, response = send(server, sent, body, timeout)
    try:
        assert response.status == 200, response.read()
        assert response.getheader("content-type", "").startswith("text/event-stream")
        out: list[Sse] = []
        fields: dict[str, str] = {}
        for raw in response:
            line = raw.decode("utf-8").rstrip("\r\n")
            at = time.monotonic() - started
            if line.startswith(":"):
                out.append(Sse(None, None, line[1:].strip(), at))
            elif not line:
                if fields:
                    data = fields.get("data", "")
                    out.append(Sse(fields.get("event"), data if data == "[DONE]" else json.loads(data), None, at))
                    fields = {}
            else:
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                fields[name] = fields[name] + "\n" + value if name in fields else value
        return out
    finally:
        conn.close()


def events(got: list[Sse]) -> list[Sse]:
    return [e for e in got if e.comment is None]


def answer_of(sent: dict[str, Any], got: list[Sse]) -> tuple[str, int, str]:
    """The stream (its events) checked whole as its client reads it: (the text it carried, its tool calls, how it
    finished)."""
    if endpoint(sent) == "/v1/messages":
        kinds = [e.event for e in got]
        assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], kinds
        assert all(e.event == e.data["type"] for e in got)
        blocks = [e for e in got if e.event not in ("message_start", "ping", "message_delta", "message_stop")]
        opened: list[int] = []
        for e in blocks:  # each block opened, its deltas, closed, in order
            if e.event == "content_block_start":
                opened.append(e.data["index"])
                assert e.data["index"] == len(opened) - 1
            else:
                assert e.data["index"] == opened[-1], e.data
        assert [e.event for e in blocks if e.event != "content_block_delta"] == [
            "content_block_start", "content_block_stop"] * len(opened)
        text = "".join(e.data["delta"].get("text", "") for e in blocks if e.event == "content_block_delta")
        calls = sum(e.data["content_block"]["type"] == "tool_use" for e in blocks if e.event == "content_block_start")
        assert got[-2].data["usage"]["input_tokens"] > 0
        return text, calls, got[-2].data["delta"]["stop_reason"]
    if endpoint(sent) == "/v1/responses":
        kinds = [e.event for e in got]
        assert kinds[:2] == ["response.created", "response.in_progress"], kinds
        assert kinds[-1] in ("response.completed", "response.incomplete"), kinds
        assert [e.data["sequence_number"] for e in got] == list(range(len(got)))
        done = got[-1].data["response"]
        items = [e.data["item"] for e in got if e.event == "response.output_item.done"]
        assert done["output"] == items and done["usage"]["input_tokens"] > 0
        text = "".join(e.data["delta"] for e in got if e.event == "response.output_text.delta")
        return text, sum(i["type"] == "function_call" for i in items), done["status"]
    assert got[-1].data == "[DONE]"
    chunks = [e.data for e in got[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1
    if sent["body"].get("stream_options", {}).get("include_usage"):
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] > 0
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    text = "".join(d.get("content") or "" for d in deltas)
    return text, sum("id" in t for d in deltas for t in d.get("tool_calls", ())), finish[0]
