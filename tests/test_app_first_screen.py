"""The first screen and the Help menu (#51): an empty chat offers example prompts (a click asks one) and says
what SpecQuant can do; Help opens the guides and About names the version and the llama.cpp build."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest
from PySide6.QtCore import Qt, QUrl

from app.guide_viewer import GuideViewer
from app.help_menu import GUIDES, about_text, build_facts, docs_dir
from app.window_panels import EXAMPLES
from runtime import __version__
from runtime.models.cache import DEMO_NAME
from tests.test_app import ANSWER_MS, open_window


def test_an_empty_chat_offers_examples_and_a_click_asks_one(qtbot, demo_cache: Path, tmp_path: Path) -> None:
    w = open_window(tmp_path, max_tokens=16)
    qtbot.addWidget(w)
    start = w.pane.start
    assert start.isVisible() and not w.transcript.isVisible()
    assert [b.text() for b in start.example_buttons] == list(EXAMPLES)
    assert "documents" in start.can_do.text() and "Tools" in start.can_do.text()
    with qtbot.waitSignal(w.answer_finished, timeout=ANSWER_MS) as answered:
        qtbot.mouseClick(start.example_buttons[0], Qt.MouseButton.LeftButton)
    assert answered.args[0]  # the model answered it
    (user, assistant) = w.store.messages(w.conversation)
    assert (user.role, user.content) == ("user", EXAMPLES[0]) and assistant.role == "assistant"
    assert not start.isVisible() and w.transcript.isVisible()
    assert EXAMPLES[0] in w.transcript.toPlainText()
    w.new_conversation()
    assert start.isVisible() and not w.transcript.isVisible()
    w.close()


def test_help_offers_each_guide_and_about_names_the_build(qtbot, tmp_path: Path) -> None:
    w = open_window(tmp_path)
    qtbot.addWidget(w)
    actions = [a for a in w.menus.help.actions() if not a.isSeparator()]
    assert [a.text() for a in actions] == [text for text, _ in GUIDES] + ["&About SpecQuant"]
    for action, (_, name) in zip(actions, GUIDES, strict=False):
        assert action.isEnabled() and (docs_dir() / name).is_file(), name
    facts = dict(build_facts())
    assert facts["SpecQuant"] == __version__ and llama_cpp.__version__ in facts["llama.cpp"]
    assert "CPU kernels" in facts["CPU kernels"]  # e.g. "built-in CPU kernels", "haswell CPU kernels (…)"
    text = about_text(list(facts.items()))
    assert __version__ in text and llama_cpp.__version__ in text
    w.close()


def test_help_opens_the_user_guides_inside_the_window(qtbot, tmp_path: Path, monkeypatch) -> None:
    """#63: Help handed docs/window.md (U+2028, ggml barriers, SQLite WAL) to a desktop viewer, or said that
    nothing opens it: the guides are written for people and read in the window, their links followed there."""
    opened: list[object] = []
    monkeypatch.setattr("PySide6.QtGui.QDesktopServices.openUrl", lambda url: opened.append(url) or True)
    w = open_window(tmp_path)
    qtbot.addWidget(w)
    actions = {a.text(): a for a in w.menus.help.actions() if not a.isSeparator()}
    actions["What a &tier is"].trigger()
    viewer = w.findChild(GuideViewer)
    assert viewer is not None and viewer.isVisible() and not opened
    shown = viewer.page.toPlainText()
    assert viewer.shown() == "tiers.md" and "What a tier is" in shown and "Exact answer" in shown
    assert "#" not in shown and "|" not in shown  # Markdown rendered (a heading, a table), not shown as syntax
    for developer_word in ("U+2028", "ggml", "SQLite", "WAL"):
        assert all(developer_word not in (docs_dir() / name).read_text() for _, name in GUIDES), developer_word
    viewer.page.setSource(viewer.page.source().resolved(QUrl("documents.md")))  # a link, as a click follows it
    qtbot.waitUntil(lambda: viewer.shown() == "documents.md")
    assert "Add folder" in viewer.page.toPlainText() and viewer.contents.currentItem().text() == "Your documents"
    actions["What the &numbers mean"].trigger()  # the same viewer, another guide
    assert w.findChildren(GuideViewer) == [viewer] and viewer.shown() == "numbers.md" and not opened
    w.close()


@pytest.mark.slow
def test_setting_up_the_demo_shows_installed_and_ends_on_a_full_bar(qtbot, tmp_path: Path) -> None:
    """#63: the model manager opened on Discover during the demo's set-up, and showed "0%" after "ready"."""
    w = open_window(tmp_path)
    qtbot.addWidget(w)
    w.models.tabs.setCurrentWidget(w.models.discover)  # where the user last looked
    with qtbot.waitSignal(w.models.conversion_ended, timeout=300_000) as ended:
        w.welcome.demo_button.click()
        assert w.models.tabs.currentIndex() == 0 and w.models.isVisible()
    assert ended.args == [DEMO_NAME, ""] and w.models.stage.text() == f"{DEMO_NAME} is ready."
    assert w.models.bar.value() == w.models.bar.maximum()
    w.models.shutdown()
    w.close()
