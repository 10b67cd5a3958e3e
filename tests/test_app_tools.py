"""MCP tools in the window (#43), offscreen, on the demo model and tests/mcp_server.py: a call approved through
the dialog (its call block, its result, the answer after it, the chat going on without tools, and all of it
after reopening), a denial that never reaches the server, "always allow" remembered and revoked in the Tools
panel, Stop during a call that hangs, the panel's Add server (its form and its pasted JSON) / Start / switches /
Remove and its words while empty, the dialog's description, arguments, Esc (which stops the answer) and Enter,
and a history from before the tools column."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QMessageBox

from app.add_server_dialog import AddServerDialog
from app.approval_dialog import ApprovalDialog
from app.chat_controller import Live
from app.guide_viewer import GuideViewer
from app.store import Store
from app.window import MainWindow
from runtime.mcp import ApprovalAnswer, Approvals, CallRequest
from runtime.mcp.approval import DENIED
from runtime.mcp.switches import SWITCHED_OFF
from tests.test_app import ANSWER_MS, open_window

SERVER = str(Path(__file__).with_name("mcp_server.py"))
ASK = "What is 17 plus 25? Use the tool."
TURN_MS = 4 * ANSWER_MS  # a model load, a server's start and two answers on 2 busy cores


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The window's data folder and config folder (mcp.json, approvals, switches): the user's never."""
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("SPECQUANT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPECQUANT_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "config"


def servers(config: Path, **tools: str) -> None:
    """mcp.json with one server per keyword: its name, and the one tool tests/mcp_server.py lists."""
    config.mkdir(exist_ok=True)
    entries = {name: {"command": sys.executable, "args": [SERVER, "--only", tool]} for name, tool in tools.items()}
    (config / "mcp.json").write_text(json.dumps({"mcpServers": entries}))


def window(qtbot, config: Path, **overrides: object) -> MainWindow:
    """A window whose first answer with tools must call one (a hidden setting), greedy, two answers a turn."""
    settings = {"max_tokens": 48, "model_sampling": False, "temperature": 0.0, "tool_first_choice": "required",
                "tool_rounds": 2} | overrides
    w = open_window(config.parent / "data", **settings)
    qtbot.addWidget(w)
    return w


def send(w: MainWindow, text: str) -> None:
    w.input.setPlainText(text)
    w.send()


def question(qtbot, w: MainWindow) -> ApprovalDialog:
    """The approval dialog, once the turn opens it (a turn that ends without asking fails at once)."""
    qtbot.waitUntil(lambda: w.live is None or (w.approval.dialog is not None and w.approval.dialog.isVisible()),
                    timeout=TURN_MS)
    assert w.approval.dialog is not None, "the turn ended without asking"
    return w.approval.dialog


def calls_run(w: MainWindow, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the calls that reach the window's servers from now on (they still run)."""
    host = w.tools.ensure()
    ran: list[str] = []
    real_call = host.call
    monkeypatch.setattr(host, "call", lambda name, *a, **k: ran.append(name) or real_call(name, *a, **k))
    return ran


def server_rows(panel) -> list[tuple[str, str]]:
    """The Tools panel's servers as the user sees them: (name, state)."""
    return [(panel.tree.topLevelItem(i).text(0), panel.tree.topLevelItem(i).text(1))
            for i in range(panel.tree.topLevelItemCount())]


def calls(w: MainWindow, conversation: int) -> list[dict]:
    answer = w.store.messages(conversation)[-1]
    return [c for r in answer.meta.get("tool_turn", []) for c in r["calls"]]


def test_a_call_allowed_once_shows_its_block_and_result_and_the_chat_goes_on(
    qtbot, demo_cache: Path, config: Path
) -> None:
    servers(config, calc="add")
    w = window(qtbot, config)
    assert w.tools.host is None  # nothing starts before a chat with tools answers
    w.tools_panel.chat_tools.setChecked(True)  # a new chat's choice, kept with its first message
    streamed: list[str] = []
    w.chat.chunks_taken.connect(lambda chunks: streamed.extend(c.text for c in chunks))
    with qtbot.waitSignal(w.answer_finished, timeout=TURN_MS) as done:
        send(w, ASK)
        dialog = question(qtbot, w)
        assert (dialog.server_label.text(), dialog.tool_label.text()) == ("calc", "add")
        # What the tool does, in its server's words, and the arguments one a line (#63: raw JSON, no description).
        assert dialog.description_label is not None and dialog.description_label.text() == "Add two integers."
        assert dialog.arguments.toPlainText() == "a: 17\nb: 25" and dialog.arguments.isReadOnly()
        assert "waiting for approval" in w.transcript.toPlainText()
        dialog.allow_once_button.click()
    chat = w.conversation
    assert w.store.tools(chat) and done.args[0]  # the final answer, after the result
    [call] = calls(w, chat)
    assert (call["server"], call["tool"], call["outcome"], call["result"]) == ("calc", "add", "allowed", "42")
    answer = w.store.messages(chat)[-1]
    assert [m.role for m in w.store.messages(chat)] == ["user", "assistant"]  # one turn: one row
    assert "".join(streamed) == answer.meta["tool_turn"][0]["content"] + answer.content  # each word once
    shown = w.transcript.toPlainText()
    # Collapsed, its result at a glance on the call's line (#63: only inside the block).
    assert f"calc › add — allowed — {call['elapsed_s']:.2f} s → 42" in shown and "Result" not in shown
    w.transcript.anchorClicked.emit(QUrl("call:0"))
    assert "Result\n42" in w.transcript.toPlainText() and '"a": 17' in w.transcript.toPlainText()

    # Without tools now: the calls and their result are sent back, as the template shows them; none offered.
    w.tools_panel.chat_tools.setChecked(False)
    lives: list[Live] = []
    w.chat.finished.connect(lambda live, _: lives.append(live))
    with qtbot.waitSignal(w.answer_finished, timeout=ANSWER_MS) as again:
        send(w, "Thanks. And 2 plus 2?")
    request = lives[-1].runner.sent[-1]  # the answer as the engine was asked for it
    assert [m["role"] for m in request.messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert request.messages[1]["tool_calls"][0]["function"]["name"] == "calc__add"
    assert request.messages[2]["content"] == "42" and request.options.tools.choice == "none"
    assert again.args[0]
    w.close()

    reopened = window(qtbot, config)
    reopened.open_conversation(chat)
    assert "calc › add — allowed" in reopened.transcript.toPlainText()
    assert not reopened.tools_panel.chat_tools.isChecked()
    reopened.transcript.toggle_call(call["id"])
    assert "Result\n42" in reopened.transcript.toPlainText()
    reopened.close()


def test_deny_never_reaches_the_server_and_always_is_remembered_then_revoked(
    qtbot, demo_cache: Path, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers(config, calc="add")
    w = window(qtbot, config)
    ran = calls_run(w, monkeypatch)
    w.tools_panel.chat_tools.setChecked(True)
    with qtbot.waitSignal(w.answer_finished, timeout=TURN_MS):
        send(w, ASK)
        question(qtbot, w).deny_button.click()
    [call] = calls(w, w.conversation)
    assert (call["outcome"], call["result"], ran) == ("denied", DENIED, [])
    assert "calc › add — denied" in w.transcript.toPlainText()

    with qtbot.waitSignal(w.answer_finished, timeout=TURN_MS):
        send(w, ASK)
        question(qtbot, w).always_button.click()
    assert ran == ["calc__add"] and calls(w, w.conversation)[0]["result"] == "42"
    assert Approvals().allowed() == {"calc": frozenset({"add"})}
    asked: list[object] = []
    w.chat.approval_needed.connect(asked.append)
    with qtbot.waitSignal(w.answer_finished, timeout=TURN_MS):
        send(w, ASK)
    assert asked == [] and ran == ["calc__add"] * 2  # remembered: it ran without a question

    panel = w.tools_panel
    w.side_tabs.setCurrentWidget(panel)  # shown: it reads mcp.json and the approvals
    assert [panel.approvals.item(i).text() for i in range(panel.approvals.count())] == ["calc › add"]
    panel.approvals.setCurrentRow(0)
    panel.revoke_button.click()
    assert Approvals().allowed() == {} and panel.approvals.count() == 0

    # Asked again now; closing the window with the question open denies, and ends the turn at once.
    send(w, ASK)
    question(qtbot, w)
    chat = w.conversation
    started = time.monotonic()
    w.close()
    assert time.monotonic() - started < 15 and ran == ["calc__add"] * 2
    store = Store(config.parent / "data" / "conversations.sqlite3")
    last = store.messages(chat)[-1]
    assert [c["outcome"] for c in last.meta["tool_turn"][0]["calls"]] == ["denied"]
    assert last.as_chats()[-2] == {"role": "tool", "tool_call_id": last.meta["tool_turn"][0]["calls"][0]["id"],
                                   "name": "calc__add", "content": DENIED}
    store.close()


def test_a_tool_switched_off_in_the_tools_tab_is_neither_offered_nor_run_by_the_window(
    qtbot, demo_cache: Path, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one switch store, honoured by the window's own turns (#48): the only tool of the only server switched
    off in the Tools tab, a chat with tools (whose first answer must call, if anything is offered) answers in
    words: nothing offered, no question, no call record, and the server never ran it."""
    servers(config, calc="add")
    w = window(qtbot, config)
    panel = w.tools_panel
    w.side_tabs.setCurrentWidget(panel)
    panel.tree.setCurrentItem(panel.tree.topLevelItem(0))
    panel.start_button.click()
    qtbot.waitUntil(lambda: panel.tree.topLevelItem(0).childCount() == 1, timeout=ANSWER_MS)
    panel.tree.topLevelItem(0).child(0).setCheckState(0, Qt.CheckState.Unchecked)  # as the user unticks it
    assert not w.tools.switches.is_on("calc", "add")
    ran = calls_run(w, monkeypatch)
    asked: list[object] = []
    w.chat.approval_needed.connect(asked.append)
    lives: list[Live] = []
    w.chat.finished.connect(lambda live, _: lives.append(live))
    w.tools_panel.chat_tools.setChecked(True)
    with qtbot.waitSignal(w.answer_finished, timeout=TURN_MS) as done:
        send(w, ASK)
    assert done.args[0] and w.store.tools(w.conversation)  # a chat with tools, answered in words
    [sent] = lives[-1].runner.sent  # one answer, offered no tool
    assert sent.options.tools is None
    assert asked == [] and ran == [] and calls(w, w.conversation) == []
    assert "calc › add" not in w.transcript.toPlainText()
    w.close()


def test_stop_during_a_call_that_hangs_ends_the_turn_at_once(qtbot, demo_cache: Path, config: Path) -> None:
    servers(config, slow="hang")
    w = window(qtbot, config)
    w.tools_panel.mode_box.setCurrentIndex(w.tools_panel.mode_box.findData("all"))
    w.tools_panel.mode_box.activated.emit(w.tools_panel.mode_box.currentIndex())
    assert w.settings.tool_approval == "all"
    w.tools_panel.chat_tools.setChecked(True)
    send(w, "Wait for me.")
    qtbot.waitUntil(lambda: w.live is not None and any(c["outcome"] == "running" for r in w.live.rounds
                                                         for c in r["calls"]), timeout=TURN_MS)
    started = time.monotonic()
    with qtbot.waitSignal(w.answer_finished, timeout=5000):
        qtbot.mouseClick(w.composer.stop_button, Qt.MouseButton.LeftButton)
    assert time.monotonic() - started < 5
    [call] = calls(w, w.conversation)
    assert call["outcome"] == "stopped" and "slow › hang — stopped" in w.transcript.toPlainText()
    assert w.store.messages(w.conversation)[-1].meta["stop_reason"] == "cancelled"
    started = time.monotonic()
    w.close()
    assert time.monotonic() - started < 15 and not w.runner.alive


def test_the_panel_adds_starts_switches_and_removes_servers(
    qtbot, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers(config, calc="add")
    w = window(qtbot, config)
    panel = w.tools_panel
    w.side_tabs.setCurrentWidget(panel)
    assert server_rows(panel) == [("calc", "stopped")] and panel.problems.isHidden()

    # A bad snippet: one line, nothing written.
    before = (config / "mcp.json").read_text()
    dialog = AddServerDialog(panel)
    dialog.pasting.setChecked(True)  # the advanced way
    dialog.text.setPlainText('{"echo": {"command": "python", "url": "http://x"}}')
    dialog.add_button.click()
    assert "both" in dialog.error.text() and "\n" not in dialog.error.text()
    dialog.text.setPlainText("{not json")
    dialog.add_button.click()
    assert "not valid JSON" in dialog.error.text() and (config / "mcp.json").read_text() == before
    # A good one, through the panel's button, with a secret that is never shown.
    good = json.dumps({"command": sys.executable, "args": [SERVER, "--only", "echo"], "env": {"TOKEN": "s3cret"}})

    def paste(self: AddServerDialog) -> int:  # the modal dialog, as the user fills it in
        self.pasting.setChecked(True)
        self.name.setText("echo")
        self.text.setPlainText(good)
        self.add_button.click()
        return self.result()

    monkeypatch.setattr(AddServerDialog, "exec", paste)
    panel.add_button.click()
    assert [name for name, _ in server_rows(panel)] == ["calc", "echo"] and panel.status.text() == "Added echo."
    assert json.loads((config / "mcp.json").read_text())["mcpServers"]["echo"]["env"] == {"TOKEN": "s3cret"}
    assert "s3cret" not in panel.tree.topLevelItem(1).toolTip(0)

    # Start lists the tools; a tool switched off is not offered.
    panel.tree.setCurrentItem(panel.tree.topLevelItem(0))
    panel.start_button.click()
    qtbot.waitUntil(lambda: panel.tree.topLevelItem(0).text(1) == "ready"
                    and panel.tree.topLevelItem(0).childCount() == 1, timeout=ANSWER_MS)
    assert panel.status.text() == "calc: ready"
    tool = panel.tree.topLevelItem(0).child(0)
    assert tool.text(0) == "add" and tool.checkState(0) == Qt.CheckState.Checked
    tool.setCheckState(0, Qt.CheckState.Unchecked)
    assert not w.tools.switches.is_on("calc", "add")
    from runtime.chat.toolbox import McpToolbox
    from runtime.mcp import ApprovalPolicy

    offered = McpToolbox(w.tools.host, ApprovalPolicy("all"), switches=w.tools.switches, owns_host=False)
    assert [t.name for t in offered.tools()] == ["echo__echo"]  # calc__add is off
    refused = offered.call("calc__add", {"a": 1, "b": 2}, threading.Event())  # and a call to it does not run
    assert refused.is_error and refused.text == SWITCHED_OFF

    # Remove: gone from the file and the panel, its approvals and switches with it.
    Approvals().allow("calc", "add")
    panel.tree.setCurrentItem(panel.tree.topLevelItem(0))
    monkeypatch.setattr("app.tools_panel.QMessageBox.question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    panel.remove_button.click()
    assert list(json.loads((config / "mcp.json").read_text())["mcpServers"]) == ["echo"]
    assert Approvals().allowed() == {} and w.tools.switches.off() == {} and w.tools.host is None
    assert [name for name, _ in server_rows(panel)] == ["echo"]

    # A bad entry written by hand: one line under the list, the other servers listed.
    data = json.loads((config / "mcp.json").read_text())
    data["mcpServers"]["bad"] = {"command": "x", "url": "http://example.com/mcp"}
    (config / "mcp.json").write_text(json.dumps(data))
    panel.refresh()
    assert panel.problems.text().startswith("mcp.json: server 'bad': give either a command")
    assert "\n" not in panel.problems.text() and [name for name, _ in server_rows(panel)] == ["echo"]
    w.close()


def test_the_approval_dialog_shows_plain_text_the_description_and_esc_stops(qtbot) -> None:
    arguments = {"path": "/tmp/<i>x</i>", "lines": [1, 2], "note": "two\nlines\u202e"}
    request = CallRequest("<b>srv</b>", "read", json.dumps(arguments), description="Reads <b>a</b>\n file.")
    dialog = ApprovalDialog(request)
    qtbot.addWidget(dialog)
    decided: list[ApprovalAnswer] = []
    dialog.decided.connect(decided.append)
    dialog.open()
    assert dialog.server_label.text() == "<b>srv</b>" and dialog.server_label.textFormat() == Qt.TextFormat.PlainText
    assert dialog.description_label.text() == "Reads <b>a</b> file."
    assert dialog.description_label.textFormat() == Qt.TextFormat.PlainText
    # One argument a line, a text without quotes, a list as JSON under its name; a bidi override shown as such.
    assert dialog.arguments.toPlainText() == (
        "path: /tmp/<i>x</i>\nlines: [\n      1,\n      2\n    ]\nnote: two\n    lines\\u202e")
    assert "Esc" in dialog.stop_button.toolTip()
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)
    assert decided == [ApprovalAnswer.DENY] and dialog.stopped  # Esc denies and stops the answer (#63)
    dialog.close_denied()  # a late Stop answers nothing more
    assert decided == [ApprovalAnswer.DENY]

    unread = ApprovalDialog(CallRequest("srv", "read", {}))  # Enter on a dialog nobody read denies, and only that
    qtbot.addWidget(unread)
    unread.decided.connect(decided.append)
    unread.open()
    assert unread.description_label is None and unread.arguments.toPlainText() == "(none)"
    qtbot.keyClick(unread.focusWidget() or unread, Qt.Key.Key_Return)
    assert decided == [ApprovalAnswer.DENY, ApprovalAnswer.DENY] and not unread.stopped
    closed = ApprovalDialog(request)  # the window ends the question (Stop, closing): a denial, nothing more
    qtbot.addWidget(closed)
    closed.decided.connect(decided.append)
    closed.open()
    closed.close_denied()
    assert decided[-1] == ApprovalAnswer.DENY and not closed.stopped
    stopped = ApprovalDialog(request)
    qtbot.addWidget(stopped)
    stopped.open()
    stopped.stop_button.click()
    assert stopped.stopped and stopped.result() == ApprovalDialog.DialogCode.Rejected


def test_esc_in_the_question_denies_the_call_and_stops_the_answer_saying_so(
    qtbot, demo_cache: Path, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#63: Esc denied one call while the turn went on (the model answered on, or asked again). Esc stops the
    answer, as it does in the window: the call never runs, the answer ends as stopped, and one line says so."""
    servers(config, calc="add")
    w = window(qtbot, config)
    ran = calls_run(w, monkeypatch)
    asked: list[object] = []
    w.chat.approval_needed.connect(asked.append)
    w.tools_panel.chat_tools.setChecked(True)
    with qtbot.waitSignal(w.answer_finished, timeout=TURN_MS):
        send(w, ASK)
        qtbot.keyClick(question(qtbot, w), Qt.Key.Key_Escape)
    [call] = calls(w, w.conversation)
    assert (call["outcome"], ran, len(asked)) == ("denied", [], 1)
    answer = w.store.messages(w.conversation)[-1]
    assert answer.meta["stop_reason"] == "cancelled"  # the answer ended as stopped, not answered on
    assert w.notes.texts[-1].startswith("Stopped: calc › add did not run, and the answer ended there.")
    assert "calc › add — denied" in w.transcript.toPlainText() and w.live is None
    w.close()


def test_the_empty_tools_tab_says_what_tools_are_and_opens_the_guide(qtbot, config: Path) -> None:
    """#63: an empty Tools tab with no explanation."""
    w = window(qtbot, config)
    panel = w.tools_panel
    w.side_tabs.setCurrentWidget(panel)
    assert not panel.intro.isHidden() and panel.tree.isHidden()
    words = panel.intro.text()
    assert "tool server" in words and "Add server…" in words and "Tools in this chat" in words
    panel.intro.linkActivated.emit("guide:tools.md")  # "Read the Tools guide"
    viewer = w.findChild(GuideViewer)
    assert viewer is not None and viewer.shown() == "tools.md" and "Add server" in viewer.page.toPlainText()
    servers(config, calc="add")
    panel.refresh()
    assert panel.intro.isHidden() and not panel.tree.isHidden() and server_rows(panel) == [("calc", "stopped")]
    w.close()


def test_a_server_is_added_through_the_form_each_fault_named_by_its_field(
    qtbot, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#63: Add server asked for pasted JSON. The form's faults are one line that starts with the field's name,
    and nothing is written; pasting stays as the advanced way (test_the_panel_adds_starts_switches_and_removes)."""
    servers(config, calc="add")
    before = (config / "mcp.json").read_text()
    w = window(qtbot, config)
    panel = w.tools_panel
    w.side_tabs.setCurrentWidget(panel)
    dialog = AddServerDialog(panel)
    qtbot.addWidget(dialog)
    assert not dialog.command.isHidden() and dialog.text.isHidden()  # the form first, JSON only when asked for
    dialog.pasting.setChecked(True)
    assert dialog.command.isHidden() and dialog.environment.isHidden() and not dialog.text.isHidden()
    dialog.pasting.setChecked(False)
    faults = (
        (("", "npx", "", ""), "Name: "),
        (("files", "", "", ""), "Command: "),
        (("files", "bin/server", "", ""), "Command: command 'bin/server' is a relative path"),
        (("files", "npx", '-y "unclosed', ""), "Arguments: a quotation mark is not closed"),
        (("files", "npx", "", "API_KEY=1\nTOKEN"), "Environment, line 2: "),
        (("built-in", "npx", "", ""), "Name: the name 'built-in'"),
        (("calc", "npx", "", ""), "Name: there is already a server named 'calc'"),
    )
    for (name, command, arguments, environment), start in faults:
        dialog.name.setText(name)
        dialog.command.setText(command)
        dialog.arguments.setText(arguments)
        dialog.environment.setPlainText(environment)
        dialog.add_button.click()
        assert dialog.error.text().startswith(start), (start, dialog.error.text())
        assert "\n" not in dialog.error.text() and dialog.result() == 0
    assert (config / "mcp.json").read_text() == before

    def fill(self: AddServerDialog) -> int:  # the modal dialog, as the user fills it in
        self.name.setText("echo")
        self.command.setText(sys.executable)
        self.arguments.setText(f'"{SERVER}" --only echo')
        self.environment.setPlainText("TOKEN=s3cret\n\nMODE = fast")
        self.add_button.click()
        return self.result()

    monkeypatch.setattr(AddServerDialog, "exec", fill)
    panel.add_button.click()
    assert panel.status.text() == "Added echo." and [n for n, _ in server_rows(panel)] == ["calc", "echo"]
    assert json.loads((config / "mcp.json").read_text())["mcpServers"]["echo"] == {
        "command": sys.executable, "args": [SERVER, "--only", "echo"], "env": {"TOKEN": "s3cret", "MODE": "fast"}}
    panel.tree.setCurrentItem(panel.tree.topLevelItem(1))
    panel.start_button.click()  # the entry the form wrote starts and lists its tool
    qtbot.waitUntil(lambda: panel.tree.topLevelItem(1).childCount() == 1, timeout=ANSWER_MS)
    assert panel.tree.topLevelItem(1).child(0).text(0) == "echo"
    w.close()


def test_a_history_without_the_tools_column_gains_it_and_stays_schema_3(tmp_path: Path) -> None:
    store = Store(tmp_path / "conversations.sqlite3")
    chat = store.create("Before tools")
    store.add_message(chat, "assistant", "plain", {"tool_turn": [{"content": "", "calls": [{"id": "c1"}]}]})
    store.db.execute("ALTER TABLE conversations DROP COLUMN tools")  # as the schema-3 file of an older SpecQuant
    store.close()
    store = Store(tmp_path / "conversations.sqlite3")
    assert store.tools(chat) is False and store.db.execute("PRAGMA user_version").fetchone()[0] == 3
    store.set_tools(chat, True)
    assert store.tools(chat)
    # A malformed call (an edited or imported file) is left out of what is replayed to the engine.
    assert store.messages(chat)[-1].as_chats() == [{"role": "assistant", "content": "plain"}]
    store.close()
