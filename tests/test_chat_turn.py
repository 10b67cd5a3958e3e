"""The chat layer (#48): one turn, assembled once, on the demo model. A turn without tools is one round whose
tokens are the engine's own; the preset reaches the model but not what is stored; a tool switched off in the
one switch store is neither offered nor run, and its call is refused if the switch turns while the turn runs."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runtime.chat.toolbox import McpToolbox, ToolSite
from runtime.chat.turn import TurnSpec, assemble, run_turn
from runtime.engine.answer import Chunk
from runtime.engine.engine import Engine
from runtime.engine.options import ChatOptions
from runtime.engine.personas import Persona
from runtime.engine.tool_loop import LoopFinished, RoundStarted
from runtime.engine.tools import ToolRequest
from runtime.mcp import ApprovalPolicy
from runtime.mcp.switches import SWITCHED_OFF, ToolSwitches
from runtime.models.cache import ModelDir
from tests.conftest import engine_on_copy
from tests.test_tool_loop import ADD, ASK, GREEDY, Calculator


@pytest.fixture(scope="module")
def engine(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory):
    with engine_on_copy(demo_model, tmp_path_factory.mktemp("turn")) as e:
        yield e


def test_a_turn_without_tools_is_one_round_of_the_engines_own_tokens(engine: Engine) -> None:
    ask = [{"role": "user", "content": "Name three primary colors."}]
    exact = replace(GREEDY, preset="exact")  # F16's words: the same text asked twice (a repeat may draft)
    plain = "".join(c.text for c in engine.stream_chat(ask, exact))
    events = list(run_turn(engine.stream_chat, TurnSpec(ask, exact)))
    assert isinstance(events[0], RoundStarted) and isinstance(events[-1], LoopFinished)
    end = events[-1]
    text = "".join(e.text for e in events if isinstance(e, Chunk))
    assert text == plain and end.rounds == 1 and end.calls == []
    assert end.messages == [*ask, {"role": "assistant", "content": plain}]


def test_the_preset_reaches_the_model_but_not_the_stored_chat(engine: Engine) -> None:
    seen: list[list[dict[str, Any]]] = []

    def stream(chat: list[dict[str, Any]], options: ChatOptions) -> Any:
        seen.append(chat)
        return engine.stream_chat(chat, options)

    persona = Persona("Pirate", "Answer as a pirate would.", (("temperature", 0.0),))
    ask = [{"role": "user", "content": "Say hello."}]
    end = list(run_turn(stream, TurnSpec(ask, ChatOptions(max_tokens=8), persona)))[-1]
    assert seen[0][0] == {"role": "system", "content": "Answer as a pirate would."}
    assert [m["role"] for m in end.messages] == ["user", "assistant"]


def test_earlier_calls_are_shown_but_no_tool_is_offered_without_a_toolbox() -> None:
    history = [*ASK, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "3"}]
    _, options = assemble(TurnSpec(history, GREEDY))
    assert options.tools == ToolRequest((), "none")
    client_tools = ToolRequest((ADD,), "auto")  # an API client's own tools stay as it sent them
    _, options = assemble(TurnSpec(history, ChatOptions(tools=client_tools)))
    assert options.tools is client_tools


def test_a_switched_off_tool_is_not_offered_and_its_call_does_not_run(engine: Engine, tmp_path: Path) -> None:
    switches = ToolSwitches(tmp_path / "mcp-tools.json")
    calc = Calculator()
    box = McpToolbox(None, ApprovalPolicy("all"), [calc], switches=switches)
    assert [t.name for t in box.tools()] == ["add"] and box.where("add") == ToolSite("calc", "add")

    switches.turn("calc", "add", on=False)  # as the window's Tools tab writes it
    assert box.tools() == []
    end = list(run_turn(engine.stream_chat, TurnSpec(ASK, GREEDY, toolbox=box, first_choice="required")))[-1]
    assert end.calls == [] and calc.calls == []  # no tool offered: the answer is text

    # Turned off while the turn ran: listed when it began, refused when called.
    switches.turn("calc", "add", on=True)
    offered = box.tools()
    switches.turn("calc", "add", on=False)
    result = box.call(offered[0].name, {"a": 1, "b": 2}, threading.Event())
    assert result.is_error and result.text == SWITCHED_OFF and calc.calls == []

