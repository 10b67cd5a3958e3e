"""Faults around the chat store, the settings, the controller's bookkeeping and the engine thread (issue #30).

Each fault is made for real: another SQLite connection holding the lock, garbage bytes in the database, a
database at its size limit (SQLite's own "disk full"), a second process on the same history, a target path
that is a folder so the rename fails even as root, two processes writing one file at once, and a receiver
that raises on the engine thread.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from runtime.engine.answer import Chunk
from runtime.engine.engine import ChatOptions, Engine, EngineSettings
from runtime.engine.measurements import ESTIMATES_FILE
from runtime.engine.thread import EngineThread, Failure, Job, Status
from runtime.errors import UserError
from runtime.models.cache import DEMO_NAME, ModelDir
from tests.conftest import REPO

QUESTION = [{"role": "user", "content": "Name three primary colors."}]
SHORT = ChatOptions(max_tokens=8)
SMALL = EngineSettings(n_ctx=512)


def _store(path: Path, **kw: Any):
    from app.store import Store  # app.store has no Qt, but keep this file's runtime tests free of the app

    return Store(path, busy_timeout=0.2, **kw)


def _one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and "Traceback" not in text
    return text


def _aside(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.unreadable-*"))


def _can_be_denied(folder: Path) -> bool:
    """Whether permissions stop this process writing into `folder` (not as root): a probe write decides."""
    probe = folder / ".probe"
    try:
        probe.write_text("x")
    except PermissionError:
        return True
    probe.unlink()
    return False


# --- the chat store -----------------------------------------------------------------------------------------
def test_a_locked_history_is_a_clear_message_and_stays_where_it_is(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    store = _store(db)
    chat = store.create("Colours")
    store.add_message(chat, "user", "Name three primary colors.")
    other = sqlite3.connect(db, isolation_level=None)  # another program (a backup, a DB browser) takes the lock
    other.execute("BEGIN EXCLUSIVE")
    try:
        assert [c.title for c in store.conversations()] == ["Colours"]  # WAL: reading goes on
        with pytest.raises(UserError) as e:
            store.add_message(chat, "assistant", "Red, yellow and blue.")
        assert "locked by another program" in _one_line(e.value) and str(db) in str(e.value)
    finally:
        other.execute("COMMIT")
        other.close()
    assert db.is_file() and not _aside(tmp_path)
    store.add_message(chat, "assistant", "Red, yellow and blue.")  # the same store goes on once it is free
    assert [m.content for m in store.messages(chat)] == ["Name three primary colors.", "Red, yellow and blue."]
    store.close()


def test_a_history_locked_while_opening_is_not_moved_aside(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    other = sqlite3.connect(db, isolation_level=None)  # rollback journal: an exclusive lock stops readers too
    other.executescript("CREATE TABLE keep (x); INSERT INTO keep VALUES ('precious');")
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(UserError) as e:
            _store(db)
        assert "locked by another program" in _one_line(e.value)
    finally:
        other.execute("COMMIT")
        other.close()
    assert not _aside(tmp_path)
    store = _store(db)  # once free it opens; what was there is still there
    assert store.recovered_from is None and store.db.execute("SELECT x FROM keep").fetchall() == [("precious",)]
    store.close()


def test_a_second_window_on_the_same_history_is_told_so(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    store = _store(db)
    store.add_message(store.create("Mine"), "user", "hello")
    second = [sys.executable, "-c", f"from app.store import Store\nStore({str(db)!r}).conversations()"]
    result = subprocess.run(second, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode != 0 and "is open in another SpecQuant window" in result.stderr
    with pytest.raises(UserError, match="open in another SpecQuant window"):
        _store(db)  # in this process as well
    store.close()
    assert subprocess.run(second, capture_output=True, text=True, cwd=REPO, timeout=60).returncode == 0
    assert not _aside(tmp_path)


def test_a_full_disk_is_a_clear_message_and_keeps_what_was_saved(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    store = _store(db)
    chat = store.create("Long")
    store.add_message(chat, "user", "first")
    # SQLite's own "database or disk is full" (SQLITE_FULL), the path a full disk takes: the file may not grow.
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(UserError) as e:
        store.add_message(chat, "assistant", "x" * 200_000)
    assert "disk full" in _one_line(e.value)
    assert [m.content for m in store.messages(chat)] == ["first"] and not _aside(tmp_path)
    store.db.execute("PRAGMA max_page_count=1073741823")  # space freed: the same store goes on
    store.add_message(chat, "assistant", "second")
    assert [m.content for m in store.messages(chat)] == ["first", "second"]
    store.close()


def test_a_read_only_history_is_a_clear_message_and_is_not_moved(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    store = _store(db)
    chat = store.create("Kept")
    store.db.execute("PRAGMA query_only=ON")  # SQLite refuses every write (SQLITE_READONLY), even as root
    with pytest.raises(UserError) as e:
        store.add_message(chat, "user", "lost?")
    assert "read-only" in _one_line(e.value)
    store.close()
    if not _can_be_denied(tmp_path):
        return  # root: the permission bits below would not stop it
    os.chmod(db, 0o400)
    os.chmod(tmp_path, 0o500)
    try:
        with pytest.raises(UserError):
            _store(db)
    finally:
        os.chmod(tmp_path, 0o700)
        os.chmod(db, 0o600)
    assert not _aside(tmp_path) and _store(db).conversations()[0].title == "Kept"


def test_a_garbage_file_is_moved_aside_with_its_wal_and_shm(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    garbage = {"": os.urandom(16384), "-wal": os.urandom(4096), "-shm": os.urandom(32768)}
    for side, data in garbage.items():
        Path(f"{db}{side}").write_bytes(data)
    store = _store(db)
    aside = store.recovered_from
    assert aside is not None and _aside(tmp_path) == sorted(Path(f"{aside}{s}") for s in garbage)
    for side, data in garbage.items():  # kept whole, as a set, for anyone who wants to try to recover it
        assert Path(f"{aside}{side}").read_bytes() == data
    chat = store.create("Fresh")  # a new history that works
    store.add_message(chat, "user", "hello")
    assert [m.content for m in store.messages(chat)] == ["hello"]
    assert Path(f"{db}-wal").read_bytes()[:len(garbage["-wal"])] != garbage["-wal"]
    store.close()


def test_a_malformed_database_is_moved_aside(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    store = _store(db)
    chat = store.create("Big")
    for i in range(200):
        store.add_message(chat, "user", f"message {i} " + "words " * 100)
    store.close()
    data = bytearray(db.read_bytes())
    page = 4096
    data[2 * page : len(data) - page] = os.urandom(len(data) - 3 * page)  # a valid header, damaged pages
    db.write_bytes(bytes(data))
    store = _store(db)
    assert store.recovered_from is not None and store.recovered_from.read_bytes() == bytes(data)
    assert store.conversations() == []
    store.close()


# --- the settings --------------------------------------------------------------------------------------------
HOSTILE_INI = (
    os.urandom(2000)
    + b"\n[General]\nn_ctx=1e999\napi_port=99999999999999999999\nmax_memory_gb=inf\ntemperature=nan\n"
    + b"theme=@Variant(\\0\\0\\0\\x7f\\0\\0\\0\\x18garbage)\nzoom=@Variant(\\0\\0\\0\\x2\\xff\\xff)\n"
    + b"top_k=3.5\nworkers=[not, a, list\n[broken\n=\n"
)


def test_damaged_settings_open_the_window_with_defaults(qtbot, tmp_path: Path) -> None:
    from PySide6.QtCore import QSettings

    from app.settings import AppSettings, load_settings
    from app.window import MainWindow

    ini = tmp_path / "settings.ini"
    ini.write_bytes(HOSTILE_INI)
    qsettings = QSettings(str(ini), QSettings.Format.IniFormat)
    settings = load_settings(qsettings)
    assert (settings.n_ctx, settings.api_port, settings.max_memory_gb) == (4096, 8088, 0.0)
    assert settings.engine_settings() and settings.chat_options()  # usable as they are
    w = MainWindow(_store(tmp_path / "conversations.sqlite3"), qsettings)
    qtbot.addWidget(w)
    w.zoom(1)  # a save over the damaged file: rewritten clean
    w.close()
    assert load_settings(QSettings(str(ini), QSettings.Format.IniFormat)) == AppSettings(zoom=1)


def test_unwritable_settings_are_one_line_not_a_crash(qapp, tmp_path: Path) -> None:
    from PySide6.QtCore import QSettings

    from app.settings import AppSettings, load_settings, save_settings

    ini = tmp_path / "settings.ini"
    (ini / "in-the-way").mkdir(parents=True)  # a folder where the file should be: unreadable and unwritable
    qsettings = QSettings(str(ini), QSettings.Format.IniFormat)
    assert load_settings(qsettings) == AppSettings()
    problem = save_settings(AppSettings(zoom=2), qsettings)
    assert problem is not None and "cannot be written" in _one_line(UserError(problem))
    assert (ini / "in-the-way").is_dir()


# --- the controller's bookkeeping after an answer -----------------------------------------------------------
def _answer(engine: Engine) -> list[Chunk]:
    return list(engine.stream_chat(QUESTION, SHORT))


def test_estimates_that_cannot_be_saved_never_fail_the_answer(
    demo_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = ModelDir(demo_cache, DEMO_NAME)
    target = model.path / ESTIMATES_FILE
    target.unlink(missing_ok=True)
    (target / "in-the-way").mkdir(parents=True)  # the rename onto it fails, as root too
    engine = Engine(DEMO_NAME, SMALL)
    try:
        with caplog.at_level(logging.WARNING, logger="specquant.engine"):
            chunks = _answer(engine)
        assert chunks[-1].done and chunks[-1].stats.tokens > 0 and "".join(c.text for c in chunks).strip()
        assert any("could not save the controller's estimates" in r.getMessage() for r in caplog.records)
        assert not list(model.path.glob(".*.partial"))  # the temporary file was removed
        (target / "in-the-way").rmdir()
        target.rmdir()
        os.chmod(model.path, 0o500)  # a read-only model folder: only where permissions can say no (not root)
        try:
            if _can_be_denied(model.path):
                caplog.clear()
                with caplog.at_level(logging.WARNING, logger="specquant.engine"):
                    assert _answer(engine)[-1].done
                assert any("estimates" in r.getMessage() for r in caplog.records)
        finally:
            os.chmod(model.path, 0o700)
        assert _answer(engine)[-1].done and json.loads(target.read_text())["estimates"]  # saved once possible
    finally:
        engine.close()


_WRITER = """
import sys
from pathlib import Path
from runtime.models.cache import atomic_write_text
target, tag = Path(sys.argv[1]), sys.argv[2]
for i in range(300):
    atomic_write_text(target, '{"writer": "%s", "i": %d, "pad": "%s"}' % (tag, i, "x" * 4000))
"""


def test_two_processes_saving_one_file_at_once_both_succeed(tmp_path: Path) -> None:
    target = tmp_path / ESTIMATES_FILE
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(target), tag], cwd=REPO, stderr=subprocess.PIPE, text=True)
        for tag in ("a", "b")
    ]
    for w in writers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
    last = json.loads(target.read_text())  # one whole file, never a mix
    assert last["writer"] in ("a", "b") and last["i"] == 299
    assert [p.name for p in tmp_path.iterdir()] == [ESTIMATES_FILE]  # no temporary file left behind


# --- the engine thread ---------------------------------------------------------------------------------------
class Inbox:
    """A sink that keeps what it gets, and says when its job ended."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.ended = threading.Event()

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        if isinstance(event, Failure) or (isinstance(event, Chunk) and event.done):
            self.ended.set()

    def wait(self, timeout: float = 120) -> Any:
        assert self.ended.wait(timeout), self.events
        return self.events[-1]


def _job(sink: Any, messages: list[dict[str, str]] = QUESTION, model: str | None = DEMO_NAME) -> Job:
    return Job(model, SMALL, messages, SHORT, sink=sink)


def test_a_job_that_raises_does_not_stop_the_engine_thread(demo_cache: Path) -> None:
    worker = EngineThread()
    try:
        def broken(event: Any) -> None:  # a receiver with a bug: raises on everything, the Failure included
            raise RuntimeError("receiver bug")

        bad_message, stopped_while_loading, answered = Inbox(), Inbox(), Inbox()
        jobs = [_job(broken), _job(bad_message, [{"role": "user"}])]  # no content: the engine itself raises

        def stop_on_loading(event: Any) -> None:  # the user presses Stop while the model loads
            stopped_while_loading(event)
            if isinstance(event, Status):
                jobs[2].cancel.set()

        jobs.append(_job(stop_on_loading))  # the engine was dropped after the internal error: it loads anew
        jobs.append(_job(answered))
        for j in jobs:
            worker.submit(j)
        last = answered.wait()
        assert isinstance(last, Chunk) and last.done and last.stats.tokens > 0 and worker.alive
        assert bad_message.wait().kind == "internal"
        assert stopped_while_loading.wait() == Failure("", "cancelled")
        assert not any(isinstance(e, Chunk) for e in stopped_while_loading.events)  # no token after the Stop
    finally:
        assert worker.close(timeout=30)


def test_release_and_close_give_up_after_their_timeout(demo_cache: Path) -> None:
    worker = EngineThread()
    stuck, free = threading.Event(), threading.Event()

    def hangs(event: Any) -> None:  # the engine thread is held (a load that cannot be interrupted)
        if isinstance(event, Status):
            stuck.set()
            free.wait(30)

    worker.submit(_job(hangs, model="no-such-model"))
    assert stuck.wait(30)
    with pytest.raises(UserError, match="still busy"):
        worker.release(timeout=0.3)
    free.set()
    worker.release(timeout=30)  # free again: the unload happens and release returns
    answered = Inbox()
    worker.submit(_job(answered))
    assert isinstance(answered.wait(), Chunk)
    stuck.clear()
    free.clear()
    worker.submit(_job(hangs, model="no-such-model"))
    assert stuck.wait(30)
    assert worker.close(timeout=0.3) is False  # gives up, and says so
    free.set()
    worker._thread.join(30)
    assert not worker.alive
