"""Coding agents against `specquant serve` (issue #60): the first requests Claude Code, Codex CLI and OpenCode
send (tests/data/agents/, their bodies and headers as these clients send them), replayed over plain HTTP on
the demo model: each accepted and its whole stream read as the client reads it, a tool round trip in each
client's shape, keep-alive events while a long prompt is read, and what is accepted and ignored on the way.
"""

from __future__ import annotations

import copy
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from runtime.api.anthropic_request import parse_count, parse_messages
from runtime.api.requests import parse_chat
from runtime.api.responses_request import parse_responses
from runtime.engine.options import ChatOptions
from runtime.models.cache import ModelDir
from tests.agent_streams import answer_of, events, send, stream
from tests.conftest import copy_of_demo
from tests.test_server import DEMO, Served

AGENTS = Path(__file__).parent / "data" / "agents"
KEEPALIVE_S = 0.05  # the server's keep-alive interval here: many during any prefill, on any CPU
SHORT = 40  # the follow-ups' token limit: the demo model would otherwise write to the context's end


def capture(name: str) -> dict[str, Any]:
    return json.loads((AGENTS / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def server(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(copy_of_demo(demo_model, tmp_path_factory.mktemp("agents") / "cache"), "--keep-alive", str(KEEPALIVE_S))
    yield s
    assert s.stop() == 0, s.stderr()


# --- Claude Code ---------------------------------------------------------------------------------------------
def test_claude_codes_first_request_streams_and_a_tool_round_trip_follows(server: Served) -> None:
    sent = capture("claude_code")
    read = next(t for t in sent["body"]["tools"] if t["name"] == "Read")
    # As captured, but greedy and made to call a tool: the demo model is too small to choose one on its own.
    first = sent["body"] | {"temperature": 0,
                            "tool_choice": {"type": "tool", "name": "Read", "disable_parallel_tool_use": True}}
    got = events(stream(server, sent, first))
    _, _, stopped = answer_of(sent, got)  # message_start first, message_delta and message_stop last, input counted
    blocks = [e.data["content_block"] for e in got if e.event == "content_block_start"]
    assert [b["type"] for b in blocks] == ["tool_use"] and blocks[0]["name"] == "Read"
    arguments = "".join(e.data["delta"]["partial_json"] for e in got if e.event == "content_block_delta")
    jsonschema.validate(json.loads(arguments), read["input_schema"])
    assert stopped == "tool_use"

    # The round trip as Claude Code sends it: its tool_use back, the tool_result, a system turn between.
    use = blocks[0] | {"input": json.loads(arguments)}
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": "buy milk"}
    follow = sent["body"] | {"temperature": 0, "max_tokens": SHORT, "messages": [
        *sent["body"]["messages"], {"role": "assistant", "content": [use]},
        {"role": "system", "content": "<system-reminder>The file was read.</system-reminder>"},
        {"role": "user", "content": [result, {"type": "text", "text": "Say what it holds."}]}]}
    _, _, stopped = answer_of(sent, events(stream(server, sent, follow)))
    assert stopped in ("end_turn", "max_tokens", "tool_use")


def test_claude_codes_attribution_line_is_not_in_the_prompt(server: Served) -> None:
    """The line changes per session and request: left out, two sessions' prompts are the same tokens."""
    body = capture("claude_code")["body"]
    counted = []
    for system in (body["system"], body["system"][1:]):
        ask = {k: v for k, v in body.items() if k not in ("max_tokens", "stream", "metadata")} | {"system": system}
        status, _, answer = server.request("POST", "/v1/messages/count_tokens", json.dumps(ask).encode(),
                                           {"Content-Type": "application/json"})
        assert status == 200, answer
        counted.append(answer["input_tokens"])
    assert counted[0] == counted[1] > 0

    a, b = copy.deepcopy(body), copy.deepcopy(body)
    b["system"][0]["text"] = "x-anthropic-billing-header: cc_version=2.1.198.0a1; cc_entrypoint=cli; cch=77e02;"
    base = ChatOptions()
    assert parse_messages(a, base, 4096).messages == parse_messages(b, base, 4096).messages
    system = parse_messages(a, base, 4096).messages[0]["content"]
    assert system.startswith("You are Claude Code") and "x-anthropic-billing-header" not in system


def test_claude_codes_context_management_and_system_turns_are_read() -> None:
    thought = {"type": "thinking", "thinking": "The user wants a file.", "signature": "sq-0"}
    said = {"type": "text", "text": "b"}
    turn = [{"role": "user", "content": "a"}, {"role": "assistant", "content": [thought, said]}]
    chat = [*turn, *turn, {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": "c"}]
    ask: dict[str, Any] = {"model": DEMO, "max_tokens": 8, "messages": chat}
    base = ChatOptions()
    kept = parse_messages(ask, base, 4096).messages
    assert [m["role"] for m in kept] == ["user", "assistant", "user", "assistant", "system", "user"]
    assert kept[4]["content"] == "Be brief." and [m.get("reasoning_content") for m in kept[1:4:2]] == [
        "The user wants a file.", "The user wants a file."]
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
                       {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 100000}}]}
    cleared = parse_messages(ask | {"context_management": edits}, base, 4096).messages
    assert [m.get("reasoning_content") for m in cleared[1:4:2]] == [None, "The user wants a file."]
    everything = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    assert parse_messages(ask | {"context_management": everything}, base, 4096).messages == kept
    assert parse_count({k: v for k, v in ask.items() if k != "max_tokens"} | {"context_management": edits},
                       base, 4096).messages == cleared


# --- Codex CLI -----------------------------------------------------------------------------------------------
def test_codexs_first_request_streams_and_a_tool_round_trip_follows(server: Served) -> None:
    sent = capture("codex")
    first = sent["body"] | {"temperature": 0, "tool_choice": {"type": "function", "name": "exec_command"}}
    got = events(stream(server, sent, first))
    _, _, status = answer_of(sent, got)  # created and in progress first, numbered in order, the output, input counted
    assert got[-1].event == "response.completed" and status == "completed"
    (item,) = [e.data["item"] for e in got if e.event == "response.output_item.done"]
    assert item["type"] == "function_call" and item["name"] == "exec_command" and "namespace" not in item
    exec_command = sent["body"]["tools"][0]
    jsonschema.validate(json.loads(item["arguments"]), exec_command["parameters"])
    assert "left out tools this server cannot run: 'web_search'" in server.stderr()

    # Codex sends the call back as an item, then its output.
    call = {k: item[k] for k in ("type", "name", "arguments", "call_id")}
    output = {"type": "function_call_output", "call_id": item["call_id"], "output": "notes.txt\nreport.md"}
    follow = sent["body"] | {"temperature": 0, "max_output_tokens": SHORT,
                             "input": [*sent["body"]["input"], call, output]}
    answer_of(sent, events(stream(server, sent, follow)))  # created first; completed or incomplete last


def test_a_namespace_tools_function_is_called_with_its_namespace(server: Served) -> None:
    sent = capture("codex")
    ask = sent["body"] | {"temperature": 0, "stream": False, "tool_choice": {"type": "function", "name": "spawn_agent"}}
    conn, response = send(server, sent, ask)
    try:
        assert response.status == 200
        answer = json.loads(response.read())
    finally:
        conn.close()
    (item,) = answer["output"]
    assert (item["type"], item["name"], item["namespace"]) == ("function_call", "spawn_agent", "collaboration")
    jsonschema.validate(json.loads(item["arguments"]), sent["body"]["tools"][4]["tools"][0]["parameters"])


def test_codexs_fields_and_tools_are_read() -> None:
    body = capture("codex")["body"]
    call = parse_responses(body, ChatOptions(), 4096)
    assert call.options.tools is not None
    names = [t.name for t in call.options.tools.tools]
    assert names == ["exec_command", "write_stdin", "update_plan", "view_image", "spawn_agent", "send_message"]
    assert call.namespaces == {"spawn_agent": "collaboration", "send_message": "collaboration"}
    assert [m["role"] for m in call.messages] == ["system", "system", "user", "user"]
    # An earlier namespace call comes back naming its namespace: read as the function's call.
    earlier = {"type": "function_call", "name": "spawn_agent", "namespace": "collaboration", "arguments": "{}",
               "call_id": "call_1"}
    answered = {"type": "function_call_output", "call_id": "call_1", "output": "started"}
    back = parse_responses(body | {"input": [*body["input"], earlier, answered]}, ChatOptions(), 4096)
    assert back.messages[-2]["tool_calls"][0]["function"]["name"] == "spawn_agent"


# --- OpenCode ------------------------------------------------------------------------------------------------
def test_opencodes_first_request_streams_and_a_tool_round_trip_follows(server: Served) -> None:
    sent = capture("opencode")
    assert sent["body"]["max_tokens"] == 32000  # over the demo's context: cut to it, not refused
    first = sent["body"] | {"temperature": 0, "tool_choice": "required"}
    got = events(stream(server, sent, first))
    answer_of(sent, got)  # [DONE] last, the assistant's role first, one finish, the usage chunk before [DONE]
    chunks = [e.data for e in got[:-1]]
    pieces = [d for c in chunks if c["choices"] for d in c["choices"][0]["delta"].get("tool_calls", ())]
    calls: dict[int, dict[str, Any]] = {}
    for p in pieces:  # as the AI SDK puts them together: the first piece of each names it
        if "id" in p:
            calls[p["index"]] = {"id": p["id"], "type": "function", "function": dict(p["function"])}
        else:
            calls[p["index"]]["function"]["arguments"] += p["function"]["arguments"]
    assert calls
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in sent["body"]["tools"]}
    for call in calls.values():
        jsonschema.validate(json.loads(call["function"]["arguments"]), tools[call["function"]["name"]])
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "tool_calls"

    follow = sent["body"] | {"temperature": 0, "max_tokens": SHORT, "messages": [
        *sent["body"]["messages"], {"role": "assistant", "content": "", "tool_calls": list(calls.values())},
        *({"role": "tool", "tool_call_id": c["id"], "content": "buy milk"} for c in calls.values())]}
    got = events(stream(server, sent, follow))
    answer_of(sent, got)
    finish = [c["choices"][0]["finish_reason"] for c in (e.data for e in got[:-1]) if c["choices"]]
    assert finish[-1] in ("stop", "length", "tool_calls")


def test_a_token_limit_beyond_the_context_is_cut_to_it() -> None:
    body = capture("opencode")["body"]
    assert parse_chat(body, ChatOptions(), 4096).options.max_tokens == 4096
    codex = capture("codex")["body"] | {"max_output_tokens": 100_000}
    assert parse_responses(codex, ChatOptions(), 8192).options.max_tokens == 8192


# --- the wait before the first token ------------------------------------------------------------------------
def long_chat(words: int) -> str:
    """A prompt the demo model takes a while to read (never the same twice: no cache holds it)."""
    return f"{time.monotonic_ns()} " + " ".join(f"item{i % 997}" for i in range(words))


def test_keep_alive_events_come_while_a_long_prompt_is_read(server: Served) -> None:
    sent = capture("opencode")
    body = sent["body"] | {"max_tokens": 4, "temperature": 0, "messages": [
        {"role": "user", "content": long_chat(400) + "\nWhich item came first?"}]}
    body.pop("tools"), body.pop("tool_choice")
    got = stream(server, sent, body)
    first_text = next(i for i, e in enumerate(got) if e.comment is None and e.data != "[DONE]"
                      and e.data["choices"] and e.data["choices"][0]["delta"].get("content"))
    assert got[0].comment is None and got[0].data["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert any(e.comment == "keep-alive" for e in got[:first_text]), [(e.comment, e.at) for e in got[:8]]

    sent = capture("claude_code")
    ask = {"model": DEMO, "max_tokens": 4, "temperature": 0, "stream": True,
           "messages": [{"role": "user", "content": long_chat(400) + "\nWhich item came first?"}]}
    got = events(stream(server, sent, ask))
    opened = [e.event for e in got[: [e.event for e in got].index("content_block_start")]]
    assert opened[0] == "message_start" and opened.count("ping") >= 2, opened  # the opening one, then more


def test_a_request_abandoned_before_its_answer_is_logged_as_cancelled(server: Served) -> None:
    host, port = server.base.removeprefix("http://").split(":")
    body = json.dumps({"model": DEMO, "max_tokens": 4, "messages": [{"role": "user", "content": long_chat(400)}]})
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(head.encode() + body.encode())  # and gone at once: its prompt takes far longer to read
    deadline = time.monotonic() + 120
    while "POST /v1/chat/completions cancelled" not in (log := server.stderr()):
        assert time.monotonic() < deadline, log
        time.sleep(0.1)
    assert "(the client left before the answer began)" in log


def test_the_context_is_said_at_start_and_listed(server: Served) -> None:
    # No --ctx: planned from memory up to 32,768 (runtime.plan.context), capped by the demo's training length.
    deadline = time.monotonic() + 60  # said on stderr just after the URL on stdout, which Served waits for
    while not (lines := [x for x in server.stderr().splitlines() if x.startswith("context: ")]):
        assert time.monotonic() < deadline, server.stderr()
        time.sleep(0.05)
    line = lines[0]
    assert line.startswith("context: 8,192 tokens per request") and "trained on 8,192 tokens" in line, line
    assert "coding agents" in line and "--ctx sets it" in line
    status, _, listed = server.request("GET", "/v1/models")
    assert status == 200 and {m["context_length"] for m in listed["data"]} == {8192}


def test_count_tokens_does_not_wait_behind_an_answer(server: Served) -> None:
    sent = capture("claude_code")
    ask = {"model": DEMO, "messages": [{"role": "user", "content": "Hi"}]}
    count = json.dumps(ask).encode(), {"Content-Type": "application/json"}
    assert server.request("POST", "/v1/messages/count_tokens", *count)[0] == 200  # the tokenizer loaded
    long = {"model": DEMO, "max_tokens": 3000, "stream": True,
            "messages": [{"role": "user", "content": long_chat(300) + "\nRepeat every item, one per line."}]}
    conn, response = send(server, sent, long)
    try:
        assert response.status == 200
        response.readline()  # the stream has opened: the answer holds the engine
        status, _, counted = server.request("POST", "/v1/messages/count_tokens", *count)
        assert status == 200 and counted["input_tokens"] > 0
        assert server.health()["busy"]  # counted while the answer still ran
    finally:
        conn.close()
