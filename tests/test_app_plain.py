"""The window in plain words (#51): the status line says what a person cares about and the technical facts
wait behind Details; a slowdown names its cause; every wait says what it waits for, in the status line and
where the answer will appear; a new chat clears the previous chat's figures; messages stay until closed;
a source no application opens is shown in the window; the Tools tab shows a tool not offered with its
reason; a turn offered tools that called none says so. Offscreen, on the demo model and tests/mcp_server.py."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics

from app.chat_controller import Live
from app.plain_words import (
    BUSY,
    TOOLS_UNUSED_NOTE,
    details_line,
    gain_text,
    meta_line,
    plain_line,
    words_per_s,
    words_text,
)
from app.source_viewer import SourceViewer, passages_of
from app.store import Store
from app.stored_messages import TOOLS_UNUSED
from runtime.engine.answer import Chunk
from runtime.engine.plain_estimate import LOAD_BAND
from runtime.engine.summary import answer_facts
from runtime.engine.thread import MEASURING
from runtime.models.cache import DEMO_NAME
from tests.test_app import ANSWER_MS, ask, open_window
from tests.test_app_tools import ASK, SERVER, TURN_MS, question, send, servers
from tests.test_app_tools import window as tools_window

JARGON = ("F16", "Q4_K_M", "Q8_0", "acceptance", "tok/s", "cap", "grade", "draft", "←")


def fits(label) -> bool:
    """The label's text is drawn whole: its width in the label's font is within the label's width."""
    return QFontMetrics(label.font()).horizontalAdvance(label.text()) <= label.width()


def test_the_status_line_is_plain_the_details_wait_behind_a_toggle_and_a_new_chat_clears_them(
    qtbot, demo_cache: Path, tmp_path: Path
) -> None:
    w = open_window(tmp_path, max_tokens=24)
    qtbot.addWidget(w)
    seen: list[tuple[str, str, str]] = []  # each wait: its words, the status line, where the answer will be
    w.chat.status.connect(lambda text: seen.append((text, w.stats.plain.text(), w.transcript.toPlainText())))
    chunks: list[Chunk] = []
    w.chat.chunks_taken.connect(chunks.extend)
    answer = ask(qtbot, w, "Name three primary colors.")
    assert answer

    # The first answer loads the model, and says so in the status line and where the answer appears.
    waits = [s for s in seen if s[0]]
    read = chunks[-1].stats.prompt_tokens - chunks[-1].stats.reused_tokens
    assert waits and waits[0][0].startswith("Loading") and "Reading the conversation…" in [w[0] for w in waits], seen
    # The draft costs' probe, when it runs first for this model, says so between the two (#63).
    assert waits[-2][0] in ("Reading the conversation…", MEASURING), seen
    assert waits[-1][0] == f"Reading {read} tokens of the conversation…", seen  # the prompt built: how much
    assert all(line == text and text in shown for text, line, shown in waits)
    assert seen[-1][0] == "" and w.stats.plain.text() != waits[-1][0]  # the wait ended with the first words

    facts = answer_facts(chunks[-1])
    line = w.stats.plain.text()
    # The default before this machine is measured: fast (#61), said without tier names.
    assert line == plain_line(facts, answer) and line.startswith("Fast: the 4-bit copy's words")
    assert "words/s" in line and not any(word in line for word in JARGON), line
    assert words_text(words_per_s(facts, answer)) in line
    assert w.statusBar().currentMessage() == "" and w.stats.plain.isVisible() and fits(w.stats.plain)
    # The technical facts: in the tooltip, and beside the line only once Details is on.
    assert details_line(facts) in w.stats.plain.toolTip() and "Q4_K_M ←" in w.stats.plain.toolTip()
    assert not w.precision.isVisible() and not w.acceptance.isVisible() and not w.badge.isVisible()
    w.stats.details_button.click()
    assert w.precision.isVisible() and w.precision.text().startswith("Q4_K_M") and w.acceptance.isVisible()
    w.stats.details_button.click()
    assert not w.precision.isVisible()

    # Another chat: the previous chat's figures go; opening the answered chat again shows none either.
    chat = w.conversation
    w.new_conversation()
    assert w.stats.plain.text() == "" and w.precision.text() == "" and w.speed.text() == ""
    assert w.badge.level == "" and w.speed_chart.points == []
    w.open_conversation(chat)
    assert w.stats.plain.text() == ""
    # An answer streaming in one chat shows nothing in another: not its waits, not its figures.
    w.input.setPlainText("Now name three animals.")
    with qtbot.waitSignal(w.answer_finished, timeout=ANSWER_MS):
        w.send()
        w.new_conversation()
    assert w.stats.plain.text() == "" and w.precision.text() == "" and w.speed_chart.points == []

    # A slowdown names its cause: the answer's record says the machine ran far slower than measured.
    slow = chunks[-1].stats
    note = "this machine ran 86.5× as slowly as measured (another program?): no fair comparison"
    # (an answer that drafted: whether this one did depends on what pays on this machine at this moment)
    drafted = replace(slow, load=86.5, speedup_note=note, drafted=max(slow.drafted, 1), spec_off=None)
    busy = replace(chunks[-1], stats=drafted)
    w.stats.show_answer(busy, w.model, answer)
    assert BUSY in w.stats.plain.text() and "faster" not in w.stats.plain.text()
    assert note in w.stats.plain.toolTip()
    w.stats.show_details(True)
    assert w.stats.speedup.text() == BUSY and w.stats.speedup.width() > 0 and note in w.stats.speedup.toolTip()
    w.close()


def test_plain_words_from_an_answers_facts() -> None:
    facts = {"parent": "f16", "pair": "F16 ← Q4_K_M", "tokens": 20, "tok_per_s": 10.0, "drafted": 8,
             "acceptance": 0.5, "speedup": 2.13, "saved_s": 3.0, "placement": "CPU · 2 threads"}
    assert gain_text(facts) == "2.1× faster than without speculation"
    assert plain_line(facts, "one two three four five six seven eight nine ten") == (
        "Exact answer · 2.1× faster than without speculation · 5.0 words/s"  # 10 tok/s × 10 words / 20 tokens
    )
    # #63: never "1 words/s" nor "0 words/s": a slow answer keeps its decimal, a fast one needs none.
    assert (words_text(0.04), words_text(1.0), words_text(9.96), words_text(12.4)) == (
        "0.0 words/s", "1.0 words/s", "10 words/s", "12 words/s")
    slower = "0.90× the speed without speculation (slower this time)"
    assert gain_text(facts | {"speedup": 0.9, "saved_s": -0.5}) == slower
    assert gain_text(facts | {"speedup": 1.01, "saved_s": 0.01}) == "about as fast as without speculation"
    assert gain_text(facts | {"drafted": 0}) == ""  # nothing drafted: nothing claimed
    busy = facts | {"speedup": None, "saved_s": None, "load": LOAD_BAND[1] * 2, "speedup_note": "ran slowly"}
    assert plain_line(busy, "") == f"Exact answer · {BUSY}"
    fast = busy | {"load": LOAD_BAND[0] / 2}  # faster than measured: no slowdown to name
    assert plain_line(fast, "") == "Exact answer"
    assert plain_line(facts | {"parent": "q4_k_m"}, "").startswith("Quick answer")
    assert plain_line({}, "text") == ""  # before any answer
    assert details_line(busy) == "F16 ← Q4_K_M · 10.0 tok/s · acceptance 50% · no speed-up claimed: ran slowly · " \
        "CPU · 2 threads"


def test_messages_stay_until_closed(qtbot, tmp_path: Path, isolated_cache: Path) -> None:
    w = open_window(tmp_path)
    qtbot.addWidget(w)
    assert w.notes.isHidden() and w.notes.texts == []
    w.menus.export_action.trigger()  # no chat open
    assert w.notes.texts == ["Open a chat to export it."] and w.notes.isVisible()
    qtbot.wait(50)
    w.menus.export_action.trigger()  # the same message again: shown once
    assert w.notes.texts == ["Open a chat to export it."]
    w.notes.show_note("A second message, long enough to wrap " * 8)
    assert len(w.notes.texts) == 2 and w.statusBar().currentMessage() == ""
    note = w.notes.notes[0]
    assert note.label.wordWrap() and note.close_button.isVisible()
    note.close_button.click()
    assert w.notes.texts == ["A second message, long enough to wrap " * 8]
    w.notes.notes[0].close_button.click()
    assert w.notes.texts == [] and w.notes.isHidden()
    # #63: four messages piled up and shrank the transcript at 1024×640: two at most, the newest.
    for i in range(4):
        w.notes.show_note(f"Message {i}")
    assert w.notes.texts == ["Message 2", "Message 3"]
    w.close()


def test_a_source_no_application_opens_is_shown_at_its_passage(qtbot, tmp_path: Path, isolated_cache: Path) -> None:
    store = Store(tmp_path / "conversations.sqlite3")
    chat = store.create("Frobnicator", None)
    store.add_message(chat, "user", "How do I install Frobnicator?")
    cited = [{"n": 1, "path": "/docs/install.md", "lines": [1, 4], "heading": "Install",
              "text": "Run pip install frobnicator.\nThen restart."},
             {"n": 2, "path": "/docs/other.md", "text": "Unrelated."}]
    store.add_message(chat, "assistant", "Run `pip install frobnicator` [1].", {"citations": cited})
    store.close()
    w = open_window(tmp_path)
    qtbot.addWidget(w)
    w.open_conversation(chat)
    assert passages_of(w.store.messages(chat), "/docs/install.md") == cited[:1]
    w.transcript.open_failed.emit("/docs/install.md")  # what the transcript says when nothing opened it
    viewer = w.pane.source_viewer
    assert isinstance(viewer, SourceViewer) and viewer.isVisible()
    assert "/docs/install.md" in viewer.path_label.text() and "install.md" in viewer.windowTitle()
    text = viewer.text.toPlainText()
    assert '[1] install.md — lines 1-4, "Install"' in text and "Run pip install frobnicator.\nThen restart." in text
    assert "Unrelated" not in text
    viewer.close()
    w.close()


def test_the_tools_tab_shows_a_tool_not_offered_with_its_reason_and_names_whole(
    qtbot, tmp_path: Path, monkeypatch
) -> None:
    config = tmp_path / "config"
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("SPECQUANT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPECQUANT_CONFIG_DIR", str(config))
    name = "a-server-whose-name-is-longer-than-the-panel-is-wide"
    config.mkdir()  # every tool of tests/mcp_server.py, bad_schema among them
    (config / "mcp.json").write_text(json.dumps({"mcpServers": {name: {"command": sys.executable, "args": [SERVER]}}}))
    w = open_window(tmp_path / "data")
    qtbot.addWidget(w)
    panel = w.tools_panel
    w.side_tabs.setCurrentWidget(panel)
    panel.tree.setCurrentItem(panel.tree.topLevelItem(0))
    panel.start_button.click()
    qtbot.waitUntil(lambda: panel.tree.topLevelItem(0).text(1) == "ready", timeout=30_000)
    top = panel.tree.topLevelItem(0)
    rows = {top.child(i).text(0): top.child(i) for i in range(top.childCount())}
    [skipped] = w.tools.host.skipped()
    bad = rows[skipped.tool]
    assert skipped.tool == "bad_schema" and bad.text(1) == "not offered" and not bad.flags() & Qt.ItemFlag.ItemIsEnabled
    assert bad.toolTip(0) == f"Not offered to the model: {skipped.reason}"
    assert f"{name}: the tool bad_schema is not offered to the model: {skipped.reason}" in panel.problems.text()
    assert panel.problems.isVisible() and panel.problems.wordWrap()
    assert rows["add"].text(1) == "" and rows["add"].checkState(0) == Qt.CheckState.Checked  # the others stay
    # No name is cut: the name column is as wide as its longest name (the tree scrolls sideways).
    metrics = QFontMetrics(panel.tree.font())
    assert metrics.horizontalAdvance(name) <= panel.tree.columnWidth(0)
    assert all(metrics.horizontalAdvance(t) + panel.tree.indentation() <= panel.tree.columnWidth(0) for t in rows)
    states = [top.text(1), *(item.text(1) for item in rows.values())]
    assert all(metrics.horizontalAdvance(t) <= panel.tree.columnWidth(1) for t in states)
    w.close()


def test_waiting_for_approval_is_said_and_an_unused_offer_is_recorded(
    qtbot, demo_cache: Path, tmp_path: Path, monkeypatch
) -> None:
    config = tmp_path / "config"
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("SPECQUANT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPECQUANT_CONFIG_DIR", str(config))
    servers(config, calc="add")
    w = tools_window(qtbot, config)
    w.tools_panel.chat_tools.setChecked(True)
    with qtbot.waitSignal(w.answer_finished, timeout=TURN_MS):
        send(w, ASK)
        dialog = question(qtbot, w)
        wait = "Waiting for your approval to run add…"
        assert w.stats.plain.text() == wait and wait in w.transcript.toPlainText()
        shown: list[str] = []  # the status line at each of the next round's words (#63: "Reading…" stood)
        w.chunk_shown.connect(lambda _: shown.append(w.stats.plain.text()))
        dialog.deny_button.click()
    assert shown and not any(t.startswith(("Reading", "Loading", "Searching")) for t in shown), shown
    answer = w.store.messages(w.conversation)[-1]
    assert answer.meta.get("tool_turn") and TOOLS_UNUSED not in answer.meta  # it called: nothing to say
    assert TOOLS_UNUSED_NOTE not in w.transcript.toPlainText()

    # Offered, and the model may answer without them: when it does, the record and the transcript say so.
    w.apply_settings(replace(w.settings, tool_first_choice="auto", max_tokens=12))
    lives: list[Live] = []
    w.chat.finished.connect(lambda live, _: lives.append(live))
    early: list[str] = []  # #63: the note stood while the model was still loading, before any call could come
    w.chat.status.connect(lambda _: early.append(w.transcript.toPlainText()))
    w.chunk_shown.connect(lambda _: early.append(w.transcript.toPlainText()))
    with qtbot.waitSignal(w.answer_finished, timeout=TURN_MS):
        send(w, "Just say hello, do not use any tool.")
    assert early and not any(TOOLS_UNUSED_NOTE in t for t in early)
    assert lives[-1].tools_offered  # the engine was asked with the tool offered
    answer = w.store.messages(w.conversation)[-1]
    if not answer.meta.get("tool_turn"):
        assert answer.meta[TOOLS_UNUSED] is True and TOOLS_UNUSED_NOTE in w.transcript.toPlainText()
    assert meta_line({TOOLS_UNUSED: True}) == TOOLS_UNUSED_NOTE
    w.close()


def test_the_machine_probe_is_said_whatever_the_preset(qtbot, demo_cache: Path, tmp_path: Path) -> None:
    """#63: "Reading the conversation…" stood while the machine-cost probe ran (only "auto" said it measured)."""
    (demo_cache / DEMO_NAME / "costs.json").unlink(missing_ok=True)  # this machine not measured yet
    w = open_window(tmp_path, max_tokens=8, preset="exact")  # not "auto": its own calibration says so already
    qtbot.addWidget(w)
    said: list[str] = []
    w.chat.status.connect(said.append)
    ask(qtbot, w, "Say hi.")
    assert MEASURING in said and (demo_cache / DEMO_NAME / "costs.json").is_file(), said
    assert said.index(MEASURING) < len(said) - 1 and said[-1] == ""  # the words ended the wait
    said.clear()
    ask(qtbot, w, "Say hi again.")
    assert MEASURING not in said, said  # measured once
    w.close()


def visible_words(widget) -> list[str]:
    """Every label, button, tab, box item and menu entry text a person reads in `widget`."""
    from PySide6.QtWidgets import QAbstractButton, QComboBox, QLabel, QMenu, QTabWidget

    words = [w.text() for kind in (QLabel, QAbstractButton) for w in widget.findChildren(kind)]
    words += [a.text() for m in widget.findChildren(QMenu) for a in m.actions()]
    words += [t.tabText(i) for t in widget.findChildren(QTabWidget) for i in range(t.count())]
    words += [b.itemText(i) for b in widget.findChildren(QComboBox) for i in range(b.count())]
    return words


def test_one_word_for_each_thing_and_settings_in_basic_and_advanced(qtbot, tmp_path: Path, isolated_cache) -> None:
    from app.personas_dialog import PersonasDialog
    from app.settings_dialog import SettingsDialog

    w = open_window(tmp_path)
    qtbot.addWidget(w)
    # A chat's system prompt and sampling are its "Persona" everywhere in the window, as in the CLI (--persona);
    # "preset" is nowhere a person reads (Settings' "Speed mode" is the speed preset).
    dialog, personas = SettingsDialog(w.settings, w), PersonasDialog(w)
    for widget in (w, dialog, personas):
        assert not [t for t in visible_words(widget) if "preset" in t.lower()], widget
    assert personas.windowTitle() == "Personas" and {"Manage personas…", "&Persona:"} <= set(visible_words(w))
    # The settings: Basic first, with the speed mode; the technical ones under Advanced.
    assert [dialog.tabs.tabText(i) for i in range(dialog.tabs.count())] == ["&Basic", "&Advanced"]
    basic, advanced = dialog.tabs.widget(0), dialog.tabs.widget(1)
    assert dialog.preset.parent() is basic and "&Speed mode:" in visible_words(basic)
    assert dialog.temperature.parent() is advanced and dialog.draft_length.parent() is advanced
    assert dialog.value() == w.settings  # nothing lost in the move
    assert not any(word in dialog.preset.currentText() for word in ("F16", "Q8_0", "Q4_K_M"))
    w.close()


def test_models_in_plain_words_with_sizes_whole(qtbot, demo_cache: Path, tmp_path: Path) -> None:
    from app.models_dialog import TIER_WORDS

    w = open_window(tmp_path)
    qtbot.addWidget(w)
    w.show_models()
    tree = w.models.tree
    model = tree.topLevelItem(0)
    tiers = [model.child(i) for i in range(model.childCount())]
    assert [t.text(0) for t in tiers] == list(TIER_WORDS.values())
    manifest = json.loads((demo_cache / model.text(0) / "manifest.json").read_text())
    for item, rec in zip(tiers, (manifest["tiers"][t] for t in TIER_WORDS), strict=True):  # most precise first
        fallbacks = rec.get("fallbacks") or 0
        assert "tensors" not in item.text(2) and (f"{fallbacks} tensors on fallback types" in item.toolTip(2)) == (
            fallbacks > 0)
    metrics = QFontMetrics(tree.font())
    for item in (model, *tiers):
        depth = tree.indentation() * (2 if item is not model else 1)
        assert metrics.horizontalAdvance(item.text(0)) + depth <= tree.columnWidth(0), item.text(0)
        for column in (1, 2):
            assert metrics.horizontalAdvance(item.text(column)) <= tree.columnWidth(column), item.text(column)
    w.close()


def test_the_collection_dialog_shows_its_whole_title(qtbot) -> None:
    from app.documents_panel import CollectionDialog

    dialog = CollectionDialog(None, ["frob-docs", "notes"], 0)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.textValue() == "frob-docs" and dialog.comboBoxItems() == ["frob-docs", "notes"]
    assert QFontMetrics(dialog.font()).horizontalAdvance(dialog.windowTitle()) < dialog.width()
    assert dialog.width() >= dialog.title_width()
    dialog.reject()


def test_every_dialog_is_widened_to_its_whole_title(qtbot, tmp_path: Path) -> None:
    """#63: a dialog's title was cut under a simple window manager. Qt's own message boxes, which size
    themselves to their text, and the window's dialogs are as wide as their title and the title bar's buttons."""
    from PySide6.QtWidgets import QMessageBox

    from app.add_server_dialog import AddServerDialog
    from app.approval_dialog import ApprovalDialog
    from app.widgets import title_width
    from runtime.mcp import CallRequest

    w = open_window(tmp_path)
    qtbot.addWidget(w)
    box = QMessageBox(QMessageBox.Icon.Question, "Remove this server and the calls it may always make?", "Sure?",
                      parent=w)
    source = SourceViewer("/docs/" + "a-very-long-report-name-" * 5 + "2024.pdf", [], w)
    assert len(source.windowTitle()) <= len("Source: ") + 40 and source.windowTitle().endswith("…rt-name-2024.pdf")
    dialogs = (box, AddServerDialog(w), ApprovalDialog(CallRequest("s", "t", {}), w), source)
    assert box.sizeHint().width() < title_width(box)  # as Qt sizes it, the title would be cut
    for dialog in dialogs:
        dialog.show()
        qtbot.waitUntil(lambda d=dialog: d.width() >= title_width(d), timeout=2000)
        dialog.close()
    w.close()


def test_the_documents_panel_says_when_it_sets_up_the_embedding_model(qtbot, tmp_path: Path, monkeypatch) -> None:
    from app.documents_worker import SETTING_UP

    (tmp_path / "data").mkdir()
    monkeypatch.setenv("SPECQUANT_DATA_DIR", str(tmp_path / "data"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "install.md").write_text("# Installing\n\nRun `pip install frobnicator`.\n")
    w = open_window(tmp_path / "data")
    qtbot.addWidget(w)
    panel = w.documents
    said: list[str] = []
    panel.worker.setting_up.connect(said.append, Qt.ConnectionType.DirectConnection)  # as the worker says it
    shown: list[str] = []
    set_text = panel.status.setText
    monkeypatch.setattr(panel.status, "setText", lambda text: (shown.append(text), set_text(text)))  # every line
    panel.add([str(docs)], "frob")
    qtbot.waitUntil(lambda: panel.jobs == 0, timeout=60_000)
    assert said == [SETTING_UP] and SETTING_UP in shown  # once, at the first embedding, in the panel's line
    assert shown[-1].startswith("Added to frob: 1 file indexed") and shown.index(SETTING_UP) < len(shown) - 1
    w.close()
