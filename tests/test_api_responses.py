"""OpenAI's Responses API on `specquant serve` (issue #54), stateless, driven by the official `openai` client: a
response whole and streamed (the same answer as chat completions gives the same chat), `input` items and
`instructions`, function tools with `function_call` and `function_call_output` items, `text.format` with a
JSON schema, and the 400s for what a server that stores nothing cannot do."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from runtime.api.responses_request import parse_responses
from runtime.engine.options import ChatOptions
from tests.test_server import DEMO, Served
from tests.test_tools_api import WEATHER

ASK = "Name three primary colors."
TOOL = {"type": "function", "name": "get_weather", "description": WEATHER["function"]["description"],
        "parameters": WEATHER["function"]["parameters"], "strict": False}
PARIS = [{"role": "user", "content": "What's the weather like in Paris today?"}]
NAMED = {"type": "function", "name": "get_weather"}


@pytest.fixture
def server(api_server: Served) -> Served:
    return api_server  # one server for the API-feature tests (tests/conftest.py)


def test_a_response_whole_and_streamed_is_the_chat_completions_answer(server: Served) -> None:
    client = server.client()
    chat = client.chat.completions.create(
        model=DEMO, messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": ASK}],
        max_tokens=32, temperature=0,
    )
    assert chat.choices[0].finish_reason == "stop"  # the SDK's stream helper wants a completed response
    ask: dict[str, Any] = {"model": DEMO, "instructions": "Be brief.", "max_output_tokens": 32, "temperature": 0}
    whole = client.responses.create(input=ASK, **ask)
    assert whole.object == "response" and whole.id.startswith("resp_")
    assert whole.output_text == chat.choices[0].message.content  # one request path
    assert whole.status == "completed" and whole.incomplete_details is None
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (chat.usage.prompt_tokens,
                                                                      chat.usage.completion_tokens)
    assert whole.model_extra["specquant"]["level"] and whole.instructions == "Be brief."
    items = client.responses.create(input=[{"type": "message", "role": "user",
                                            "content": [{"type": "input_text", "text": ASK}]}], **ask)
    assert items.output_text == whole.output_text

    with client.responses.stream(input=ASK, **ask) as s:  # the helper checks the events' order as it goes
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert final.output_text == whole.output_text and final.usage.output_tokens == whole.usage.output_tokens
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    events = list(client.responses.create(input=ASK, stream=True, **ask))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    cut = client.responses.create(input=ASK, **ask | {"max_output_tokens": 2})
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"


def test_a_function_call_round_trip_whole_and_streamed(server: Served) -> None:
    client = server.client()
    ask: dict[str, Any] = {"model": DEMO, "tools": [TOOL], "max_output_tokens": 64, "temperature": 0,
                           "parallel_tool_calls": False,  # one call, then the end
                           # F16's words (the exact preset): the same call whole and streamed
                           "extra_body": {"specquant": {"preset": "exact"}}}
    first = client.responses.create(input=PARIS, tool_choice=NAMED, **ask)
    assert first.status == "completed"
    (call,) = [o for o in first.output if o.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), TOOL["parameters"])
    assert first.model_extra["specquant"]["forced"] > 0

    with client.responses.stream(input=PARIS, tool_choice=NAMED, **ask) as s:
        kinds = [e.type for e in s]
        streamed = s.get_final_response()
    (again,) = [o for o in streamed.output if o.type == "function_call"]
    assert (again.name, again.arguments) == (call.name, call.arguments)
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds

    output = {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"temp_c": 21})}
    final = client.responses.create(input=[*PARIS, call.model_dump(exclude_none=True), output], tool_choice="none",
                                    **ask | {"max_output_tokens": 12})
    assert final.output_text and not [o for o in final.output if o.type == "function_call"]


def test_text_format_holds_the_answer_to_a_json_schema(server: Served) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    answer = server.client().responses.create(
        model=DEMO, input="Describe Ann, aged 31.", max_output_tokens=48, temperature=0,
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
    )
    jsonschema.validate(json.loads(answer.output_text), schema)
    assert answer.text.format.type == "json_schema"


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id", "stores no responses"),
        ({"conversation": "conv_1"}, "conversation", "send the whole conversation"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input[0].content[0]", "text only"),
        ({"tools": [{"type": "namespace", "tools": [TOOL]}]}, "tools[0]", "a namespace with a name"),
        ({"tools": [TOOL | {"strict": True, "parameters": {"not": {}}}]}, "tools[0].parameters", "Unimplemented"),
        ({"max_output_tokens": 0}, "max_output_tokens", "out of range"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type", "must be text"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "not supported"),
        ({"background": True}, "background", "not supported"),
    ],
    ids=["previous", "conversation", "image", "nameless-namespace", "schema", "max-tokens", "format", "reference",
         "background"],
)
def test_what_cannot_be_honoured_is_a_400_naming_the_field(
    server: Served, extra: dict[str, Any], param: str, words: str
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        server.client().responses.create(**{"model": DEMO, "input": ASK, "max_output_tokens": 4} | extra)
    assert e.value.param == param and words in e.value.message, e.value.message


def test_an_unknown_model_is_a_404(server: Served) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        server.client().responses.create(model="no-such-model", input=ASK, max_output_tokens=4)
    assert e.value.code == "model_not_found"


def test_items_become_the_chat_they_mean() -> None:
    """The conversion alone, with plain values: what the engine is asked for a Responses request."""
    body = {
        "instructions": "Be brief.", "truncation": "auto", "tools": [TOOL], "parallel_tool_calls": False,
        "text": {"format": {"type": "json_object"}, "verbosity": "medium"}, "tool_choice": "none", "store": True,
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Use Celsius."}]},
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "21"}]},
        ],
    }  # fmt: skip
    call = parse_responses(body, ChatOptions(), 4096)
    assert call.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use Celsius."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21"},
    ]  # fmt: skip
    assert call.options.trim and call.options.grammar is not None and call.options.tools.choice == "none"
    assert call.echo["store"] is False and call.echo["parallel_tool_calls"] is False
