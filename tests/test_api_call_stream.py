"""A streamed tool call through the official clients' streaming helpers (issue #60 item 6), on a micro model with
Qwen's template and its `<tool_call>` token: the arguments arrive as several deltas (chat completions'
`tool_calls` pieces, Anthropic's `input_json_delta`s, Responses' `function_call_arguments.delta`s) that join into
the call the answer holds, the same call as unstreamed; and a call whose arguments fail the check after its
first pieces went out ends the stream with an error each client raises or reports, never as a call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from converters.convert import convert
from tests.micro_model import MicroSpec, write_micro_gguf
from tests.test_call_origin import FAMILIES, TEMPLATES
from tests.test_server import Served

MODEL = "caller"
ASK = [{"role": "user", "content": "Set the unit for Paris."}]
UNITS = {"type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]},
                                          "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}},
         "required": ["unit", "city"], "additionalProperties": False}
# `not` is a keyword llguidance's lenient mode ignores: the grammar lets the model write any unit, and every call
# then fails the check (jsonschema) after its arguments began streaming.
REFUSED = {"type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "kelvin"],
                                                     "not": {"enum": ["celsius", "kelvin"]}}},
           "required": ["unit"], "additionalProperties": False}
LIMIT = 64  # tokens: the forced call is far shorter


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, demo_gguf: Path) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("caller")
    file, markup = FAMILIES["hermes"]
    ids = {spelling: 49151 - i for i, spelling in enumerate(markup)}  # the demo vocabulary's last entries
    path = write_micro_gguf(root / "caller-f16.gguf", demo_gguf, MicroSpec(seed=60), {i: s for s, i in ids.items()},
                            {i: markup[s] for s, i in ids.items()}, (TEMPLATES / file).read_text())
    convert(str(path), name=MODEL, root=root / "cache")
    # --no-spec: one token a step, so a call's arguments come in many pieces on any CPU
    server = Served(root / "cache", "--model", MODEL, "--temp", "0", "--no-spec", "--preset", "exact")
    yield server
    assert server.stop() == 0, server.stderr()


def chat_tool(schema: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "set_unit", "description": "Set a city's temperature unit",
                                             "parameters": schema, "strict": strict}}


def chat_ask(schema: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    return {"model": MODEL, "messages": ASK, "tools": [chat_tool(schema, strict)], "parallel_tool_calls": False,
            "tool_choice": {"type": "function", "function": {"name": "set_unit"}}, "max_tokens": LIMIT}


def test_chat_completions_stream_a_calls_arguments_in_pieces(served: Served) -> None:
    client = served.client()
    whole = client.chat.completions.create(**chat_ask(UNITS)).choices[0].message.tool_calls[0]
    with client.chat.completions.stream(**chat_ask(UNITS)) as stream:
        deltas = [e.arguments_delta for e in stream if e.type == "tool_calls.function.arguments.delta"]
        final = stream.get_final_completion()
    choice = final.choices[0]
    (call,) = choice.message.tool_calls
    assert choice.finish_reason == "tool_calls" and call.function.name == "set_unit"
    assert len([d for d in deltas if d]) > 3 and "".join(deltas) == call.function.arguments
    assert call.function.arguments == whole.function.arguments
    assert json.loads(call.function.arguments)["unit"] in UNITS["properties"]["unit"]["enum"]


def test_anthropics_input_json_deltas_join_into_the_tool_use_input(served: Served) -> None:
    client = anthropic.Anthropic(base_url=served.base, api_key="unused", max_retries=0, timeout=120)
    ask: dict[str, Any] = {
        "model": MODEL, "max_tokens": LIMIT, "messages": ASK,
        "tools": [{"name": "set_unit", "description": "Set a city's temperature unit", "input_schema": UNITS}],
        "tool_choice": {"type": "tool", "name": "set_unit", "disable_parallel_tool_use": True},
    }  # fmt: skip
    whole = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        pieces = [e.partial_json for e in stream if e.type == "input_json"]
        message = stream.get_final_message()
    (block,) = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and block.name == "set_unit"
    assert len([p for p in pieces if p]) > 3 and json.loads("".join(pieces)) == block.input
    assert block.input == next(b for b in whole.content if b.type == "tool_use").input  # type: ignore[union-attr]


def test_responses_function_call_arguments_deltas_join_into_the_item(served: Served) -> None:
    client = served.client()
    ask: dict[str, Any] = {
        "model": MODEL, "input": ASK[0]["content"], "max_output_tokens": LIMIT, "parallel_tool_calls": False,
        "tools": [{"type": "function", "name": "set_unit", "description": "Set a city's temperature unit",
                   "parameters": UNITS, "strict": True}],
        "tool_choice": {"type": "function", "name": "set_unit"},
    }  # fmt: skip
    whole = client.responses.create(**ask)
    with client.responses.stream(**ask) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        response = stream.get_final_response()
    (item,) = [o for o in response.output if o.type == "function_call"]
    assert response.status == "completed" and item.name == "set_unit"
    assert len([d for d in deltas if d]) > 3 and "".join(deltas) == item.arguments
    assert item.arguments == next(o for o in whole.output if o.type == "function_call").arguments  # type: ignore[union-attr]


def test_a_streamed_call_that_fails_its_check_ends_the_stream_with_an_error(served: Served) -> None:
    client = served.client()
    unstreamed = client.chat.completions.create(**chat_ask(REFUSED, strict=False)).choices[0]
    assert unstreamed.message.tool_calls is None and "set_unit" in (unstreamed.message.content or "")  # as text

    seen: list[Any] = []
    with pytest.raises(openai.APIError, match="failed after it began streaming"):
        for chunk in client.chat.completions.create(**chat_ask(REFUSED, strict=False), stream=True):
            seen.append(chunk)
    pieces = [p for c in seen if c.choices for p in c.choices[0].delta.tool_calls or ()]
    assert pieces and pieces[0].function.name == "set_unit"  # it had begun streaming
    assert not any(c.choices and c.choices[0].finish_reason for c in seen)  # and never finished

    ant = anthropic.Anthropic(base_url=served.base, api_key="unused", max_retries=0, timeout=120)
    events: list[Any] = []
    refused: dict[str, Any] = {
        "model": MODEL, "max_tokens": LIMIT, "messages": ASK, "tools": [{"name": "set_unit", "input_schema": REFUSED}],
        "tool_choice": {"type": "tool", "name": "set_unit", "disable_parallel_tool_use": True},
    }  # fmt: skip
    with pytest.raises(anthropic.APIError, match="failed after it began streaming"), \
            ant.messages.stream(**refused) as stream:
        for event in stream:
            events.append(event)
    kinds = [e.type for e in events]
    assert "input_json" in kinds and "content_block_stop" not in kinds and "message_stop" not in kinds

    with client.responses.stream(
        model=MODEL, input=ASK[0]["content"], max_output_tokens=LIMIT, parallel_tool_calls=False,
        tools=[{"type": "function", "name": "set_unit", "parameters": REFUSED, "strict": False}],
        tool_choice={"type": "function", "name": "set_unit"},
    ) as stream:
        kinds = [e.type for e in stream]
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "error"
    assert "response.function_call_arguments.done" not in kinds and "response.completed" not in kinds
