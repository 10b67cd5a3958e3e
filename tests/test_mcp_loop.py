"""MCP tools in a chat (#43), end to end on the demo model and tests/mcp_server.py: `specquant chat --mcp` with
each approval mode, a crash, a hang cut by the time-out and by Stop, a denial through the window's kind of
approver (a callback), and one line for a config that is not JSON."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from runtime.chat.toolbox import McpToolbox
from runtime.engine.engine import Engine
from runtime.engine.options import ChatOptions
from runtime.engine.tool_loop import CallFinished, LoopFinished, run_tool_loop
from runtime.errors import Cancelled
from runtime.mcp import ApprovalAnswer, ApprovalPolicy, McpHost, ServerConfig
from runtime.mcp.approval import DENIED, TURNED_OFF
from runtime.mcp.switches import FILE_NAME, ToolSwitches
from runtime.models.cache import ModelDir
from tests.conftest import assert_one_line_error, engine_on_copy, run_cli, run_cli_here

SERVER = str(Path(__file__).with_name("mcp_server.py"))
ASK = "What is 17 plus 25? Use the tool."
GREEDY = ChatOptions(max_tokens=64, sampling_overrides=(("temperature", 0.0),))


def config(tmp_path: Path, only: str) -> Path:
    """An mcp.json with one server, `calc`, that lists the tool `only`."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"calc": {"command": sys.executable, "args": [SERVER, "--only", only]}}}))
    return path


def chat(tmp_path: Path, only: str, *flags: str, child: bool = False):
    """`specquant chat --mcp` with one tool; in this process (run_cli_here: the same exit code, output and one
    error line) unless `child`, which the first test asks for: the command as a user runs it, once per file."""
    env = {"SPECQUANT_DATA_DIR": str(tmp_path / "data"), "SPECQUANT_CONFIG_DIR": str(tmp_path / "config")}
    args = ("chat", "--mcp", str(config(tmp_path, only)), "--tool-choice", "required", "--json",
            "--max-tokens", "64", "--temp", "0", "--prompt", ASK, *flags)
    out = run_cli(*args, env=env, timeout=300) if child else run_cli_here(*args, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stderr


def test_approve_all_runs_the_call_and_answers_after_its_result(demo_cache: Path, tmp_path: Path) -> None:
    data, stderr = chat(tmp_path, "add", "--approve", "all", child=True)
    call = data["calls"][0]
    assert (call["server"], call["tool"], call["approval"], call["result"]) == ("calc", "add", "allowed", "42")
    assert json.loads(call["arguments"]) == {"a": 17, "b": 25}  # held to the tool's schema by the grammar
    assert data["rounds"] >= 2 and "[tool] calc › calc__add" in stderr


def test_a_tool_switched_off_in_the_window_is_neither_offered_nor_run_from_the_cli(
    demo_cache: Path, tmp_path: Path
) -> None:
    """The safety bug of #48: the Tools panel's switch (one store, runtime.mcp.switches) holds for the CLI."""
    ToolSwitches(tmp_path / "config" / FILE_NAME).turn("calc", "add", on=False)  # as the Tools tab writes it
    data, stderr = chat(tmp_path, "add", "--approve", "all")
    assert data["calls"] == [] and data["rounds"] == 1 and "[tool]" not in stderr
    ToolSwitches(tmp_path / "config" / FILE_NAME).turn("calc", "add", on=True)
    data, _ = chat(tmp_path, "add", "--approve", "all")
    assert [c["tool"] for c in data["calls"]] == ["add"]  # switched on again: offered and run


def test_approve_none_and_no_terminal_run_nothing(demo_cache: Path, tmp_path: Path) -> None:
    for flags in (("--approve", "none"), ()):  # without a terminal, the default is none
        data, _ = chat(tmp_path, "add", "--max-rounds", "2", *flags)
        call = data["calls"][0]
        assert call["approval"] == "refused" and call["result"] == TURNED_OFF


def test_a_crash_and_a_hang_are_results_and_the_chat_goes_on(demo_cache: Path, tmp_path: Path) -> None:
    crashed, _ = chat(tmp_path, "crash", "--approve", "all", "--max-rounds", "2")
    assert crashed["calls"][0]["is_error"] and crashed["rounds"] == 2
    started = time.monotonic()
    hung, _ = chat(tmp_path, "hang", "--approve", "all", "--max-rounds", "2", "--tool-timeout", "2")
    assert hung["calls"][0]["is_error"] and "timed out after 2 s" in hung["calls"][0]["result"]
    assert time.monotonic() - started < 120


def test_bad_config_and_flags_are_one_line(demo_cache: Path, tmp_path: Path) -> None:
    # In this process (run_cli_here): `chat` above runs as a child; these refusals need no interpreter start.
    bad = tmp_path / "mcp.json"
    bad.write_text("{oops")
    assert_one_line_error(run_cli_here("chat", "--mcp", str(bad), "--prompt", "hi"), "mcp.json")
    assert_one_line_error(run_cli_here("chat", "--approve", "all", "--prompt", "hi"), "--approve needs --mcp")
    zero = run_cli_here("chat", "--mcp", str(bad), "--max-rounds", "0", "--prompt", "hi")
    assert_one_line_error(zero, "--max-rounds")


@pytest.fixture(scope="module")
def engine(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory):
    with engine_on_copy(demo_model, tmp_path_factory.mktemp("mcp-loop")) as e:
        yield e


def toolbox(only: str, ask, tmp_path: Path, timeout: float = 60) -> McpToolbox:
    from runtime.mcp import Approvals

    host = McpHost([ServerConfig("calc", command=sys.executable, args=(SERVER, "--only", only))], start_timeout=20)
    policy = ApprovalPolicy("ask", ask, Approvals(tmp_path / "approvals.json"))
    return McpToolbox(host, policy, timeout=timeout)


def test_a_denied_call_never_reaches_the_server_and_always_is_remembered(engine: Engine, tmp_path: Path) -> None:
    asked: list[str] = []
    # The question carries what the tool does, as its server described it (the window shows it, #63).
    box = toolbox("add", lambda request: asked.append(f"{request.tool}: {request.description}") or ApprovalAnswer.DENY,
                  tmp_path)
    try:
        end = list(run_tool_loop(engine.stream_chat, [{"role": "user", "content": ASK}], GREEDY, box, box.approve,
                                 first_choice="required", max_rounds=2))[-1]
        assert isinstance(end, LoopFinished) and asked == ["add: Add two integers."]
        assert end.calls[0][1] is False and end.messages[2]["content"] == DENIED
        box.policy.ask = lambda request: ApprovalAnswer.ALWAYS
        list(run_tool_loop(engine.stream_chat, [{"role": "user", "content": ASK}], GREEDY, box, box.approve,
                           first_choice="required", max_rounds=2))
        box.policy.ask = None  # nobody to ask now: only the remembered "always" lets it run
        again = list(run_tool_loop(engine.stream_chat, [{"role": "user", "content": ASK}], GREEDY, box, box.approve,
                                   first_choice="required", max_rounds=2))
        assert [e.result.text for e in again if isinstance(e, CallFinished)] == ["42"]
    finally:
        box.close()


def test_stop_cancels_a_running_tool_call(engine: Engine, tmp_path: Path) -> None:
    cancel = threading.Event()
    allowed: list[float] = []

    def allow_then_stop(request: object) -> ApprovalAnswer:  # the Stop comes 1 s into the call
        allowed.append(time.monotonic())
        threading.Timer(1.0, cancel.set).start()
        return ApprovalAnswer.ALLOW_ONCE

    box = toolbox("hang", allow_then_stop, tmp_path)
    try:
        with pytest.raises(Cancelled, match="tool call"):
            list(run_tool_loop(engine.stream_chat, [{"role": "user", "content": ASK}], GREEDY, box, box.approve,
                               cancel=cancel, first_choice="required"))
        assert time.monotonic() - allowed[0] < 10  # not the 60 s time-out
    finally:
        box.close()
