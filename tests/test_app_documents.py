"""Chat with your documents in the window (#42), offscreen: the Documents panel's worker and folder watch on a
real temporary index, an answer grounded on it by the demo model, and its Sources block, stored and reopened."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QMessageBox

from app.documents_panel import DocumentsPanel
from app.documents_words import UNREADABLE
from app.open_source import open_source, page_of, page_viewer, source_url
from app.store import Store
from app.transcript_text import source_label
from app.window import MainWindow
from runtime.documents import Library
from tests.conftest import REPO
from tests.test_app import ANSWER_MS, ask, open_window

INSTALL = """# Installing Frobnicator

Run `pip install frobnicator`, then `frob init` in your project folder.
Frobnicator needs Python 3.10 or newer.
"""
USAGE = """# Using Frobnicator

Run `frob twiddle FILE` to frobnicate a file. The result is written next to it.
"""
INDEX_MS = 30_000  # a few small files on 2 busy cores, with the worker's start


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The window's data directory (history, settings, documents index): the user's is never touched."""
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("SPECQUANT_DATA_DIR", str(folder))
    return folder


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "frob-docs"
    folder.mkdir()
    (folder / "install.md").write_text(INSTALL)
    (folder / "usage.md").write_text(USAGE)
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7 this is not a PDF past its first line")
    return folder


def rows(panel: DocumentsPanel) -> dict[str, tuple[str, str]]:
    """The tree as the user sees it: file name → (state column, its tooltip)."""
    out = {}
    for i in range(panel.tree.topLevelItemCount()):
        top = panel.tree.topLevelItem(i)
        for j in range(top.childCount()):
            item = top.child(j)
            out[item.text(0)] = (item.text(1), item.toolTip(1))
    return out


def wait_indexed(qtbot, panel: DocumentsPanel, *names: str, timeout: int = INDEX_MS) -> None:
    qtbot.waitUntil(lambda: all(rows(panel).get(n, ("",))[0].startswith("indexed") for n in names), timeout=timeout)


def sources(w: MainWindow) -> list[tuple[str, str, str]]:
    """The transcript's source links: (text, target, tooltip)."""
    out = []
    block = w.transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isAnchor() and fmt.anchorHref().startswith("file:"):
                out.append((it.fragment().text(), fmt.anchorHref(), fmt.toolTip()))
            it += 1
        block = block.next()
    return out


def test_a_folder_added_in_the_panel_is_indexed_and_a_bad_file_shows_its_error(
    qtbot, data: Path, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = open_window(data)
    qtbot.addWidget(w)
    panel = w.documents
    # Add folder…, as the user does it: the folder dialog, then the collection (its name offered).
    monkeypatch.setattr("app.documents_panel.QFileDialog.getExistingDirectory", lambda *a, **k: str(docs))
    offered: list[object] = []
    monkeypatch.setattr(
        "app.documents_panel.CollectionDialog.ask", lambda *a, **k: offered.append(a[1]) or ("frob", True)
    )
    panel.add_folder_button.click()
    assert offered == [["frob-docs"]]
    wait_indexed(qtbot, panel, "install.md", "usage.md")
    qtbot.waitUntil(lambda: rows(panel).get("broken.pdf", ("",))[0] == UNREADABLE, timeout=INDEX_MS)
    reason = rows(panel)["broken.pdf"][1]
    assert "PDF" in reason and "\n" not in reason  # the one-line reason on hover
    qtbot.waitUntil(lambda: panel.jobs == 0, timeout=INDEX_MS)
    assert panel.status.text() == "Added to frob: 2 files indexed (2 chunks), 1 could not be indexed."
    # #63: "error" in red, the reason only on hover: selected, the file says why in the line under the list.
    w.side_tabs.setCurrentWidget(panel)
    top = panel.tree.topLevelItem(0)
    broken = next(top.child(j) for j in range(top.childCount()) if top.child(j).text(0) == "broken.pdf")
    panel.tree.setCurrentItem(broken)
    assert panel.status.text() == f"broken.pdf could not be read: {reason}" and panel.status.isVisible()
    assert panel.tree.textElideMode() == Qt.TextElideMode.ElideMiddle  # a cut name keeps its extension
    assert (data / "documents.sqlite3").is_file()  # beside the history, in the data directory
    assert [w.composer.answer_from.itemText(i) for i in range(w.composer.answer_from.count())] == [
        "No documents", "All documents", "frob"
    ]
    # #63: what was just added is what the open chat answers from, and a new chat starts there too.
    assert w.composer.answer_from.currentText() == "frob"
    w.chats.new_button.click()
    assert w.composer.answer_from.currentText() == "frob" and w.chat.choices(None).documents == "frob"

    # Remove a file (after a confirmation), then a bad path is one line, never a dialog or a crash.
    top = panel.tree.topLevelItem(0)
    panel.tree.setCurrentItem(next(top.child(j) for j in range(top.childCount()) if top.child(j).text(0) == "usage.md"))
    monkeypatch.setattr("app.documents_panel.QMessageBox.question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    with qtbot.waitSignal(panel.refreshed, timeout=INDEX_MS):
        panel.remove_button.click()
    assert set(rows(panel)) == {"install.md", "broken.pdf"} and panel.status.text().startswith("Removed ")
    with qtbot.waitSignal(panel.job_ended, timeout=INDEX_MS) as ended:
        panel.add([str(docs / "missing")], "frob")
    assert "no such file or folder" in ended.args[1] and panel.status.text() == ended.args[1]
    w.close()


def test_an_answer_from_a_collection_lists_its_sources_and_they_survive_reopening(
    qtbot, demo_cache: Path, data: Path, docs: Path
) -> None:
    w = open_window(data, max_tokens=32)
    qtbot.addWidget(w)
    w.documents.add([str(docs)], "frob")
    wait_indexed(qtbot, w.documents, "install.md", "usage.md")
    w.choose_documents("frob")  # as the Answer-from box does; the new chat keeps it with its first message
    assert ask(qtbot, w, "How do I install Frobnicator?", timeout=ANSWER_MS * 2)
    answer = w.store.messages(w.conversation)[-1]
    cited = answer.meta["citations"]
    assert cited[0]["path"] == str(docs / "install.md") and "pip install frobnicator" in cited[0]["text"]
    assert w.store.documents(w.conversation) == "frob"

    def check_sources(window: MainWindow) -> None:
        assert "Sources" in window.transcript.toPlainText()
        links = sources(window)
        # Two short files fit the context: they went in whole, as a "summarise this" needs them.
        assert links[0][0] == "[1] install.md — whole document" == source_label(cited[0])
        assert QUrl(links[0][1]).toLocalFile() == str(docs / "install.md")
        assert "pip install frobnicator" in links[0][2]
        assert len(links) == len(cited)

    check_sources(w)
    conversation = w.conversation
    w.new_conversation()  # a new chat starts with the documents last chosen (#63)
    assert w.composer.answer_from.currentData() == "frob" and not sources(w)
    w.close()

    again = open_window(data)
    qtbot.addWidget(again)
    again.open_conversation(conversation)
    check_sources(again)  # from the stored facts
    assert again.composer.answer_from.currentText() == "frob"
    again.close()


def test_a_chat_told_once_that_it_answers_without_the_documents_there_are(
    qtbot, demo_cache: Path, data: Path, docs: Path
) -> None:
    """#63: documents exist, the chat is set to No documents: one line says the answer goes without them."""
    w = open_window(data, max_tokens=8)
    qtbot.addWidget(w)
    w.documents.add([str(docs)], "frob")
    wait_indexed(qtbot, w.documents, "install.md", "usage.md")
    w.composer.answer_from.setCurrentIndex(0)
    w.composer.answer_from.activated.emit(0)  # the user picks No documents
    assert w.chat.choices(None).documents is None
    said = [t for t in w.notes.texts if "without your documents" in t]
    assert not said
    assert ask(qtbot, w, "Say hi.", timeout=ANSWER_MS * 2) is not None
    said = [t for t in w.notes.texts if "without your documents" in t]
    assert len(said) == 1 and "Answer from" in said[0]
    w.close()


def test_a_folder_dropped_on_the_panel_is_added_and_text_is_refused(
    qtbot, data: Path, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = open_window(data)
    qtbot.addWidget(w)
    panel = w.documents
    offered: list[object] = []
    monkeypatch.setattr(
        "app.documents_panel.CollectionDialog.ask", lambda *a, **k: offered.append(a[1]) or ("dropped", True)
    )
    text = QMimeData()
    text.setText("not a file")
    refused = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, text, Qt.MouseButton.LeftButton,
                              Qt.KeyboardModifier.NoModifier)
    panel.dragEnterEvent(refused)
    assert not refused.isAccepted()
    files = QMimeData()
    files.setUrls([QUrl.fromLocalFile(str(docs)), QUrl("https://example.org/a.pdf")])  # the web link is left out
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, files, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    panel.dragEnterEvent(enter)
    assert enter.isAccepted()
    panel.dropEvent(QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, files, Qt.MouseButton.LeftButton,
                               Qt.KeyboardModifier.NoModifier))
    assert offered == [["frob-docs"]]  # one folder: its name is offered as the collection's
    wait_indexed(qtbot, panel, "install.md", "usage.md")
    assert "dropped" in panel.collections()
    w.close()


def test_stop_ends_indexing_between_two_files_and_the_bar_shows_while_it_runs(
    qtbot, data: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(3000):  # enough that indexing is still running when the first progress is shown
        (folder / f"note-{i:04d}.txt").write_text(f"Note {i}: the frobnicator was serviced on day {i}.\n")
    w = open_window(data)
    qtbot.addWidget(w)
    panel = w.documents
    assert panel.bar.isHidden() and panel.stop_button.isHidden()
    panel.add([str(folder)], "many")
    qtbot.waitUntil(lambda: not panel.stop_button.isHidden(), timeout=INDEX_MS)
    assert not panel.bar.isHidden() and 0 <= panel.bar.value() < panel.bar.maximum()
    with qtbot.waitSignal(panel.job_ended, timeout=INDEX_MS * 2):
        panel.stop_button.click()
    assert panel.status.text().startswith("Added to many: ") and panel.status.text().endswith(
        "stopped (the next add or sync goes on from there).")
    assert panel.bar.isHidden() and panel.stop_button.isHidden()
    qtbot.waitUntil(lambda: len(rows(panel)) == 3000, timeout=INDEX_MS)
    states = [state.split(",")[0] for state, _ in rows(panel).values()]  # "indexed, 1 chunk" or "pending"
    # Every file is either indexed or pending (the next sync finishes it), and some were never reached.
    assert set(states) <= {"indexed", "pending"} and "pending" in states
    w.close()


@pytest.mark.skipif(sys.platform == "darwin", reason="Preview takes no page on its command line")
def test_a_pdf_source_opens_at_its_page_in_a_viewer_that_takes_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "argv.txt"
    viewer = bin_dir / "zathura"  # stands in for an installed viewer: it writes down how it was started
    viewer.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {seen}\n")
    viewer.chmod(viewer.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))
    report = str(tmp_path / "report.pdf")
    url = source_url(report, 4)
    assert url.isLocalFile() and url.toLocalFile() == report and page_of(url) == 4
    assert page_viewer(report, 4) == [str(viewer), "-P", "4", report]
    assert page_viewer(report, None) is None and page_viewer(str(tmp_path / "notes.md"), 4) is None
    assert page_of(source_url(report, None)) is None
    assert open_source(url)
    deadline = time.monotonic() + 10
    while not (seen.exists() and seen.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen.read_text().split("\n")[:3] == ["-P", "4", report]
    assert os.environ["PATH"] == str(bin_dir)


def test_a_file_written_into_a_watched_folder_is_indexed(qtbot, data: Path, docs: Path) -> None:
    w = open_window(data)
    qtbot.addWidget(w)
    panel = w.documents
    panel.add([str(docs)], "frob")
    wait_indexed(qtbot, panel, "install.md")
    (docs / "faq.md").write_text("# FAQ\n\nFrobnicator is free software.\n")
    (docs / "sub").mkdir()
    (docs / "sub" / "deep.txt").write_text("A file in a new subfolder.\n")
    started = time.monotonic()
    # The debounce (2 s after the last change) and one sync: a few seconds, not a blind sleep.
    wait_indexed(qtbot, panel, "faq.md", "sub/deep.txt", timeout=15_000)
    assert time.monotonic() - started < 15
    (docs / "faq.md").unlink()
    qtbot.waitUntil(lambda: "faq.md" not in rows(panel), timeout=15_000)
    w.close()


def test_closing_the_window_during_indexing_neither_hangs_nor_crashes(qtbot, data: Path, tmp_path: Path) -> None:
    many = tmp_path / "many"
    many.mkdir()
    for i in range(1500):
        (many / f"note-{i:04}.txt").write_text(f"Note {i}. " + "Frobnicator twiddles files quietly. " * 30)
    w = open_window(data)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.documents.progressed, timeout=INDEX_MS, check_params_cb=lambda p: p.files_done >= 20):
        w.documents.add([str(many)], "many")
    started = time.monotonic()
    w.close()
    assert time.monotonic() - started < 10 and w.documents.worker_thread is None and w.documents.watch.observer is None
    with Library(data / "documents.sqlite3") as lib:  # each file done or pending; the next sync finishes them
        states = [f.state for f in lib.list_files()]
        assert len(states) == 1500 and set(states) <= {"indexed", "pending"} and "pending" in states
        assert lib.sync().indexed == states.count("pending")


def test_a_history_from_before_documents_loads_and_keeps_its_chats(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    old = sqlite3.connect(db)
    old.executescript(
        """
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
                                    updated REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES conversations(id)
            ON DELETE CASCADE, role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            content TEXT NOT NULL, created REAL NOT NULL, meta TEXT NOT NULL DEFAULT '{}');
        INSERT INTO conversations VALUES (1, 'Colours', 1.0, 2.0);
        INSERT INTO messages VALUES (1, 1, 'user', 'Name three primary colors.', 1.0, '{}');
        INSERT INTO messages VALUES (2, 1, 'assistant', 'Red, yellow and blue.', 2.0, '{"tokens": 5}');
        PRAGMA user_version=1;
        """
    )
    old.close()
    store = Store(db)
    assert [c.title for c in store.conversations()] == ["Colours"] and store.documents(1) is None
    assert [m.content for m in store.messages(1)] == ["Name three primary colors.", "Red, yellow and blue."]
    store.set_documents(1, "")  # every collection
    new = store.create("Notes", "notes")
    assert (store.documents(1), store.documents(new)) == ("", "notes")
    store.close()
    reopened = Store(db)
    assert reopened.documents(1) == "" and len(reopened.messages(1)) == 2
    reopened.close()


def test_only_changes_a_sync_can_see_start_one(tmp_path: Path) -> None:
    from watchdog.events import (
        DirModifiedEvent,
        FileClosedEvent,
        FileCreatedEvent,
        FileModifiedEvent,
        FileMovedEvent,
        FileOpenedEvent,
    )

    from app.documents_worker import worth_a_sync

    index = str(tmp_path / "documents.sqlite3")
    note = str(tmp_path / "notes" / "a.md")
    assert worth_a_sync(FileCreatedEvent(note), index) and worth_a_sync(FileModifiedEvent(note), index)
    assert worth_a_sync(FileMovedEvent(str(tmp_path / "notes" / ".a.md.tmp"), note), index)  # an editor's save
    # A sync reads files (opened, closed) and lists folders: those must not start the next one.
    assert not worth_a_sync(FileOpenedEvent(note), index) and not worth_a_sync(FileClosedEvent(note), index)
    assert not worth_a_sync(DirModifiedEvent(str(tmp_path / "notes")), index)
    assert not worth_a_sync(FileModifiedEvent(index + "-wal"), index)  # the index itself, in a watched folder
    assert not worth_a_sync(FileModifiedEvent(str(tmp_path / "notes" / ".a.md.swp")), index)


def test_the_panel_says_words_work_while_vectors_are_computed() -> None:
    from app.documents_words import progress_line, result_line
    from app.documents_worker import DocumentsJob
    from runtime.documents.library import VECTORS, AddResult, IndexProgress

    line = progress_line(IndexProgress(1, 3, 48, 0, 0, "/notes/a.md", VECTORS, 64))
    assert line == "Searchable by words. Computing vectors for search by meaning: 48 of 64 chunks (75%) · a.md"
    resumed = AddResult(embedded=16)  # a sync that only finished the vectors a stopped run left
    assert result_line(DocumentsJob("sync", automatic=True), resumed) == (
        "Synced every collection: vectors for 16 chunks indexed before.")


def test_the_panel_and_the_cli_say_what_an_add_did_in_the_same_words(tmp_path: Path) -> None:
    """#62: the Documents tab and `specquant docs add` each wrote the outcome (and the tab left out the files
    passed over); both now print runtime.documents.outcome's line, the tab framed by its collection."""
    import subprocess

    from app.documents_words import result_line
    from app.documents_worker import DocumentsJob
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Install\n\nRun the installer.\n")
    (folder / ".hidden.md").write_text("secret")
    (folder / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    with Library(tmp_path / "window.sqlite3") as lib:
        shown = result_line(DocumentsJob("add", [str(folder)], "notes"), lib.add([str(folder)], "notes"))
    assert shown == "Added to notes: 1 file indexed (1 chunk), 2 hidden or of other formats skipped."
    env = {**os.environ, "SPECQUANT_DATA_DIR": str(tmp_path / "cli")}
    printed = subprocess.run([sys.executable, "-m", "commands", "docs", "add", str(folder), "--collection", "notes"],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == shown.removeprefix("Added to notes: ").removesuffix(".")
