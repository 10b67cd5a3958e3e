"""Each family's tool-call format (runtime/engine/call_formats.py), told from its real chat template
(tests/data/chat_templates: Qwen2.5-Coder's is the bench model's own, read from its GGUF; the others are the
public templates, Granite's, Qwen3's and SmolLM3's cut to their tool-calling parts): the chat as the template
renders it, the auto grammar (text, or the family's call from its trigger on) on a real tokenizer, the parser
on every cut of the text, the calls through the tool loop, and a control-token opener through the engine."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from converters.convert import convert
from runtime.decode.grammar import tokenizer_for
from runtime.engine.answer import Chunk, Stats
from runtime.engine.call_formats import GENERIC, GRANITE, HERMES, LLAMA3, MISTRAL, PHI4, CallFormat, detect
from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.options import ChatOptions
from runtime.engine.tool_loop import CallFinished, LoopFinished, ToolResult, run_tool_loop
from runtime.engine.tools import CallParser, Tool, ToolRequest, assemble_calls, call_grammar, call_text, prepare_tools
from runtime.models.cache import ModelDir
from tests.micro_model import MicroSpec, write_micro_gguf
from tests.test_tools import ADD, GREEDY, WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
ORDERS = Tool("orders__get_order_status", "The shipping status of an order", {
    "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]})
# What qwen-coder-1.5b answers to "What is the shipping status of order A-4521? Use the tool to look it up."
# (issue 50): the call in its template's JSON, without the <tool_call> tags around it; and what its Q4_K_M
# writes greedily to the same prompt under the auto grammar (measured 2026-12-06 with the bench model's GGUF):
# the same call pretty-printed in a ```json fence, which llama.cpp's Hermes trigger accepts too.
CODER_ANSWER = '{"name": "orders__get_order_status", "arguments": {"order_id": "A-4521"}}'
# What it answered in a later run (the issue's own text): the call in its template's doubled braces, which the
# template shows literally (`{{"name": <function-name>, "arguments": <args-json-object>}}`).
CODER_DOUBLED = '{{"name": "orders__get_order_status", "arguments": {"order_id": "A-4521"}}}'
CODER_FENCED = ('```json\n{\n  "name": "orders__get_order_status",\n  "arguments": {\n    "order_id": "A-4521"\n  }\n}'
                '\n```')

FAMILIES = {  # template file: (format, whether the template renders the tools itself)
    "qwen2.5-coder.jinja": ("hermes", True),
    "qwen3.jinja": ("hermes", True),
    "smollm3-tools.jinja": ("hermes", True),
    "llama3.2.jinja": ("llama3", True),
    "mistral-7b-v0.3.jinja": ("mistral", True),
    "granite-3.1.jinja": ("granite", True),
    "phi-4-mini.jinja": ("phi4", True),  # from the system message's `tools` field
    "gemma-3.jinja": ("generic", False),
}


def template(name: str) -> str:
    return (TEMPLATES / name).read_text()


def past_chat() -> list[dict[str, Any]]:
    call = {"id": "call_0123456789abcdef01234567", "type": "function",
            "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    return [
        {"role": "user", "content": "Add 1 and 2."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "name": "add", "content": "3"},
        {"role": "assistant", "content": "It is 3."},
        {"role": "user", "content": "And the weather in Paris?"},
    ]


# --- which format, and the chat as the template renders it --------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_each_template_is_told_apart_and_renders_the_tools_the_past_call_and_its_result(name: str) -> None:
    fmt = detect(template(name))
    assert (fmt.name, fmt.own or fmt.tools_in_system) == FAMILIES[name]
    shown, tools = prepare_tools(past_chat(), ToolRequest((WEATHER, ADD)), fmt)
    prompt = Jinja2ChatFormatter(template(name), "</s>", "<s>")(messages=shown, tools=tools).prompt
    assert "get_weather" in prompt and "The weather in a city" in prompt  # the tools, in the template's words
    assert "It is 3." in prompt and "3" in prompt.split("Add 1 and 2.")[1]
    add_call = {"hermes": '{"name": "add", "arguments": {"a": 1, "b": 2}}',
                "llama3": '{"name": "add", "parameters": {"a": 1, "b": 2}}',
                "mistral": '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "',  # 9 letters
                "granite": '<|tool_call|>[{"name": "add", "arguments": {"a": 1, "b": 2}}]',
                "phi4": '<|tool_call|>{"name": "add", "arguments": {"a": 1, "b": 2}}<|/tool_call|>',
                "generic": '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'}[fmt.name]
    assert add_call in prompt
    if fmt.name == "mistral":
        call_id = prompt.split('"id": "')[1][:9]
        assert call_id.isalnum() and f'"call_id": "{call_id}"' in prompt  # the same id on the call and its result
    if fmt.name == "phi4":
        assert "<|tool|>[" in prompt  # Phi-4-mini's own template reads the system message's tools field


def test_an_unknown_template_falls_back_to_the_generic_form_and_says_so() -> None:
    assert detect(None) is GENERIC and detect("{{ messages }}") is GENERIC
    assert detect(template("gemma-3.jinja")).describe().startswith("generic: the template has no call format")
    assert detect(template("qwen2.5-coder.jinja")).describe() == (
        'hermes: <tool_call>\\n{"name": "f", "arguments": {}}\\n</tool_call>')


# --- the grammar and the parser, per format ------------------------------------------------------------------
FORMATS = {"hermes": HERMES, "llama3": LLAMA3, "mistral": MISTRAL, "granite": GRANITE, "phi4": PHI4,
           "generic": GENERIC}


def parse(fmt: CallFormat, text: str, size: int, calls_only: bool = False) -> tuple[str, list[tuple[str, Any]]]:
    parser, content, deltas = CallParser(fmt, calls_only), "", []
    for i in range(0, len(text), size):
        said, found = parser.feed(text[i : i + size])
        content, deltas = content + said, deltas + found
    said, found = parser.feed("", final=True)
    calls = assemble_calls([*deltas, *found])
    assert len({c["id"] for c in calls}) == len(calls)
    return content + said, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def terms(fmt: CallFormat) -> tuple[str, str]:
    """The opener and closer as quoted text: the demo vocabulary has no token for them."""
    return json.dumps(fmt.opener), json.dumps(fmt.closer)


@pytest.mark.parametrize("name", FORMATS)
def test_auto_allows_text_or_the_family_s_call_and_the_parser_reads_it_however_cut(name: str, demo_gguf: Path) -> None:
    fmt = FORMATS[name]
    tokenizer = tokenizer_for(demo_gguf)
    auto = call_grammar(ToolRequest((WEATHER, ADD), "auto"), fmt, *terms(fmt))
    assert auto is not None
    answer = call_text("add", {"a": 1, "b": 2}, fmt, "call_1")
    for text in ["Just text, no call.", answer]:
        c = auto.constraint(tokenizer)
        ids = tokenizer.tokenize_str(text)
        assert c.valid_prefix(ids) == len(ids), text
        c.consume(ids)
        assert c.is_accepting, text
    c = auto.constraint(tokenizer)  # from the trigger on, only a known tool
    bad = tokenizer.tokenize_str(answer.replace('"add"', '"nope"'))
    assert c.valid_prefix(bad) < len(bad)
    for size in (1, 2, 3, 7, len(answer)):
        assert parse(fmt, answer, size) == ("", [("add", {"a": 1, "b": 2})]), size
        assert parse(fmt, "Just text, no call.", size) == ("Just text, no call.", [])


@pytest.mark.parametrize("name", ["mistral", "granite"])
def test_array_formats_carry_several_calls_in_one_block(name: str, demo_gguf: Path) -> None:
    fmt = FORMATS[name]
    one, two = (call_text(n, a, fmt, i) for n, a, i in [("add", {"a": 1, "b": 2}, "x"), ("add", {"a": 3, "b": 4}, "y")])
    answer = one[:-1] + ", " + two[len(fmt.opener) + 1 :]  # [TOOL_CALLS][{...}, {...}]
    tokenizer = tokenizer_for(demo_gguf)
    c = call_grammar(ToolRequest((WEATHER, ADD), "required"), fmt, *terms(fmt)).constraint(tokenizer)
    ids = tokenizer.tokenize_str(answer)
    assert c.valid_prefix(ids) == len(ids)
    c.consume(ids)
    assert c.done
    for size in (1, 5, len(answer)):
        assert parse(fmt, answer, size, calls_only=True) == ("", [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})])
    cut = answer[: answer.index("3") + 1]  # the second call cut at the token limit: the first stands
    assert parse(fmt, cut, 1, calls_only=True) == ("", [("add", {"a": 1, "b": 2})])


def test_a_mistral_call_ends_with_a_nine_letter_id(demo_gguf: Path) -> None:
    tokenizer = tokenizer_for(demo_gguf)
    c = call_grammar(ToolRequest((ADD,), "add"), MISTRAL, *terms(MISTRAL)).constraint(tokenizer)
    assert c.forced_bytes().decode() == '[TOOL_CALLS][{"name": "add", "arguments": {'
    for call_id, ok in [("abcDEF123", True), ("short", False), ("with-dash", False)]:
        text = call_text("add", {"a": 1, "b": 2}, MISTRAL).replace(call_text("add", {}, MISTRAL)[-12:-3], call_id)
        c.reset()
        ids = tokenizer.tokenize_str(text)
        assert (c.valid_prefix(ids) == len(ids)) == ok, call_id


# --- issue 50: qwen-coder's untagged call --------------------------------------------------------------------
def test_qwen_coder_s_untagged_call_is_a_call_under_auto(demo_gguf: Path) -> None:
    fmt = detect(template("qwen2.5-coder.jinja"))
    tokenizer = tokenizer_for(demo_gguf)
    auto = call_grammar(ToolRequest((ORDERS, ADD), "auto"), fmt, *terms(fmt))
    assert auto is not None
    c = auto.constraint(tokenizer)
    trigger = tokenizer.tokenize_str('{"name": "orders')
    c.consume(trigger)  # from the trigger on the grammar holds the call: the name's rest is forced
    assert c.forced_bytes().decode() == '__get_order_status"'  # then the model's own layout
    c = auto.constraint(tokenizer)
    ids = tokenizer.tokenize_str(CODER_ANSWER)
    assert c.valid_prefix(ids) == len(ids)
    c.consume(ids)
    assert c.is_accepting
    tagged = call_text("orders__get_order_status", {"order_id": "A-4521"}, fmt)
    code = "```python\nprint(1)\n```"
    for text in [CODER_ANSWER, CODER_DOUBLED, CODER_FENCED, tagged, "Sure.\n" + tagged, code]:
        c = auto.constraint(tokenizer)
        ids = tokenizer.tokenize_str(text)
        assert c.valid_prefix(ids) == len(ids), text
        c.consume(ids)
        assert c.is_accepting, text
    c = auto.constraint(tokenizer)  # a fenced call of an unknown tool is no text either
    bad = tokenizer.tokenize_str(CODER_FENCED.replace("orders__", "nope__"))
    assert c.valid_prefix(bad) < len(bad)
    for answer in (CODER_ANSWER, CODER_DOUBLED, CODER_FENCED):
        for size in (1, 2, 3, 7, len(answer)):
            assert parse(fmt, answer, size) == ("", [("orders__get_order_status", {"order_id": "A-4521"})])
        assert parse(fmt, answer[:-12], 1) == ("", [])  # cut inside the arguments: no call, and no text
    assert parse(fmt, code, 2) == (code, [])
    assert parse(fmt, '{{x}} is a Jinja expression', 3) == ('{{x}} is a Jinja expression', [])
    assert parse(fmt, '{"a": 1} is JSON', 2) == ('{"a": 1} is JSON', [])
    assert parse(fmt, "Sure.\n" + tagged, 4) == ("Sure.", [("orders__get_order_status", {"order_id": "A-4521"})])


class Orders:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def tools(self) -> tuple[Tool, ...]:
        return (ORDERS,)

    def source(self, name: str) -> str:
        return "orders"

    def call(self, name: str, arguments: dict[str, Any], cancel: threading.Event) -> ToolResult:
        self.calls.append(arguments)
        return ToolResult("shipped on 2026-12-01", source="orders")


def replay(answers: Iterator[str], choices: list[str]) -> Any:
    """A stream that writes `answers` in turn as the engine streams them (text through the same parser that
    runtime/engine/generate.py feeds), noting each round's tool choice."""
    fmt = detect(template("qwen2.5-coder.jinja"))

    def stream(chat: list[dict[str, Any]], options: ChatOptions) -> Iterator[Chunk]:
        assert options.tools is not None
        choices.append(options.tools.choice)
        parser = CallParser(fmt, options.tools.choice != "auto")
        text = next(answers)
        for i in range(0, len(text), 5):
            said, found = parser.feed(text[i : i + 5])
            yield Chunk(said, (), (), None, None, None, Stats(), calls=tuple(found))  # type: ignore[arg-type]
        said, found = parser.feed("", final=True)
        yield Chunk(said, (), (), None, None, None, Stats(stop_reason="eos"), done=True, calls=tuple(found))  # type: ignore[arg-type]

    return stream


ASK_ORDER = [{"role": "user", "content": "What is the shipping status of order A-4521? Use the tool to look it up."}]


def test_the_untagged_call_runs_through_the_tool_loop() -> None:
    """The answers of the issue's run, replayed: the call runs, its result goes back, the second answer is text."""
    stream = replay(iter([CODER_ANSWER, "Order A-4521 shipped on 2026-12-01."]), [])
    orders = Orders()
    events = list(run_tool_loop(stream, ASK_ORDER, ChatOptions(), orders, lambda call, source: True))
    assert orders.calls == [{"order_id": "A-4521"}]
    assert [e.result.text for e in events if isinstance(e, CallFinished)] == ["shipped on 2026-12-01"]
    end = events[-1]
    assert isinstance(end, LoopFinished) and end.rounds == 2
    assert end.messages[1]["tool_calls"][0]["function"]["name"] == "orders__get_order_status"
    assert end.messages[1]["content"] == "" and end.messages[-1]["content"] == "Order A-4521 shipped on 2026-12-01."


# --- a control-token opener through the engine ------------------------------------------------------------
TOOL_CALLS_ID = 49150  # one of the demo vocabulary's last entries, renamed


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory, demo_gguf: Path) -> ModelDir:
    """A micro model with Mistral's template and `[TOOL_CALLS]` as a control token, as in Mistral's vocabulary."""
    root = tmp_path_factory.mktemp("mistral")
    texts = {TOOL_CALLS_ID: "[TOOL_CALLS]"}
    types = dict.fromkeys(texts, gguf.TokenType.CONTROL)
    path = write_micro_gguf(root / "mistral-f16.gguf", demo_gguf, MicroSpec(seed=3), texts, types,
                            template("mistral-7b-v0.3.jinja"))
    manifest = convert(str(path), name="mistral", root=root / "cache")
    return ModelDir(root / "cache", manifest["name"])


def test_a_control_token_opener_is_not_in_the_text_and_the_call_is_still_read(mistral: ModelDir) -> None:
    engine = Engine(mistral.name, EngineSettings(n_threads=2), root=mistral.root)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    try:
        chunks = list(engine.stream_chat(ask, ChatOptions(tools=ToolRequest((WEATHER, ADD), "required"),
                                                          sampling=GREEDY, max_tokens=96, draft="none")))
    finally:
        engine.close()
    tokens = [t for c in chunks for t in c.tokens]
    assert tokens[0] == TOOL_CALLS_ID  # the model's own token, forced
    calls = assemble_calls([d for c in chunks for d in c.calls])
    assert calls and "".join(c.text for c in chunks) == ""
    assert calls[0]["function"]["name"] in ("get_weather", "add")
    json.loads(calls[0]["function"]["arguments"])


def test_a_call_repeated_with_its_result_in_hand_is_not_run_again() -> None:
    """What the bench model did greedily on the issue's question (2026-12-06): after the result it called again
    with the same arguments (laid out differently), round after round, then said nothing. The repeat is not run;
    the next round must answer (tool choice none), and does, from the result it has."""
    choices: list[str] = []
    answers = iter([CODER_FENCED, CODER_DOUBLED, "Order A-4521 shipped on 2026-12-01."])
    orders = Orders()
    events = list(run_tool_loop(replay(answers, choices), ASK_ORDER, ChatOptions(), orders, lambda c, s: True))
    assert orders.calls == [{"order_id": "A-4521"}]
    assert choices == ["auto", "auto", "none"]
    end = events[-1]
    assert isinstance(end, LoopFinished) and end.rounds == 3
    assert [m["role"] for m in end.messages] == ["user", "assistant", "tool", "assistant"]  # no repeat kept
    assert end.messages[-1]["content"] == "Order A-4521 shipped on 2026-12-01."
    other = iter([CODER_ANSWER, CODER_ANSWER.replace("A-4521", "B-7"), "Both looked up."])
    orders = Orders()  # other arguments are another call: it runs
    list(run_tool_loop(replay(other, []), ASK_ORDER, ChatOptions(), orders, lambda c, s: True))
    assert orders.calls == [{"order_id": "A-4521"}, {"order_id": "B-7"}]
