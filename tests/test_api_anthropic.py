"""Anthropic's Messages API on `specquant serve` (issue #54), driven by the official `anthropic` client: a
message whole and streamed (the same answer as chat completions gives the same chat), stop reasons, a tool
round trip with `tool_use` and `tool_result` blocks, count_tokens, and errors in Anthropic's shape."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import jsonschema
import pytest

from runtime.api.anthropic_request import parse_count, parse_messages
from runtime.engine.options import ChatOptions
from tests.test_server import DEMO, Served
from tests.test_tools_api import WEATHER

ASK = "Name three primary colors."
TOOL = {"name": "get_weather", "description": WEATHER["function"]["description"],
        "input_schema": WEATHER["function"]["parameters"]}
PARIS = [{"role": "user", "content": "What's the weather like in Paris today?"}]
GREEDY = {"temperature": 0}  # newer anthropic clients offer no temperature argument: the server still reads it


@pytest.fixture
def server(api_server: Served) -> Served:
    return api_server  # one server for the API-feature tests (tests/conftest.py)


def client(server: Served, key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base, api_key=key, max_retries=0, timeout=120)


def post(server: Served, path: str, payload: Any) -> tuple[int, Any]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    status, _, body = server.request("POST", path, data, {"Content-Type": "application/json"})
    return status, body


def test_a_message_whole_and_streamed_is_the_chat_completions_answer(server: Served) -> None:
    ask: dict[str, Any] = {"model": DEMO, "max_tokens": 12, "extra_body": GREEDY}
    chat = server.client().chat.completions.create(
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": ASK}], **ask
    )
    whole = client(server).messages.create(system="Be brief.", messages=[{"role": "user", "content": ASK}], **ask)
    assert whole.type == "message" and whole.role == "assistant" and whole.id.startswith("msg_")
    assert [b.type for b in whole.content] == ["text"]
    assert whole.content[0].text == chat.choices[0].message.content  # one request path
    assert whole.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[chat.choices[0].finish_reason]
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (chat.usage.prompt_tokens,
                                                                      chat.usage.completion_tokens)
    assert whole.model_extra["specquant"]["level"]

    # The system prompt as blocks, the user's content as blocks: the same prompt.
    blocks = client(server).messages.create(
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": ASK}]}], **ask
    )
    assert blocks.content == whole.content and blocks.usage.input_tokens == whole.usage.input_tokens

    with client(server).messages.stream(system="Be brief.", messages=[{"role": "user", "content": ASK}], **ask) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == whole.content[0].text and [b.text for b in final.content] == [whole.content[0].text]
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens

    events = list(client(server).messages.create(messages=[{"role": "user", "content": ASK}], stream=True, **ask))
    kinds = [e.type for e in events]
    assert kinds[:3] == ["message_start", "content_block_start", "content_block_delta"]  # the ping is skipped
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    # message_start goes out as soon as the request is accepted, maybe before the prompt's length is known:
    # message_delta's usage always has it (#60).
    assert events[-2].usage.input_tokens > 0 and events[-2].usage.output_tokens > 0
    assert events[0].message.usage.input_tokens in (0, events[-2].usage.input_tokens)
    assert events[-2].model_extra["specquant"]["tokens"] == events[-2].usage.output_tokens


def test_stop_reasons_max_tokens_and_stop_sequence(server: Served) -> None:
    c = client(server)
    ask: dict[str, Any] = {"model": DEMO, "messages": [{"role": "user", "content": ASK}], "extra_body": GREEDY}
    cut = c.messages.create(max_tokens=3, **ask)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    text = c.messages.create(max_tokens=24, **ask).content[0].text
    word = text.split()[2]  # a word in the middle of the greedy answer
    stopped = c.messages.create(max_tokens=24, stop_sequences=[word], **ask)
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == word
    assert stopped.content[0].text == text[: text.index(word)]
    with c.messages.stream(max_tokens=24, stop_sequences=[word], **ask) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence, final.content[0].text) == ("stop_sequence", word,
                                                                           stopped.content[0].text)
    # Claude Code asks for 32,000 tokens: cut to the context, not refused.
    assert c.messages.create(max_tokens=32000, stop_sequences=[word], **ask).content == stopped.content


def test_a_tool_round_trip_with_tool_use_and_tool_result_blocks(server: Served) -> None:
    c = client(server)
    ask: dict[str, Any] = {"model": DEMO, "max_tokens": 64, "extra_body": GREEDY, "tools": [TOOL]}
    named = {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}  # one call, then the end
    first = c.messages.create(messages=PARIS, tool_choice=named, **ask)
    assert first.stop_reason == "tool_use", first
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.id.startswith("toolu_")
    jsonschema.validate(use.input, TOOL["input_schema"])
    assert first.model_extra["specquant"]["forced"] > 0  # the wrapper and the name are the grammar's

    with c.messages.stream(messages=PARIS, tool_choice=named, **ask) as s:
        streamed = s.get_final_message()
    assert [(b.type, getattr(b, "input", None)) for b in streamed.content] == [
        (b.type, getattr(b, "input", None)) for b in first.content]
    assert streamed.stop_reason == "tool_use"

    anyone = c.messages.create(messages=PARIS, tool_choice={"type": "any", "disable_parallel_tool_use": True}, **ask)
    assert [b.type for b in anyone.content] == ["tool_use"] and anyone.stop_reason == "tool_use"

    result = {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": '{"temp_c": 21}'}]}
    chat = [*PARIS, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [result]}]
    final = c.messages.create(messages=chat, tool_choice={"type": "none"}, **ask | {"max_tokens": 12})
    assert [b.type for b in final.content] == ["text"] and final.content[0].text
    assert final.stop_reason in ("end_turn", "max_tokens")
    failed = [*chat[:2], {"role": "user", "content": [result | {"is_error": True}]}]
    counted = [c.messages.count_tokens(model=DEMO, messages=m, tools=[TOOL]).input_tokens for m in (chat, failed)]
    assert counted[1] > counted[0]  # "Error: " is said to the model


def test_count_tokens_counts_the_prompt_the_message_gets(server: Served) -> None:
    c = client(server)
    for extra in ({}, {"system": "Be brief."}, {"tools": [TOOL]}):
        counted = c.messages.count_tokens(model=DEMO, messages=PARIS, **extra)
        answered = c.messages.create(model=DEMO, messages=PARIS, max_tokens=1, **extra)
        assert counted.input_tokens == answered.usage.input_tokens > 0, extra
    status, body = post(server, "/v1/messages/count_tokens", {"messages": PARIS, "max_tokens": 5})
    assert status == 400 and body["error"]["message"] == "max_tokens: Extra inputs are not permitted", body


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({"messages": PARIS, "max_tokens": None}, "max_tokens: Field required"),
        ({"messages": PARIS, "max_tokens": "12"}, "max_tokens must be an integer"),
        ({"messages": [{"role": "tool", "content": "x"}], "max_tokens": 4},
         "messages.0.role: must be user, assistant or system"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}], "max_tokens": 4},
         "messages.0.content.0.type: 'image' blocks are not supported"),
        ({"messages": [*PARIS, {"role": "assistant", "content": "It is"}], "max_tokens": 4}, "prefill"),
        ({"messages": PARIS, "max_tokens": 4, "tools": [{"type": "bash_20250124", "name": "bash"}]},
         "tools.0.type: 'bash_20250124' is a server tool"),
        ({"messages": PARIS, "max_tokens": 4, "tools": [TOOL | {"strict": True, "input_schema": {"not": {}}}]},
         "tools.0.input_schema: "),
        ({"messages": PARIS, "max_tokens": 4, "stop_sequences": "x"}, "stop_sequences: must be an array"),
        ({"messages": PARIS, "max_tokens": 4, "mcp_servers": []}, "mcp_servers: not supported"),
        ({"messages": PARIS, "max_tokens": 4, "frequency_penalty": 1}, "frequency_penalty: Extra inputs"),
    ],
    ids=["no-max-tokens", "max-tokens-string", "tool-role", "image", "prefill", "server-tool", "schema",
         "stop-type", "mcp", "unknown-field"],
)
def test_a_bad_request_is_a_400_in_anthropic_shape(server: Served, payload: dict[str, Any], words: str) -> None:
    asked = dict(payload)  # the client checks its own arguments: the rest go as extra_body
    messages, max_tokens = asked.pop("messages"), asked.pop("max_tokens", 4)
    with pytest.raises(anthropic.BadRequestError) as e:
        client(server).messages.create(model=DEMO, messages=messages, max_tokens=max_tokens, extra_body=asked)
    body = e.value.body
    assert e.value.status_code == 400 and body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == "invalid_request_error" and words in body["error"]["message"], body


def test_other_errors_have_anthropic_status_codes_and_types(server: Served) -> None:
    with pytest.raises(anthropic.NotFoundError) as e:
        client(server).messages.create(model="no-such-model", max_tokens=4, messages=PARIS)
    assert e.value.body["error"]["type"] == "not_found_error" and "no-such-model" in e.value.body["error"]["message"]
    status, body = post(server, "/v1/messages", b'{"messages": [')
    assert status == 400 and body["type"] == "error" and "not valid JSON" in body["error"]["message"]
    status, _, body = server.request("GET", "/v1/messages")
    assert status == 405 and body["error"]["type"] == "invalid_request_error"
    status, _, body = server.request("POST", "/v1/messages/nothing", b"{}", {"Content-Type": "application/json"})
    assert status == 404 and body["error"]["type"] == "not_found_error"
    # Chat completions keeps OpenAI's shape on the same server.
    status, _, body = server.post({"messages": PARIS, "max_tokens": "4"})
    assert status == 400 and set(body["error"]) == {"message", "type", "param", "code"}


def test_blocks_become_the_chat_they_mean() -> None:
    """The conversion alone, with plain values: what the engine is asked for a Messages request."""
    body = {
        "max_tokens": 32000, "system": [{"type": "text", "text": "Be brief."}], "stop_sequences": ["a", "b"],
        "tools": [TOOL], "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [  # as a client sends back what it parsed: nulls included
                {"type": "thinking", "thinking": "…", "signature": "x"},
                {"type": "text", "text": "Let me look.", "citations": None, "parsed_output": None},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "down", "is_error": True},
                {"type": "text", "text": "Try again."}]},
        ],
    }  # fmt: skip
    call = parse_messages(body, ChatOptions(), 4096)
    assert call.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "…", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: down"},
        {"role": "user", "content": "Try again."},
    ]  # fmt: skip
    options = call.options
    assert (options.max_tokens, options.stop, options.tools.choice, options.tools.parallel) == (
        4096, ("a", "b"), "required", False)
    counted = parse_count({k: v for k, v in body.items() if k not in ("max_tokens", "stop_sequences")},
                          ChatOptions(), 4096)
    assert counted.messages == call.messages and counted.options.max_tokens == 1 and not counted.stream
