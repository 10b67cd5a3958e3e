"""Real clients against `specquant serve` (issue #40): the official openai client and LangChain's ChatOpenAI
(langchain-openai) must neither trip on what the server sends nor be refused for what they send. Each test
failed before its fix: usage counted twice by a streaming client, a call cut by max_tokens returned as a
finished one, named messages and chats ending with the assistant refused, newer fields refused, and a chat too
long for the context trimmed without a word. (litellm is left out: too large a dependency for a test.)"""

from __future__ import annotations

import itertools
import json
from typing import Any

import openai
import pytest

from tests.test_server import DEMO, Served
from tests.test_tools_api import ASK, WEATHER

NAMED = {"type": "function", "function": {"name": "get_weather"}}
PROMPT = [{"role": "user", "content": "Name three primary colors."}]


@pytest.fixture
def server(api_server: Served) -> Served:
    return api_server  # one server for the API-feature tests (tests/conftest.py)


def chat_model(server: Served, **options: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=DEMO, base_url=f"{server.base}/v1", api_key="unused", temperature=0, max_retries=0,
                      timeout=120, **options)


def streamed_calls(chunks: list[Any]) -> tuple[str, list[tuple[str, str]], str | None]:
    """The content, the (name, arguments) of the calls and the finish_reason of a streamed answer."""
    content, calls, finish = "", {}, None
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for piece in delta.tool_calls or ():
            call = calls.setdefault(piece.index, {"name": "", "arguments": ""})
            call["name"] += piece.function.name or ""
            call["arguments"] += piece.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return content, [(c["name"], c["arguments"]) for c in calls.values()], finish


# --- 1. usage: once, and only when asked --------------------------------------------------------------------
def test_a_stream_carries_usage_once_and_only_when_asked(server: Served) -> None:
    client = server.client()
    ask = {"model": DEMO, "messages": PROMPT, "temperature": 0, "max_tokens": 12}
    whole = client.chat.completions.create(**ask)

    plain = list(client.chat.completions.create(**ask, stream=True))
    assert all(c.usage is None for c in plain)
    (finishing,) = [c for c in plain if c.choices and c.choices[0].finish_reason]
    assert finishing.model_extra["specquant"]["tokens"] == whole.usage.completion_tokens  # our facts stay here

    counted = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
    assert [c for c in counted if c.usage is not None] == [counted[-1]]
    assert counted[-1].choices == [] and counted[-1].usage == whole.usage
    assert "specquant" not in counted[-1].model_extra  # nothing said twice

    legacy = {"model": DEMO, "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
    assert all(c.usage is None for c in client.completions.create(**legacy, stream=True))
    pieces = list(client.completions.create(**legacy, stream=True, stream_options={"include_usage": True}))
    assert [c for c in pieces if c.usage is not None] == [pieces[-1]] and pieces[-1].choices == []
    assert pieces[-1].usage == client.completions.create(**legacy).usage


def test_langchain_streaming_counts_each_token_once(server: Served) -> None:
    whole = server.client().chat.completions.create(model=DEMO, messages=PROMPT, temperature=0, max_tokens=12)
    counted = chat_model(server, streaming=True, stream_usage=True, max_tokens=12).invoke(PROMPT[0]["content"])
    usage = counted.usage_metadata
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (
        whole.usage.prompt_tokens, whole.usage.completion_tokens, whole.usage.total_tokens)
    unasked = chat_model(server, streaming=True, stream_usage=False, max_tokens=12).invoke(PROMPT[0]["content"])
    assert unasked.content == counted.content and not unasked.usage_metadata


# --- 2. a call cut by max_tokens ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuts(api_server: Served) -> dict[str, Any]:
    """Token limits that cut the demo's get_weather call inside its arguments and inside its closing wrapper
    (`}\\n</tool_call>`), read from the whole call's tokens; with each, the call's full arguments."""
    full = api_server.client().chat.completions.create(
        model=DEMO, messages=ASK, tools=[WEATHER], tool_choice=NAMED, temperature=0, max_tokens=96, logprobs=True
    )
    tokens = [t.token for t in full.choices[0].logprobs.content]
    text = "".join(tokens)
    arguments = full.choices[0].message.tool_calls[0].function.arguments
    start = text.index(arguments)
    end = start + len(arguments)
    ends = list(itertools.accumulate(len(t) for t in tokens))  # the text's length after each token
    inside = next(n for n, at in enumerate(ends, 1) if start + 2 < at < end - 1)
    closed = text.index("</tool_call>", end) + len("</tool_call>")
    wrapper = next(n for n, at in enumerate(ends, 1) if end < at < closed)
    return {"arguments": (inside, []), "wrapper": (wrapper, [("get_weather", arguments)])}


@pytest.mark.parametrize("where", ["arguments", "wrapper"])
def test_a_call_cut_by_max_tokens_is_never_returned_unfinished(server: Served, cuts: dict[str, Any], where: str):
    limit, expected = cuts[where]
    client = server.client()
    ask = {"model": DEMO, "messages": ASK, "tools": [WEATHER], "tool_choice": NAMED, "temperature": 0,
           "max_tokens": limit}
    whole = client.chat.completions.create(**ask)
    choice = whole.choices[0]
    assert choice.finish_reason == "length" and whole.usage.completion_tokens == limit
    assert not choice.message.content  # no wrapper text as content either
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or ()] == expected
    for _, arguments in expected:
        json.loads(arguments)
    # Streamed, nothing of an unfinished call goes out: the stream says what the whole answer says.
    assert streamed_calls(list(client.chat.completions.create(**ask, stream=True))) == ("", expected, "length")


@pytest.mark.parametrize("where", ["arguments", "wrapper"])
def test_langchain_never_takes_a_cut_call_for_a_finished_one(server: Served, cuts: dict[str, Any], where: str):
    """LangChain repairs streamed partial arguments into valid JSON: a half-written call sent in pieces would
    become a call to make (`{"city": "Pa"}`)."""
    limit, expected = cuts[where]
    model = chat_model(server, streaming=True, max_tokens=limit).bind_tools([WEATHER], tool_choice="get_weather")
    message = model.invoke(ASK[0]["content"])
    assert message.response_metadata["finish_reason"] == "length"
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [(n, json.loads(a)) for n, a in expected]
    assert not message.invalid_tool_calls and not message.content


# --- 3. named messages ---------------------------------------------------------------------------------------
def test_messages_may_carry_a_name(server: Served) -> None:
    from langchain_core.messages import HumanMessage, SystemMessage

    chat = [{"role": "developer", "content": "Be brief.", "name": "rules"},
            {"role": "user", "content": "Hi, I am Ann.", "name": "ann"},
            {"role": "assistant", "content": "Hello Ann!", "name": "helper"},
            {"role": "user", "content": "What is 2+2?", "name": "ann"}]
    named = server.client().chat.completions.create(model=DEMO, messages=chat, temperature=0, max_tokens=8)
    unnamed = server.client().chat.completions.create(
        model=DEMO, messages=[{k: v for k, v in m.items() if k != "name"} for m in chat], temperature=0, max_tokens=8
    )
    assert named.choices[0].message.content == unnamed.choices[0].message.content  # not shown to the model
    answer = chat_model(server, max_tokens=8).invoke([SystemMessage("Be brief.", name="rules"),
                                                      HumanMessage("What is 2+2?", name="ann")])
    assert answer.content
    status, _, body = server.post({"messages": [{"role": "user", "content": "hi", "name": 7}], "max_tokens": 4})
    assert status == 400 and body["error"]["param"] == "messages[0].name", body


# --- 4. a chat ending with the assistant or a system message ---------------------------------------------------
@pytest.mark.parametrize(
    "chat",
    [
        [*PROMPT, {"role": "assistant", "content": "Red, yellow and blue."}],
        [*PROMPT, {"role": "assistant", "content": "Red."}, {"role": "system", "content": "Now answer in French."}],
        [{"role": "system", "content": "Greet the user."}],
        [*PROMPT, {"role": "assistant", "content": None}, {"role": "user", "content": "Please answer."}],
    ],
    ids=["assistant-last", "system-last", "system-only", "assistant-content-null"],
)
def test_a_chat_may_end_with_any_role_and_the_model_writes_the_next_turn(server: Served, chat: list[dict]) -> None:
    answer = server.client().chat.completions.create(model=DEMO, messages=chat, temperature=0, max_tokens=8)
    choice = answer.choices[0]
    assert choice.finish_reason in ("stop", "length") and choice.message.content is not None
    assert answer.usage.prompt_tokens > 0 and answer.model_extra["specquant"]["level"]


# --- 5. newer fields --------------------------------------------------------------------------------------------
def test_fields_that_do_not_change_the_answer_are_accepted_and_the_others_refused(server: Served) -> None:
    client = server.client()
    ask = {"model": DEMO, "messages": PROMPT, "temperature": 0, "max_tokens": 8}
    plain = client.chat.completions.create(**ask).choices[0].message.content
    newer = {"prompt_cache_key": "chat-42", "prompt_cache_options": {"ttl": "30m"}, "prompt_cache_retention": "24h",
             "safety_identifier": "user-hash", "verbosity": "medium", "store": True, "metadata": {"app": "tests"},
             "service_tier": "flex", "user": "u1"}
    assert client.chat.completions.create(**ask, **newer).choices[0].message.content == plain
    streamed = client.chat.completions.create(**ask, **newer, stream=True,
                                              stream_options={"include_usage": True, "include_obfuscation": False})
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == plain
    for field, value, words in [("verbosity", "high", "not supported"),
                                ("reasoning_effort", "huge", "unknown reasoning_effort 'huge'"),
                                ("moderation", {"model": "omni-moderation-latest"}, "not supported"),
                                ("prompt_cache_key", 5, "must be a string")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(**ask, extra_body={field: value})
        assert e.value.param == field and words in e.value.message, e.value.message


# --- 6. a chat too long for the context ------------------------------------------------------------------------
def test_a_chat_too_long_for_the_context_is_a_400_unless_trimming_is_asked(server: Served) -> None:
    said = "The quick brown fox jumps over the lazy dog near the old river bank today. " * 3
    chat = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {said}"} for i in range(199)]
    chat.append({"role": "user", "content": "What did I say first?"})
    client = server.client()
    n_ctx = server.request("GET", f"/v1/models/{DEMO}")[2]["context_length"]  # planned: serve has no --ctx
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=DEMO, messages=chat, max_tokens=8, stream=stream)
        assert e.value.code == "context_length_exceeded" and e.value.param == "messages"
        assert f"tokens; the context holds {n_ctx}" in e.value.message and "trim" in e.value.message
    trimmed = client.chat.completions.create(model=DEMO, messages=chat, max_tokens=8, temperature=0,
                                             extra_body={"specquant": {"trim": True}})
    facts = trimmed.model_extra["specquant"]
    assert 0 < facts["dropped_turns"] < 199 and trimmed.usage.prompt_tokens <= n_ctx - 8
    assert server.client().chat.completions.create(model=DEMO, messages=PROMPT, max_tokens=4).model_extra[
        "specquant"]["dropped_turns"] == 0
    with pytest.raises(openai.BadRequestError) as e:  # the legacy endpoint's prompt, too
        client.completions.create(model=DEMO, prompt=said * (n_ctx // 30), max_tokens=4)  # ~48 tokens each
    assert e.value.code == "context_length_exceeded" and e.value.param == "prompt"
