"""Tool calls in the engine: the call grammar, the parser of streamed calls, the chat as each kind of template
sees it, and calls through the exact loop (a micro model whose template has a tools section and whose
vocabulary has `<tool_call>` tokens, as Qwen2.5's has; the demo's template has neither)."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import jsonschema
import pytest

from converters.convert import convert
from runtime.decode.grammar import markup_token, tokenizer_for
from runtime.decode.sampling import SamplingParams
from runtime.engine.answer import collect
from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.options import ChatOptions
from runtime.engine.tools import (
    CLOSER,
    GENERIC,
    HERMES,
    LLAMA3,
    OPENER,
    CallParser,
    Tool,
    ToolRequest,
    assemble_calls,
    call_grammar,
    call_text,
    prepare_tools,
    syntax_for,
)
from runtime.models.cache import ModelDir
from tests.conftest import assert_one_line_error, run_cli
from tests.micro_model import MicroSpec, write_micro_gguf

WEATHER = Tool(
    "get_weather",
    "The weather in a city",
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                      "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]},
)
ADD = Tool("add", "Add two integers", {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]})
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = SamplingParams()

# A Hermes-style template with a tools section, written for these tests (Qwen2.5's has the same shape).
HERMES_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
Call a function by answering:
<tool_call>
{"name": <name>, "arguments": <object>}
</tool_call>
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role == 'system' %}{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant
{% for c in m.tool_calls %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
OPENER_ID, CLOSER_ID = 49150, 49151  # two of the demo vocabulary's last entries, renamed


@pytest.fixture(scope="module")
def hermes(tmp_path_factory: pytest.TempPathFactory, demo_gguf: Path) -> ModelDir:
    """A micro model with the Hermes template and `<tool_call>`/`</tool_call>` as user-defined tokens."""
    root = tmp_path_factory.mktemp("hermes")
    texts = {OPENER_ID: OPENER, CLOSER_ID: CLOSER}
    types = dict.fromkeys(texts, gguf.TokenType.USER_DEFINED)
    path = write_micro_gguf(root / "hermes-f16.gguf", demo_gguf, MicroSpec(seed=7), texts, types, HERMES_TEMPLATE)
    manifest = convert(str(path), name="hermes", root=root / "cache")
    return ModelDir(root / "cache", manifest["name"])


# A Llama 3.x-style template, written for these tests: the tools in the system turn, a call as the whole
# answer in `{"name": ..., "parameters": ...}`, results as `ipython` turns.
LLAMA = """{%- if tools %}<|im_start|>system
Given the following functions, respond with a JSON for a function call: {"name": function name, \
"parameters": dictionary of argument name and its value}.
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role == 'tool' %}<|im_start|>ipython
{{ m.content }}<|im_end|>
{% elif m.tool_calls %}<|im_start|>assistant
{"name": "{{ m.tool_calls[0].function.name }}", "parameters": {{ m.tool_calls[0].function.arguments | tojson }}}\
<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory, demo_gguf: Path) -> ModelDir:
    root = tmp_path_factory.mktemp("llama")
    path = write_micro_gguf(root / "llama-f16.gguf", demo_gguf, MicroSpec(seed=11), chat_template=LLAMA)
    manifest = convert(str(path), name="llama", root=root / "cache")
    return ModelDir(root / "cache", manifest["name"])


def calls_of(chunks: list) -> list[dict]:
    return assemble_calls([d for c in chunks for d in c.calls])


# --- the parser ---------------------------------------------------------------------------------------------
ANSWER = 'Let me look.\n' + call_text("get_weather", '{"city": "Pa}\\n</tool_call>ris"}') + "\n" + call_text(
    "add", {"a": 1, "b": 2}
)
LLAMA_ANSWER = call_text("get_weather", '{"city": "Pa}ris"}', LLAMA3)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, len(ANSWER)])
def test_the_parser_reads_the_same_calls_however_the_text_is_cut(size: int) -> None:
    parser, content, deltas = CallParser(), "", []
    for i in range(0, len(ANSWER), size):
        text, found = parser.feed(ANSWER[i : i + size])
        content += text
        deltas += found
    text, found = parser.feed("", final=True)
    calls = assemble_calls([*deltas, *found])
    assert content + text == "Let me look."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Pa}\n</tool_call>ris"}), ("add", {"a": 1, "b": 2})
    ]
    assert len({c["id"] for c in calls}) == 2 and all(c["id"].startswith("call_") for c in calls)


@pytest.mark.parametrize("size", [1, 2, 5, len(LLAMA_ANSWER)])
def test_the_parser_reads_a_llama_call_and_leaves_other_answers_as_text(size: int) -> None:
    for answer, calls in [(LLAMA_ANSWER, [("get_weather", '{"city": "Pa}ris"}')]),
                          ('{"a": 1} is JSON, not a call', []), ('{"na', [])]:
        parser, content, deltas = CallParser(LLAMA3), "", []
        for i in range(0, len(answer), size):
            text, found = parser.feed(answer[i : i + size])
            content, deltas = content + text, deltas + found
        text, found = parser.feed("", final=True)
        got = [(c["function"]["name"], c["function"]["arguments"]) for c in assemble_calls([*deltas, *found])]
        assert got == calls
        assert content + text == ("" if calls else answer)


def test_the_parser_holds_back_what_may_start_a_call_and_keeps_text_that_does_not() -> None:
    parser = CallParser()
    assert parser.feed("a < b and <tool")[0] == "a < b and "
    assert parser.feed("box> is text", final=True) == ("<toolbox> is text", [])
    cut = CallParser()  # a second call cut off at the token limit is no content
    content, deltas = cut.feed(call_text("add", {"a": 1}) + "\n<tool_", final=True)
    assert content == "" and [d.name for d in deltas if d.name] == ["add"]


@pytest.mark.parametrize("syntax", [GENERIC, LLAMA3], ids=["hermes-form", "llama-form"])
def test_a_call_cut_anywhere_is_dropped_or_whole_and_never_leaks_its_wrapper(syntax) -> None:
    """The token limit may fall anywhere in a call: in its opener, its name, its arguments or its closing.
    Only complete calls come out, each in one piece (a client given a half-written call's pieces may repair
    them into a call to make), and with tool_choice required nothing of a cut call becomes content."""
    calls = [("get_weather", '{"city": "Pa}ris", "unit": "celsius"}'), ("add", '{"a": 12}')]
    if syntax is LLAMA3:
        calls = calls[:1]
    answer = "\n".join(call_text(name, arguments, syntax) for name, arguments in calls)
    closes = [answer.index(a) + len(a) for _, a in calls]  # where each call's arguments end
    for cut in range(len(answer) + 1):
        for size in (1, 4, len(answer)):
            parser, content, deltas = CallParser(syntax, calls_only=True), "", []
            for i in range(0, cut, size):
                text, found = parser.feed(answer[i : min(i + size, cut)])
                content, deltas = content + text, deltas + found
            text, found = parser.feed("", final=True)
            deltas += found
            assert content + text == "", (cut, size)
            assert len({d.index for d in deltas}) == len(deltas) and all(d.id and d.name for d in deltas)
            got = [(c["function"]["name"], c["function"]["arguments"]) for c in assemble_calls(deltas)]
            assert got == [c for c, end in zip(calls, closes, strict=True) if cut >= end], (cut, size)


# --- the grammar -------------------------------------------------------------------------------------------
def test_auto_allows_text_or_text_then_calls_and_required_starts_with_the_call(demo_gguf: Path) -> None:
    tokenizer = tokenizer_for(demo_gguf)
    auto = call_grammar(ToolRequest((WEATHER, ADD), "auto"), GENERIC, json.dumps(OPENER), json.dumps(CLOSER))
    assert auto is not None
    for text in ["Just text.", "Sure.\n" + call_text("add", {"a": 1, "b": 2})]:
        c = auto.constraint(tokenizer)
        ids = tokenizer.tokenize_str(text)
        assert c.valid_prefix(ids) == len(ids), text
        c.consume(ids)
        assert c.is_accepting  # the answer may end here
    c = auto.constraint(tokenizer)
    bad = tokenizer.tokenize_str(OPENER + '\n{"name": "nope"')
    assert c.valid_prefix(bad) < len(bad)  # an unknown tool

    named = call_grammar(ToolRequest((WEATHER, ADD), "add"), GENERIC, json.dumps(OPENER), json.dumps(CLOSER))
    assert named is not None
    forced = named.constraint(tokenizer).forced_bytes().decode()
    assert forced.startswith(OPENER + '\n{"name": "add", "arguments": {')  # all of it before the arguments
    assert call_grammar(ToolRequest((WEATHER,), "none"), GENERIC, '"<a>"', '"</a>"') is None


def test_llama_calls_are_the_whole_answer_and_auto_text_must_not_start_like_one(demo_gguf: Path) -> None:
    tokenizer = tokenizer_for(demo_gguf)
    auto = call_grammar(ToolRequest((WEATHER, ADD), "auto"), LLAMA3)
    assert auto is not None
    for text, whole in [("Plain text.", True), ('{"a": 1}', True), (call_text("add", {"a": 1, "b": 2}, LLAMA3), True),
                        ('{"name": "nope"', False)]:
        c = auto.constraint(tokenizer)
        ids = tokenizer.tokenize_str(text)
        assert (c.valid_prefix(ids) == len(ids)) == whole, text
    required = call_grammar(ToolRequest((ADD,), "required"), LLAMA3)
    assert required is not None
    c = required.constraint(tokenizer)
    assert c.forced_bytes().decode() == '{"name": "add", "parameters": {'
    ids = tokenizer.tokenize_str(call_text("add", {"a": 1, "b": 2}, LLAMA3))
    c.consume(ids)
    assert c.done  # one call, then only the end


def test_templates_are_told_apart() -> None:
    assert syntax_for(HERMES_TEMPLATE) == HERMES and syntax_for(LLAMA) == LLAMA3
    assert syntax_for(None) == GENERIC and syntax_for("{{ messages }}") == GENERIC


def test_a_template_without_a_tools_section_gets_the_generic_prompt_and_text_history() -> None:
    syntax = syntax_for("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert not syntax.own
    chat = [
        {"role": "system", "content": "Be brief."},
        *ASK,
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "tool", "tool_call_id": "c1", "content": "again 3"},
    ]
    shown, tools = prepare_tools(chat, ToolRequest((ADD,)), syntax)
    assert tools is None
    assert shown[0]["content"].startswith("Be brief.\n\n") and '"name": "add"' in shown[0]["content"]
    call = OPENER + '\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n' + CLOSER
    assert shown[2] == {"role": "assistant", "content": call}
    assert shown[3] == {"role": "user", "content": "<tool_response>\n3\n</tool_response>\n"
                                                   "<tool_response>\nagain 3\n</tool_response>"}
    chat[2] = {**chat[2], "content": "Let me add."}
    assert prepare_tools(chat, ToolRequest((ADD,)), syntax)[0][2]["content"] == "Let me add.\n" + call
    hidden, _ = prepare_tools(chat, ToolRequest((ADD,), "none"), syntax)
    assert hidden[0] == {"role": "system", "content": "Be brief."}  # none: the tools are not offered


# --- through the engine ----------------------------------------------------------------------------------
def test_a_template_with_a_tools_section_renders_them_and_the_call_starts_with_its_token(hermes: ModelDir) -> None:
    engine = Engine(hermes.name, EngineSettings(n_threads=2), root=hermes.root)
    try:
        decision = engine.decide(ASK[0]["content"], ChatOptions())
        parent, _ = engine.pair(decision.choice, decision.placement)
        assert markup_token(parent.path, OPENER) == OPENER_ID
        past = [*ASK, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1"}]
        syntax = syntax_for(parent.metadata()["tokenizer.chat_template"])
        shown, tools = prepare_tools(past, ToolRequest((ADD,)), syntax)
        text = parent.detokenize(engine.render(parent, shown, tools), special=True)
        assert json.dumps(ADD.as_openai()) in text  # the template's own tools section
        assert '{"name": "add", "arguments": {"a": 1}}' in text  # arguments as an object, not a JSON string

        request = ToolRequest((WEATHER, ADD), "required", parallel=False)
        answer = collect(engine.stream_chat(ASK, ChatOptions(tools=request, sampling=GREEDY, max_tokens=96)))
        chunks = list(engine.stream_chat(ASK, ChatOptions(tools=request, sampling=GREEDY, max_tokens=96)))
    finally:
        engine.close()
    assert answer.token_ids[0] == OPENER_ID and CLOSER_ID in answer.token_ids
    calls = calls_of(chunks)
    assert len(calls) == 1 and answer.text == ""  # all of it is the call
    tool = {t.name: t for t in (WEATHER, ADD)}[calls[0]["function"]["name"]]
    jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), tool.parameters)
    assert answer.last.stats.forced > 0


def test_a_tool_call_through_the_loop_equals_plain_constrained_decoding(micro_model: ModelDir) -> None:
    """The micro model's tiers disagree often: drafts are refused, the grammar rolls back, and the call must
    still be plain constrained decoding's, token for token."""
    engine = Engine(micro_model.name, EngineSettings(n_threads=2), root=micro_model.root)
    request = ToolRequest((WEATHER, ADD), "required")
    try:
        runs = {}
        for draft in ("none", "q4_k_m"):
            k = None if draft == "none" else 3  # a fixed draft length: drafts run whatever the machine's costs
            options = ChatOptions(tools=request, sampling=GREEDY, max_tokens=80, draft=draft, level="high", k=k)
            runs[draft] = list(engine.stream_chat(ASK, options))
    finally:
        engine.close()
    tokens = {d: [t for c in chunks for t in c.tokens] for d, chunks in runs.items()}
    assert tokens["q4_k_m"] == tokens["none"]
    assert calls_of(runs["q4_k_m"])[0]["function"]["name"] == calls_of(runs["none"])[0]["function"]["name"]
    spec = runs["q4_k_m"][-1].stats
    assert spec.forced > 0 and spec.drafted > 0 and runs["none"][-1].stats.forced == 0


def test_logprobs_come_from_the_verify_rows_and_forced_tokens_are_certain(micro_model: ModelDir) -> None:
    engine = Engine(micro_model.name, EngineSettings(n_threads=2), root=micro_model.root)
    try:
        options = ChatOptions(tools=ToolRequest((ADD,), "add"), sampling=GREEDY, max_tokens=40, logprobs=3)
        chunks = list(engine.stream_chat(ASK, options))
    finally:
        engine.close()
    choices = [lp for c in chunks for lp in c.logprobs]
    assert len(choices) == sum(len(c.tokens) for c in chunks)
    forced = chunks[-1].stats.forced
    certain = [c.logprob == 0.0 and len(c.top) == 1 for c in choices]  # the mask left no choice
    assert certain[0] and sum(certain) >= forced > 0  # the call's wrapper, first of all
    for c in choices:
        assert c.logprob <= 0.0 and 1 <= len(c.top) <= 3
        assert c.top[0][2] == pytest.approx(c.logprob)  # greedy: the chosen token is the most likely one
        assert [x for _, _, x in c.top] == sorted((x for _, _, x in c.top), reverse=True)


@pytest.mark.slow  # a conversion of its own; the Hermes micro model covers the template path quickly
def test_a_llama_template_renders_the_tools_and_the_call_is_the_whole_answer(llama: ModelDir) -> None:
    engine = Engine(llama.name, EngineSettings(n_threads=2), root=llama.root)
    past = [*ASK, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"}, {"role": "user", "content": "And Rome?"}]
    request = ToolRequest((WEATHER, ADD), "required")
    try:
        decision = engine.decide(ASK[0]["content"], ChatOptions())
        parent, _ = engine.pair(decision.choice, decision.placement)
        shown, tools = prepare_tools(past, request, syntax_for(parent.metadata()["tokenizer.chat_template"]))
        text = parent.detokenize(engine.render(parent, shown, tools), special=True)
        chunks = list(engine.stream_chat(past, ChatOptions(tools=request, sampling=GREEDY, max_tokens=96)))
    finally:
        engine.close()
    assert json.dumps(WEATHER.as_openai()) in text and "<|im_start|>ipython\n3<|im_end|>" in text
    assert '{"name": "add", "parameters": {"a": 1, "b": 2}}' in text
    (call,) = calls_of(chunks)
    tool = {t.name: t for t in (WEATHER, ADD)}[call["function"]["name"]]
    jsonschema.validate(json.loads(call["function"]["arguments"]), tool.parameters)
    assert "".join(c.text for c in chunks) == ""
    assert chunks[-1].stats.stop_reason == "eos"  # one call, then the end: Llama's form has no second


@pytest.mark.slow  # a whole `specquant bench` run
def test_bench_runs_a_tools_workload_and_scores_the_calls(demo_cache: Path, tmp_path: Path) -> None:
    tools = [ADD.as_openai(), WEATHER.as_openai()]
    prompts = tmp_path / "tools.jsonl"
    lines = [{"id": "t1", "prompt": "Add 2 and 3.", "tools": tools, "tool_choice": "add"},
             {"id": "t2", "prompt": "Weather in Rome, in celsius?", "tools": tools, "tool_choice": "required"}]
    prompts.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out"
    result = run_cli("bench", "--prompts", str(prompts), "--configs", "f16", "exact", "--max-tokens", "64",
                     "--threads", "2", "--no-memory", "--out", str(out))
    assert result.returncode == 0, result.stderr
    results = json.loads((out / "results.json").read_text())
    summary = results["summary"]["tools"]
    assert summary["f16"]["accuracy"] == 1.0 and summary["exact"]["accuracy"] == 1.0  # each call validates
    assert summary["exact"]["token_sources"]["forced"] > 0 and summary["f16"]["token_sources"]["forced"] == 0
    first = next(r for r in results["runs"] if r["prompt_id"] == "t1")
    assert first["calls"][0]["function"]["name"] == "add" and first["text"].startswith(OPENER)

    bad = tmp_path / "bad.jsonl"
    broken = {"type": "function", "function": {"name": "f", "parameters": {"type": "integer", "minimum": 5,
                                                                            "maximum": 2}}}
    bad.write_text(json.dumps({"prompt": "x", "tools": [broken]}) + "\n")
    assert_one_line_error(run_cli("bench", "--prompts", str(bad), "--no-memory"), f"{bad}:1", "minimum")
