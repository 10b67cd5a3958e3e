"""Hostile MCP servers (#52): real servers (tests/mcp_server.py, some behind its spoiling relay) that write bytes
that are not UTF-8, lines that never end, tools no chat can take, escape sequences, and children left behind.
Each must cost its own line or its own server, never the chat, the terminal or a process after close."""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest
from mcp import types

from commands.chat_tools import ask_on_terminal, event_line, print_skipped
from runtime.errors import UserError
from runtime.mcp import ApprovalAnswer, CallRequest, McpHost, ServerConfig, check_snippet, load_config
from runtime.mcp.listing import MAX_TOOLS, Names, build_listing
from runtime.schema_limits import SchemaBudget
from tests.test_mcp_host import SERVER, assert_none_left, our_servers, stdio


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config"
    monkeypatch.setenv("SPECQUANT_CONFIG_DIR", str(path))
    return path


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead, its reaper not yet there
    except psutil.NoSuchProcess:
        return True


# --- 5: a server cannot silence itself ----------------------------------------------------------------------


def test_bytes_that_are_not_utf8_cost_one_dropped_line(caplog: pytest.LogCaptureFixture) -> None:
    """Before the fix the reader died on the first such byte: the server stayed "ready" and every call timed out."""
    before = our_servers()
    caplog.set_level(logging.DEBUG)
    with McpHost([stdio("p", "--proxy")], start_timeout=20) as host:
        result = host.call("p__echo", {"text": "INJECT-BAD-BYTES"}, timeout=10)
        assert (result.text, result.is_error) == ("INJECT-BAD-BYTES", False)
        assert host.call("p__add", {"a": 2, "b": 3}, timeout=10).text == "5"
        assert host.status()["p"].state == "ready"
    dropped = [r for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    assert len(dropped) == 1 and dropped[0].levelno == logging.WARNING and dropped[0].exc_info is None
    assert "\\xff" not in dropped[0].getMessage() and "not UTF-8" in dropped[0].getMessage()
    assert_none_left(before)


def test_output_that_cannot_be_read_fails_the_server_and_its_call_at_once() -> None:
    """A line that never ends: the server is failed with the reason, the call returns without its time-out."""
    before = our_servers()
    with McpHost([stdio("p", "--proxy")], start_timeout=20) as host:
        began = time.monotonic()
        result = host.call("p__echo", {"text": "INJECT-FLOOD"}, timeout=60)
        assert result.is_error and "longer than 16 MiB" in result.text
        assert time.monotonic() - began < 15
        status = host.status()["p"]
        assert status.state == "failed" and "longer than 16 MiB" in status.reason
    assert_none_left(before)


# --- 9: lines that are not JSON-RPC ---------------------------------------------------------------------------


def test_lines_that_are_not_json_rpc_are_one_log_line_each_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with McpHost([stdio("noisy", "--garbage")], start_timeout=20) as host:
        assert host.start()["noisy"].state == "ready"
    noted = [r for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    assert [r.levelno for r in noted] == [logging.WARNING, logging.DEBUG]
    assert not [r for r in caplog.records if r.exc_info is not None]


# --- 6: a tool that cannot be offered costs only itself -------------------------------------------------------


def test_tools_no_chat_can_take_are_left_out_with_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    with McpHost([stdio("h", "--hostile-tools")], start_timeout=20) as host:
        offered = host.tools()
        names = [t["function"]["name"] for t in offered]
        assert names == ["h__add", "h__echo", "h__crash", "h__hang", "h__huge"]
        for tool in offered:  # each one is within the limits the chat's grammar checks
            SchemaBudget().check(tool["function"]["parameters"])
        reasons = {s.tool: s.reason for s in host.skipped()}
        assert {s.server for s in host.skipped()} == {"h"}
        print_skipped(host.skipped())
    assert reasons.keys() == {"deep", "wordy", "wide", "bad_schema"}
    assert "nested more than 64 levels deep" in reasons["deep"]
    assert "description is 1,000,006 characters long" in reasons["wordy"]
    assert "more than 5,000 properties" in reasons["wide"]
    [line] = capsys.readouterr().err.splitlines()  # one line per server (#59)
    assert line.startswith("specquant: warning: MCP server 'h': 4 tools left out: 'bad_schema': ")
    assert "'deep': its input schema is nested more than 64" in line and "1 more (1 of them: " in line


def test_a_server_listing_20000_tools_costs_one_warning_line(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Before #59: 39,747 lines, each skipped tool twice (the host's log and the chat's warning)."""
    with caplog.at_level(logging.WARNING), McpHost([stdio("big", "--many-tools", "20000")], start_timeout=60) as host:
        assert len(host.tools()) == MAX_TOOLS
        print_skipped(host.skipped())
    [line] = capsys.readouterr().err.splitlines()
    assert f"MCP server 'big': {20006 - MAX_TOOLS:,} tools left out: 'bad_schema': " in line
    assert f"{MAX_TOOLS} tools are offered already" in line
    assert not [r for r in caplog.records if r.name.startswith("runtime.mcp")]


def test_the_listings_limits_are_the_grammars() -> None:
    """The listing counts a tool's schema with the grammar's own budget (runtime.schema_limits, one copy): a
    schema one past any limit is a request's error and a tool left out, its reason naming the limit."""
    from runtime.mcp.listing import size_problem
    from runtime.schema_limits import SchemaTooLarge

    deep: dict[str, object] = {}
    for _ in range(70):
        deep = {"items": deep}
    names = [f"p{i}" for i in range(5001)]
    over = {
        "is nested more than 64 levels deep": {"properties": {"x": deep}},
        "holds more than 10,000 objects": {"properties": {n: {"anyOf": [{}] * 500} for n in names[:20]}},
        "holds more than 5,000 properties": {"properties": {n: {} for n in names}, "required": names},
        "has an object with more than 400 optional properties": {"properties": {n: {} for n in names[:401]}},
        "has an anyOf of more than 500 branches": {"properties": {"x": {"anyOf": [{}] * 501}}},
        "holds more than 1,000 enum values": {"properties": {"x": {"enum": list(range(1001))}}},
    }
    for reason, schema in over.items():
        assert size_problem({"type": "object", **schema}) == reason
        with pytest.raises(SchemaTooLarge):
            SchemaBudget().check(schema)
    assert size_problem({"type": "object", "properties": {"x": {"anyOf": [{}] * 500}}}) is None


def test_a_schema_too_deep_for_the_validator_is_a_reason_not_a_crash() -> None:
    deep: dict[str, object] = {"type": "string"}
    for _ in range(5000):  # past Python's recursion limit, which jsonschema's check would hit
        deep = {"type": "object", "properties": {"x": deep}}
    tool = types.Tool(name="abyss", input_schema={"type": "object", "properties": {"x": deep}})
    listing = build_listing([("s", [tool])])
    assert not listing.tools and "nested more than 64" in listing.skipped[0].reason


# --- 9: names that cannot collide ---------------------------------------------------------------------------


def tool(name: str) -> types.Tool:
    return types.Tool(name=name, input_schema={"type": "object"})


def test_an_offered_name_never_moves_to_another_servers_tool() -> None:
    """`s__t__u` is `s`'s `t__u`; once `s` is gone, that name must not come to mean `s__t`'s `u`."""
    names = Names()
    both = build_listing([("s", [tool("t__u")]), ("s__t", [tool("u")])], names)
    assert both.routes == {"s__t__u": ("s", "t__u"), "s__t__u_2": ("s__t", "u")}
    without_s = build_listing([("s__t", [tool("u")])], names)
    assert without_s.routes == {"s__t__u_2": ("s__t", "u")}
    again = build_listing([("s__t", [tool("u")]), ("s", [tool("t__u")])], names)  # s back, listed later
    assert again.routes == both.routes


def test_no_configured_server_can_take_the_built_in_tools_name(tmp_path: Path) -> None:
    """A server named `built-in` would share the approvals (always allow) of the built-in documents search."""
    path = tmp_path / "mcp.json"
    entry = {"command": sys.executable, "args": [SERVER]}
    path.write_text(json.dumps({"mcpServers": {"built-in": entry, "Built-In ": entry, "fine": entry}}))
    config = load_config(path)
    assert list(config.servers) == ["fine"] and len(config.problems) == 2
    assert all("SpecQuant's own tools" in p and "\n" not in p for p in config.problems)
    with McpHost([stdio("built-in")], start_timeout=20) as host:  # handed over directly, not from a file
        status = host.start()["built-in"]
    assert status.state == "failed" and "SpecQuant's own tools" in status.reason


# --- 9: a relative command is the config file's, never the current folder's -------------------------------


def test_a_relative_command_is_read_from_the_config_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cfg"
    (folder / "bin").mkdir(parents=True)
    script = folder / "bin" / "server"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {SERVER} --only add\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (folder / "mcp.json").write_text(json.dumps({"mcpServers": {"rel": {"command": "./bin/server"}}}))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "bin").mkdir(parents=True)  # a ./bin/server here must not be the one that runs
    monkeypatch.chdir(elsewhere)
    config = load_config(folder / "mcp.json")
    assert config.servers["rel"].command == str(folder / "bin" / "server")
    if os.name == "posix":  # a shell script: the command runs here
        assert not config.problems
        with McpHost(config, start_timeout=20) as host:
            assert host.call("rel__add", {"a": 1, "b": 2}, timeout=10).text == "3"
    servers, problems = check_snippet(json.dumps({"command": "./bin/server"}), name="pasted")
    assert not servers and problems == ["the pasted text: server 'pasted': command './bin/server' is a relative "
                                         "path: give the full path"]
    with pytest.raises(UserError):
        check_snippet("[]")


# --- 7: nothing from a server reaches the terminal raw ------------------------------------------------------


TITLE = "\x1b]0;pwned\x07"  # sets the terminal's title
CLEAR = "\x1b[2J"


def test_the_approval_prompt_shows_escape_sequences_as_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    request = CallRequest(f"files{CLEAR}", f"read_file\r{TITLE}delete_all", {"path": f"a\u202e{CLEAR}"})
    assert ask_on_terminal(request) is ApprovalAnswer.DENY
    shown = capsys.readouterr().err
    assert "\x1b" not in shown and "\r" not in shown and "\u202e" not in shown
    assert "read_file\\r\\e]0;pwned\\x07delete_all" in shown and "files\\e[2J" in shown


def test_tool_events_show_escape_sequences_as_text() -> None:
    from runtime.engine.tool_loop import CallDecided, CallFinished, CallProposed, ToolCall, ToolResult

    call = ToolCall("1", f"s__t{TITLE}", json.dumps({"q": CLEAR}, ensure_ascii=False))
    lines = [
        event_line(CallProposed(call, f"srv{CLEAR}")),
        event_line(CallDecided(call, False)),
        event_line(CallFinished(call, ToolResult(f"{TITLE}{CLEAR}result\nsecond line", False, 0.1))),
    ]
    for line in lines:
        assert line is not None and "\x1b" not in line and "\x07" not in line and "\n" not in line
    assert "\\e]0;pwned\\x07\\e[2Jresult" in lines[2]  # type: ignore[operator]


def test_a_servers_stderr_in_its_failure_reason_is_shown_as_text(tmp_path: Path) -> None:
    script = tmp_path / "bad_server.py"
    script.write_text(f"import sys\nsys.stderr.write('boom{CLEAR}\\x1b]0;title\\x07\\n')\nsys.exit(1)\n")
    with McpHost([ServerConfig("bad", command=sys.executable, args=(str(script),))], start_timeout=20) as host:
        status = host.start()["bad"]
    assert status.state == "failed" and "boom\\e[2J" in status.reason and "\x1b" not in status.reason


# --- 8: a server's children end with it ---------------------------------------------------------------------


@pytest.mark.skipif(os.name != "posix", reason="process groups (Windows: the SDK's Job Object)")
def test_the_children_a_server_started_end_when_it_closes(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    with McpHost([stdio("g", "--grandchild", str(pid_file))], start_timeout=20) as host:
        assert host.start()["g"].state == "ready"
        grandchild = int(pid_file.read_text())
        assert not gone(grandchild)
    deadline = time.monotonic() + 5
    while not gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(grandchild), "the server's child outlived the host"


@pytest.mark.skipif(os.name != "posix", reason="process groups (Windows: the SDK's Job Object)")
def test_a_child_that_left_the_servers_group_ends_with_it_too(tmp_path: Path) -> None:
    """Before #59 a setsid() grandchild, orphaned (PPID 1), outlived the chat."""
    pid_file = tmp_path / "daemon.pid"
    with McpHost([stdio("d", "--grandchild", str(pid_file), "--setsid")], start_timeout=20) as host:
        assert host.start()["d"].state == "ready"
        daemon = psutil.Process(int(pid_file.read_text()))  # its parent exited before the server listed its tools
        assert daemon.is_running() and os.getsid(daemon.pid) == daemon.pid  # a session, so a group, of its own
        assert daemon.pid not in {p.pid for p in psutil.Process().children(recursive=True)}  # nobody's child here
        assert host.restart("d").state == "ready"  # a restart ends the old tree, the new one starts its own
        assert gone(daemon.pid)
        second = int(pid_file.read_text())
        assert not gone(second)
        host.call("d__crash", {}, timeout=10)  # and a server that ends by itself takes its tree with it
        deadline = time.monotonic() + 10
        while not gone(second) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(second), "a setsid() grandchild outlived its crashed server"


@pytest.mark.skipif(os.name != "posix", reason="process groups (Windows: the SDK's Job Object)")
def test_a_stopped_or_restarted_server_leaves_no_child_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    with McpHost([stdio("g", "--grandchild", str(pid_file))], start_timeout=20) as host:
        host.start()
        first = int(pid_file.read_text())
        assert host.restart("g").state == "ready"
        assert gone(first)
        host.stop("g")
        assert gone(int(pid_file.read_text()))


# --- 6, end to end: the chat goes on ------------------------------------------------------------------------


def test_a_chat_with_a_server_of_hostile_tools_goes_on_with_one_warning(
    demo_cache: Path, tmp_path: Path
) -> None:
    """Before #52 such a tool ended `specquant chat` with exit 2 and a message about the prompt's size."""
    from tests.conftest import run_cli

    config = tmp_path / "mcp.json"
    entry = {"command": sys.executable, "args": [SERVER, "--hostile-tools"]}
    config.write_text(json.dumps({"mcpServers": {"h": entry}}))
    env = {"SPECQUANT_DATA_DIR": str(tmp_path / "data"), "SPECQUANT_CONFIG_DIR": str(tmp_path / "config")}
    out = run_cli("chat", "--mcp", str(config), "--approve", "none", "--json", "--max-tokens", "8", "--temp", "0",
                  "--max-rounds", "1", "--prompt", "Say hello.", env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if "left out" in line]
    assert len(warnings) == 1 and warnings[0].startswith("specquant: warning: MCP server 'h': 4 tools left out: ")
    assert json.loads(out.stdout)["rounds"] == 1
