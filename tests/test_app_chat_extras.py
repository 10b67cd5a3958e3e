"""Everyday features in the window (#43), offscreen: a persona per chat (applied to the request,
never stored in the chat), the personas manager, a model per chat, and export and import of a chat."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from app.chat_controller import Live
from app.conversation_io import ExportedMessage
from app.settings import AppSettings
from app.store import Store
from app.window import MainWindow
from runtime.chat.conversation import Conversation
from runtime.engine.personas import find_persona
from runtime.errors import UserError
from runtime.models.cache import DEMO_NAME
from tests.test_app import ask, open_window

QUESTION = "What is AI?"
CITED = {
    "level": "low",
    "pair": "Q8_0 + Q4_K_M",
    "tok_per_s": 41.5,
    "draft_mask": [[0, 3]],
    "citations": [{"n": 1, "path": "/docs/install.md", "lines": [1, 4], "text": "Run pip install frobnicator."}],
}


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The window's data folder (history, settings) and config folder (presets.json): the user's never."""
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("SPECQUANT_DATA_DIR", str(folder))
    monkeypatch.setenv("SPECQUANT_CONFIG_DIR", str(tmp_path / "config"))
    return folder


def last_note(w) -> str:
    """The newest message in the window's message area (they stay until closed)."""
    return w.notes.texts[-1] if w.notes.texts else ""


def window(qtbot, folder: Path, **overrides: object) -> MainWindow:
    w = open_window(folder, **overrides)
    qtbot.addWidget(w)
    return w


def answered(qtbot, w: MainWindow, text: str) -> Live:
    """Ask `text` in the open chat; the answer's Live, with what its runner sent the engine thread."""
    lives: list[Live] = []
    w.chat.finished.connect(lambda live, _: lives.append(live))
    assert ask(qtbot, w, text)
    return lives[-1]


def pick(box, text: str) -> None:
    """Choose `text` in a combo box as a user does (its `activated` signal)."""
    index = box.findText(text)
    assert index >= 0, f"{text!r} not offered"
    box.setCurrentIndex(index)
    box.activated.emit(index)


def save_dialog(monkeypatch: pytest.MonkeyPatch, path: Path, chosen: str) -> None:
    monkeypatch.setattr("app.chat_files.QFileDialog.getSaveFileName", lambda *a, **k: (str(path), chosen))


def open_dialog(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    monkeypatch.setattr("app.chat_files.QFileDialog.getOpenFileName", lambda *a, **k: (str(path), ""))


def test_a_chats_persona_reaches_the_engine_not_the_history_and_survives_reopening(
    qtbot, demo_cache: Path, data: Path
) -> None:
    w = window(qtbot, data, max_tokens=8)
    plain = answered(qtbot, w, QUESTION)  # a chat without persona, to compare with
    plain_chat = w.conversation
    assert w.composer.persona_box.currentData() is None

    w.new_conversation()
    pick(w.composer.persona_box, "Concise")  # before the first message: kept with it
    concise = find_persona("Concise")
    live = answered(qtbot, w, QUESTION)
    chat = w.conversation
    # The request carried the persona's system prompt and its temperature, under the window's own seed …
    assert live.runner.sent[0].messages[0] == {"role": "system", "content": concise.system}
    assert dict(live.runner.sent[0].options.sampling_overrides) == {"temperature": 0.3, "seed": 0}
    assert plain.runner.sent[0].messages[0]["role"] == "user"
    # … the engine rendered a different prompt from the same question's without it …
    assert live.last is not None and plain.last is not None
    assert live.last.stats.prompt_tokens != plain.last.stats.prompt_tokens
    # … and the history holds only what was said.
    assert [m.role for m in w.store.messages(chat)] == ["user", "assistant"]
    assert w.store.persona(chat) == "Concise" and w.store.persona(plain_chat) is None
    assert w.store.model(chat) == DEMO_NAME  # the model it answered with

    w.open_conversation(plain_chat)
    assert w.composer.persona_box.currentData() is None
    w.close()
    again = window(qtbot, data)
    again.open_conversation(chat)
    assert again.composer.persona_box.currentText() == "Concise"
    again.close()


def test_the_users_own_sampling_settings_win_over_a_personas() -> None:
    concise = find_persona("Concise")
    for settings, sampling in ((AppSettings(), concise.sampling), (AppSettings(model_sampling=False), ())):
        chat = Conversation(persona="Concise", own_sampling=settings.own_sampling())
        persona = chat.applied_persona()  # the model's sampling: the persona's applies; the user's own: theirs wins
        assert persona is not None and persona.system == concise.system and persona.sampling == sampling


def test_an_unreadable_presets_file_is_one_status_line_and_the_shipped_personas_stay(
    qtbot, data: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "presets.json").write_text('{"presets": [{"name": "Loud", "sampling": {"temperature": 99}}]}')
    w = window(qtbot, data)
    line = last_note(w)
    assert "presets.json" in line and "temperature" in line and "\n" not in line
    offered = [w.composer.persona_box.itemText(i) for i in range(w.composer.persona_box.count())]
    assert offered == ["No persona", "Assistant", "Concise", "Coder", "Teacher", "Writer"]
    w.close()


def test_the_personas_manager_adds_edits_and_deletes_the_users_personas(qtbot, data: Path, tmp_path: Path) -> None:
    w = window(qtbot, data)
    w.show_personas()
    dialog = w.personas_dialog
    # A shipped persona is read-only.
    dialog.list.setCurrentRow(1)
    assert dialog.name.text() == "Concise" and dialog.name.isReadOnly()
    assert not dialog.save_button.isEnabled() and not dialog.delete_button.isEnabled()

    dialog.new_button.click()
    dialog.name.setText("Pirate")
    dialog.system.setPlainText("Answer as a pirate would.")
    dialog.temperature.setText("hot")
    dialog.save_button.click()
    assert dialog.error.text().startswith("the temperature must be a number") and "\n" not in dialog.error.text()
    assert not (tmp_path / "config" / "presets.json").exists()  # nothing saved
    dialog.temperature.setText("0.7")
    dialog.save_button.click()
    assert dialog.error.text() == ""
    box = w.composer.persona_box
    assert "Pirate" in [box.itemText(i) for i in range(box.count())]  # the window reloaded
    assert find_persona("Pirate").sampling == (("temperature", 0.7),)

    pick(w.composer.persona_box, "Pirate")  # a new chat's choice, then the preset renamed and deleted under it
    dialog.name.setText("Corsair")
    dialog.save_button.click()
    names = [dialog.list.item(i).text() for i in range(dialog.list.count())]
    assert "Corsair" in names and "Pirate" not in names
    dialog.delete_button.click()
    assert [p["name"] for p in json.loads((tmp_path / "config" / "presets.json").read_text())["presets"]] == []
    assert w.composer.persona_box.currentText() == "Pirate (gone)"  # the chat's choice is still shown, marked
    dialog.new_button.click()
    dialog.name.setText("x" * 100)  # a bad name from the runtime's own check: one line, no traceback
    dialog.save_button.click()
    assert "name must be 1-80" in dialog.error.text()
    dialog.close()
    w.close()


def test_a_chat_switches_back_to_its_model(qtbot, demo_cache: Path, data: Path) -> None:
    twin = demo_cache / "twin"  # a second complete model: the demo's files under another name
    shutil.copytree(demo_cache / DEMO_NAME, twin, copy_function=os.link)
    store = Store(data / "conversations.sqlite3")
    first = store.create("On the demo", model=DEMO_NAME)
    second = store.create("On the twin", model="twin")
    gone = store.create("On a deleted model", model="deleted-model")
    store.close()
    w = window(qtbot, data)
    w.open_conversation(second)
    assert w.model == "twin" and w.model_bar.model_box.currentData() == "twin"
    w.open_conversation(first)
    assert w.model == DEMO_NAME
    pick(w.model_bar.model_box, "twin")  # picked for this chat: it is remembered with it
    assert w.store.model(first) == "twin"
    w.open_conversation(gone)
    assert w.model == "twin" and "deleted-model" in last_note(w)
    w.close()


def test_an_export_is_named_without_a_double_dot_and_marks_a_stopped_answer(
    qtbot, data: Path, tmp_path: Path, monkeypatch
) -> None:
    """#63: "…Use the tool..md", and a stopped answer exported as if it had ended by itself."""
    store = Store(data / "conversations.sqlite3")
    chat = store.create("What is 17 plus 25? Use the tool.")
    store.add_message(chat, "user", "What is 17 plus 25? Use the tool.")
    store.add_message(chat, "assistant", "Let me", CITED | {"stop_reason": "cancelled"})
    store.close()
    w = window(qtbot, data)
    w.open_conversation(chat)
    offered: list[str] = []
    target = tmp_path / "chat.md"
    monkeypatch.setattr("app.chat_files.QFileDialog.getSaveFileName",
                        lambda parent, caption, name, filters: offered.append(name) or (str(target), filters))
    w.menus.export_action.trigger()
    assert Path(offered[0]).name == "What is 17 plus 25 Use the tool.md"
    assert "> Q8_0 + Q4_K_M · 41.5 tok/s · stopped" in target.read_text()
    w.close()


def test_export_then_import_gives_the_same_chat(qtbot, data: Path, tmp_path: Path, monkeypatch) -> None:
    store = Store(data / "conversations.sqlite3")
    chat = store.create("How to install Frobnicator", "frob")
    store.add_message(chat, "user", "How do I install Frobnicator?")
    store.add_message(chat, "assistant", "Run `pip install frobnicator` [1].", CITED)
    store.close()
    w = window(qtbot, data)
    w.open_conversation(chat)

    save_dialog(monkeypatch, tmp_path / "chat.json", "JSON (*.json)")
    w.menus.export_action.trigger()
    assert last_note(w) == f"Exported to {tmp_path / 'chat.json'}"
    save_dialog(monkeypatch, tmp_path / "chat", "Markdown (*.md)")  # no suffix: the chosen filter's
    w.menus.export_action.trigger()
    markdown = (tmp_path / "chat.md").read_text()
    assert markdown.startswith("# How to install Frobnicator\n") and "## Assistant" in markdown
    assert "> Q8_0 + Q4_K_M · 41.5 tok/s" in markdown and "1. /docs/install.md" in markdown

    open_dialog(monkeypatch, tmp_path / "chat.json")
    w.menus.import_action.trigger()
    new = w.conversation
    assert new not in (None, chat) and last_note(w) == "Imported “How to install Frobnicator”"
    assert w.store.title(new) == "How to install Frobnicator" and w.store.documents(new) == "frob"
    before = [(m.role, m.content, m.meta) for m in w.store.messages(chat)]
    assert [(m.role, m.content, m.meta) for m in w.store.messages(new)] == before
    assert "pip install frobnicator" in w.transcript.toPlainText() and "Sources" in w.transcript.toPlainText()
    assert w.composer.answer_from.currentData() == "frob"
    w.close()


def test_a_bad_import_is_one_status_line_and_no_new_chat(qtbot, data: Path, tmp_path: Path, monkeypatch) -> None:
    w = window(qtbot, data)
    bad = {
        "notes.json": "{not json",
        "other.json": json.dumps({"format": "someone-else", "messages": []}),
        "tool.json": json.dumps(
            {
                "format": "specquant-conversation",
                "version": 1,
                "title": "With a tool call",
                "messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "{}"}],
            }
        ),
    }
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
        open_dialog(monkeypatch, tmp_path / name)
        w.menus.import_action.trigger()
        line = last_note(w)
        assert line and "\n" not in line, name
        assert w.store.conversations() == [] and w.conversation is None
    assert "'tool'" in line
    open_dialog(monkeypatch, tmp_path / "missing.json")
    w.menus.import_action.trigger()
    assert "cannot read it" in last_note(w) and w.store.conversations() == []
    w.menus.export_action.trigger()  # no chat open
    assert last_note(w) == "Open a chat to export it."
    w.close()


def test_an_import_that_fails_halfway_leaves_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "conversations.sqlite3")
    broken = [ExportedMessage("user", "hello"), ExportedMessage("assistant", None)]  # type: ignore[arg-type]
    with pytest.raises(UserError, match="NOT NULL"):
        store.import_conversation("Half", broken)
    assert store.conversations() == []
    assert store.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    store.close()


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_history_loads_and_keeps_its_chats(qtbot, data: Path, version: int) -> None:
    db = data / "conversations.sqlite3"
    old = sqlite3.connect(db)
    documents = ", documents TEXT" if version == 2 else ""
    old.executescript(
        f"""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
                                    updated REAL NOT NULL{documents});
        CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES conversations(id)
            ON DELETE CASCADE, role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            content TEXT NOT NULL, created REAL NOT NULL, meta TEXT NOT NULL DEFAULT '{{}}');
        INSERT INTO conversations (id, title, created, updated) VALUES (1, 'Colours', 1.0, 2.0);
        INSERT INTO messages VALUES (1, 1, 'user', 'Name three primary colors.', 1.0, '{{}}');
        INSERT INTO messages VALUES (2, 1, 'assistant', 'Red, yellow and blue.', 2.0, '{{"tokens": 5}}');
        PRAGMA user_version={version};
        """
    )
    old.close()
    w = window(qtbot, data)
    w.open_conversation(1)
    assert [c.title for c in w.store.conversations()] == ["Colours"]
    assert "Red, yellow and blue." in w.transcript.toPlainText()
    assert w.composer.persona_box.currentData() is None and w.store.model(1) is None and w.store.documents(1) is None
    pick(w.composer.persona_box, "Teacher")
    w.close()
    store = Store(db)
    assert store.persona(1) == "Teacher" and len(store.messages(1)) == 2
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == 3
    store.close()
