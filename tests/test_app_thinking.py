"""A thinking model's thought in the window (issue #50, offscreen Qt): the "Thinking" block above the answer
(app/thinking_block.py), open while the model thinks, closed once the answer begins, opened and closed by its
heading; the stored thought in its own field, given back to the model's template as `reasoning_content`; an
old answer without one unchanged."""

from __future__ import annotations

from PySide6.QtCore import QUrl

from app.stored_messages import THINKING, StoredMessage, chat_history
from app.thinking_block import LIVE_KEY, SCHEME, block_key
from app.transcript import TranscriptView

THOUGHT = "Rayleigh scattering goes as the fourth power of frequency."
ANSWER = "Blue light scatters most."
META = {THINKING: THOUGHT, "thinking_tokens": 12, "thinking_s": 1.25}


def make_view(qtbot) -> TranscriptView:
    view = TranscriptView()
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    return view


def shown(view: TranscriptView) -> str:
    return view.toPlainText()


def test_a_stored_thought_is_a_closed_block_with_its_length_and_time_that_a_click_opens(qtbot) -> None:
    view = make_view(qtbot)
    view.show_messages([StoredMessage(1, "user", "Why is the sky blue?"),
                        StoredMessage(2, "assistant", ANSWER, dict(META))])
    text = shown(view)
    assert "▸ Thinking · 12 tokens · 1.2 s" in text and THOUGHT not in text and ANSWER in text
    assert text.index("Thinking") < text.index(ANSWER)  # above the answer
    view.anchorClicked.emit(QUrl(f"{SCHEME}:{block_key(THOUGHT, live=False)}"))  # what a click emits
    opened = shown(view)
    assert "▾ Thinking" in opened and THOUGHT in opened and opened.index(THOUGHT) < opened.index(ANSWER)
    view.anchorClicked.emit(QUrl(f"{SCHEME}:{block_key(THOUGHT, live=False)}"))
    assert THOUGHT not in shown(view)


def test_the_live_block_is_open_while_thinking_and_closes_when_the_answer_begins(qtbot) -> None:
    view = make_view(qtbot)
    view.show_messages([StoredMessage(1, "user", "Why is the sky blue?")])
    view.begin_live()
    view.update_live("…", {THINKING: "Rayleigh", "thinking_tokens": 3})
    assert "▾ Thinking… · 3 tokens" in shown(view) and "Rayleigh" in shown(view)
    view.update_live(ANSWER, dict(META))
    assert THOUGHT not in shown(view) and "▸ Thinking · 12 tokens" in shown(view) and ANSWER in shown(view)
    view.anchorClicked.emit(QUrl(f"{SCHEME}:{LIVE_KEY}"))  # the reader opens it while the answer streams
    assert THOUGHT in shown(view)


def test_the_thought_is_stored_apart_and_old_answers_are_unchanged(qtbot) -> None:
    view = make_view(qtbot)
    old = StoredMessage(3, "assistant", ANSWER, {"tokens": 5})
    view.show_messages([old])
    assert "Thinking" not in shown(view)
    thinking = StoredMessage(4, "assistant", ANSWER, dict(META))
    assert chat_history([old, thinking]) == [
        {"role": "assistant", "content": ANSWER},
        {"role": "assistant", "content": ANSWER, "reasoning_content": THOUGHT},
    ]
    # a malformed entry (an edited file) is no thought
    assert chat_history([StoredMessage(5, "assistant", ANSWER, {THINKING: 7})]) == [
        {"role": "assistant", "content": ANSWER}]


def test_the_settings_switch_thinking_and_set_its_budget(qtbot) -> None:
    from app.settings import AppSettings
    from app.settings_dialog import SettingsDialog

    assert AppSettings().chat_options().enable_thinking is None  # the template's default
    dialog = SettingsDialog(AppSettings())
    qtbot.addWidget(dialog)
    dialog.thinking_budget.setValue(256)
    assert dialog.value().chat_options().thinking_budget == 256
    dialog.thinking.setChecked(False)
    assert not dialog.thinking_budget.isEnabled()
    assert dialog.value().chat_options().enable_thinking is False
