"""The requests the real coding agents sent in one headless turn (tests/data/agents/captured/: Claude Code 2.1.197,
Codex CLI 0.171.0 and OpenCode 1.18.33, run with docs/api.md's recipes against tests/agent_clients.py's capture
server; bodies and headers as sent, this machine's ids and paths replaced). Each is read whole in its client's
dialect, nothing refused, and the ones that fit the shared demo server's context (the title requests) are answered
there, their whole streams checked as their clients read them. The main turns hold 9,000 to 23,000 tokens:
tests/test_real_agents.py has the clients themselves send them to a server with the context for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime.api.anthropic_request import parse_count, parse_messages
from runtime.api.requests import parse_chat
from runtime.api.responses_request import parse_responses
from runtime.engine.options import ChatOptions
from tests.agent_streams import answer_of, endpoint, events, stream
from tests.test_server import Served

CAPTURED = Path(__file__).parent / "data" / "agents" / "captured"
NAMES = sorted(p.stem for p in CAPTURED.glob("*.json"))
SHORT = 40  # the replays' token limit: the demo model would otherwise write to the context's end
LIMIT = {"/v1/messages": "max_tokens", "/v1/chat/completions": "max_tokens", "/v1/responses": "max_output_tokens"}
PARSE = {"/v1/messages": parse_messages, "/v1/chat/completions": parse_chat, "/v1/responses": parse_responses}


def capture(name: str) -> dict[str, Any]:
    return json.loads((CAPTURED / f"{name}.json").read_text())


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
    text, calls, finished = answer_of(sent, events(stream(api_server, sent, body, timeout=600)))
    assert text.strip() and calls == 0  # an answer, however poor
    assert finished in ("end_turn", "max_tokens", "stop", "length"), finished
