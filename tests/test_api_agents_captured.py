"""The requests the real coding agents sent in one headless turn (tests/data/agents/captured/: Claude Code 2.1.197,
Codex CLI 0.171.0 and OpenCode 1.18.33, run with docs/api.md's recipes against tests/agent_clients.py's capture
server; bodies and headers as sent, this machine's ids and paths replaced). Each is read whole in its client's
dialect, nothing refused, and the ones that fit the shared demo server's context (the title requests) are answered
there, their whole streams checked as their clients read them. The main turns hold 9,000 to 23,000 tokens:
tests/test_real_agents.py has the clients themselves send them to a server with the context for them.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtime.api.anthropic_request import parse_count, parse_messages
from runtime.api.requests import parse_chat
from runtime.api.responses_request import parse_responses
from runtime.engine.options import ChatOptions
from tests.test_server import Served

CAPTURED = Path(__file__).parent / "data" / "agents" / "captured"
NAMES = sorted(p.stem for p in CAPTURED.glob("*.json"))
SHORT = 40  # the replays' token limit: the demo model would otherwise write to the context's end
LIMIT = {"/v1/messages": "max_tokens", "/v1/chat/completions": "max_tokens", "/v1/responses": "max_output_tokens"}
PARSE = {"/v1/messages": parse_messages, "/v1/chat/completions": parse_chat, "/v1/responses": parse_responses}


def capture(name: str) -> dict[str, Any]:
    return json.loads((CAPTURED / f"{name}.json").read_text())


def endpoint(sent: dict[str, Any]) -> str:
    return sent["path"].split("?")[0]


def functions(sent: dict[str, Any]) -> list[str]:
    """The names of the function tools a request offers (inside Codex's namespaces too; not hosted tools)."""
    names = []
    for t in sent["body"].get("tools", ()):
        if t.get("type") == "namespace":
            names += [f["name"] for f in t["tools"]]
        elif "function" in t:  # chat completions
            names.append(t["function"]["name"])
        elif "input_schema" in t or t.get("type") == "function":  # Anthropic's client tools; Responses' functions
            names.append(t["name"])
    return names


@dataclass
class Sse:
    """One thing read off a stream: an event (its name and decoded data) or a comment."""

    event: str | None
    data: Any
    comment: str | None = None
    at: float = 0.0  # seconds since the request was sent


def send(server: Served, sent: dict[str, Any], body: dict[str, Any]) -> tuple[http.client.HTTPConnection, Any]:
    host, port = server.base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    conn.request(sent["method"], sent["path"], json.dumps(body).encode(), sent["headers"])
    return conn, conn.getresponse()


def stream(server: Served, sent: dict[str, Any], body: dict[str, Any]) -> list[Sse]:
    """The request as the client sends it, and its whole stream of server-sent events (and comments)."""
    started = time.monotonic()
    conn, response = send(server, sent, body)
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


# --- a stream checked whole ---------------------------------------------------------------------------
def answer_of(sent: dict[str, Any], got: list[Sse]) -> tuple[str, int, str]:
    """The stream checked whole as its client reads it: (the text it carried, its tool calls, how it finished)."""
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



@pytest.mark.parametrize("name", NAMES)
def test_each_captured_request_is_read_whole(name: str) -> None:
    """Every field as the client sent it: read, nothing refused, each tool offered to the model."""
    sent = capture(name)
    call = PARSE[endpoint(sent)](sent["body"], ChatOptions(), 32768)
    assert call.messages and call.messages[-1]["content"]
    offered = [t.name for t in call.options.tools.tools] if call.options.tools is not None else []
    assert offered == functions(sent) and (offered != []) == ("_title" not in name)
    text = json.dumps(call.messages)
    assert "notes.txt" in text and "x-anthropic-billing-header" not in text


def test_claude_codes_requests_are_its_dialects_as_documented() -> None:
    """What docs/api.md says Claude Code sends: mid-conversation system turns, `max_tokens: 32000`, adaptive
    thinking, `context_management`, its title asked for as structured output (`output_config.format`)."""
    turn, title = capture("claude_code")["body"], capture("claude_code_title")["body"]
    assert [m["role"] for m in turn["messages"]] == ["user", "system"] and turn["max_tokens"] == 32000
    assert turn["thinking"] == {"type": "adaptive"} and turn["context_management"]["edits"]
    assert parse_messages(turn, ChatOptions(), 32768).messages[-1]["role"] == "system"
    assert parse_messages(title, ChatOptions(), 32768).options.grammar is not None
    counted = {k: v for k, v in turn.items() if k not in ("max_tokens", "stream", "metadata")}
    assert parse_count(counted, ChatOptions(), 32768).messages == parse_messages(turn, ChatOptions(), 32768).messages


@pytest.mark.parametrize("name", [n for n in NAMES if n.endswith("_title")])
def test_a_title_request_is_answered_as_sent(api_server: Served, name: str) -> None:
    """As the client sent it (headers too), but for a shorter token limit: the whole stream as it reads it."""
    sent = capture(name)
    body = sent["body"] | {LIMIT[endpoint(sent)]: SHORT}
    text, calls, finished = answer_of(sent, events(stream(api_server, sent, body)))
    assert text.strip() and calls == 0  # an answer, however poor
    assert finished in ("end_turn", "max_tokens", "stop", "length"), finished
