"""After the demo's first answer (#63): the window and the terminal say plainly that it is a tiny demo and offer
the catalogue's best model that fits this computer, with its size; in the window it is one click away."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from app.message_area import Note
from runtime.models.cache import DEMO_NAME, list_models, size_text
from runtime.plan import catalog
from runtime.plan.catalog import DEMO_NOTE, better_model, fit, load_catalog
from tests.conftest import run_cli
from tests.test_app import ask, open_window

GB = 10**9


def test_the_better_model_is_the_largest_whose_plan_fits_and_needs_no_login() -> None:
    entries = load_catalog()
    for ram in (2 * GB, 8 * GB, 16 * GB, 64 * GB):
        best = better_model(ram)
        fitting = [e for e in entries if fit(e, ram).fits_plan and not e.gated]  # F16 with its draft
        if best is None:
            assert not fitting, ram
            continue
        assert best in fitting and not best.gated
        assert all(e.params <= best.params for e in fitting), ram
    assert better_model(8 * GB).params < better_model(64 * GB).params  # more memory, a larger model


def test_the_demos_first_answer_is_followed_by_the_offer_one_click_away(
    qtbot, demo_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog, "machine_ram", lambda: 8 * GB)  # the catalogue's view only: answers need psutil
    expected = better_model(8 * GB)
    assert expected is not None
    w = open_window(tmp_path, max_tokens=16)
    qtbot.addWidget(w)
    assert not any(DEMO_NOTE in t for t in w.notes.texts)
    assert ask(qtbot, w, "Name three primary colors.")
    [note] = [n for n in w.notes.findChildren(Note) if DEMO_NOTE in n.label.text() and n.isVisible()]
    text = note.label.text()
    assert expected.name in text and size_text(expected.download_bytes) in text
    # The demo's F16 is rebuilt from its Q4_1 file: its "Exact answer" says so, in the same message.
    [demo] = [m for m in list_models() if m.name == DEMO_NAME]
    assert demo.manifest["reconstructed"] is True and "rebuilt from a compressed file" in text
    assert note.action_button is not None and expected.name in note.action_button.text()

    asked: list[str] = []
    monkeypatch.setattr("app.discover.QMessageBox.question",
                        lambda parent, title, question, *a: asked.append(question) or QMessageBox.StandardButton.No)
    note.action_button.click()  # the Models dialog, on Discover, the model picked, its download asked for
    assert w.models.isVisible() and w.models.tabs.currentWidget() is w.models.discover
    assert w.models.discover.selected() == expected
    assert len(asked) == 1 and expected.name in asked[0] and not w.models.converting  # No: nothing starts
    assert not any(DEMO_NOTE in t for t in w.notes.texts)  # the offer was taken up: it is gone

    assert ask(qtbot, w, "And three secondary colours?")
    assert not any(DEMO_NOTE in t for t in w.notes.texts)  # once, not after every answer
    w.close()


@pytest.mark.slow
def test_the_terminal_says_it_too(demo_cache: Path) -> None:
    result = run_cli("chat", "--prompt", "Name three primary colors.", "--max-tokens", "16")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if DEMO_NOTE in line]
    # The command that gets the better model; on a machine too small for any, that it has none.
    assert len(lines) == 1 and ("specquant convert " in lines[0] or "No larger model" in lines[0]), result.stderr
