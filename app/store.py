"""Conversations and per-message stats in SQLite (WAL), written as each message completes.

An answer that called tools keeps its calls and their results in its meta (`tool_turn`: each round's words and
calls, see `tool_rounds`), so the turn is one row that regenerates, exports and deletes whole; `as_chats`
replays it to the engine as the assistant's `tool_calls` and the `tool` messages that answered them.

No Qt here: the window calls it on the GUI thread, and each call is one short transaction, so a crash or a
kill loses at most the answer in flight.

Faults: only a damaged file (SQLite's "file is not a database" or "database disk image is malformed") is moved
aside, with its -wal, -shm and -journal files, and a new history started. A locked database, a full disk or a
read-only file is a one-line UserError and the file stays as it is. One window at a time: a lock file next to
the database (an OS lock, so a killed app leaves none behind) turns a second window into a clear message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import filelock

from app.stored_messages import StoredConversation, StoredMessage
from runtime.errors import UserError
from runtime.paths import create_private, data_dir, private_dir

log = logging.getLogger("specquant.app")

# 2: conversations.documents (what a chat answers from). 3: conversations.preset (its persona, by its first name)
# and conversations.model (the model it answers with). An older file is upgraded in place when opened: its
# chats load with no documents, no persona and the window's current model. conversations.tools (whether the
# chat may call tools) and conversations.thinking (its thinking switch) came later without a new number: a
# reader of schema 3 selects the columns it knows, so an older SpecQuant still opens a file that has them, and
# a file without them gains them when opened; so did conversations.speed (its speed preset, #61).
SCHEMA_VERSION = 3
# Nullable TEXT columns added since version 1, in order.
ADDED_COLUMNS = ("documents", "preset", "model", "tools", "thinking", "speed")
ROLES = ("system", "user", "assistant")  # what a stored message may be (the table's CHECK)
BUSY_TIMEOUT_S = 2.0  # how long a write waits for another program's lock before saying so (the GUI waits too)
_SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's companions: they belong to the main file's contents
_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
# SQLite's primary result codes (the sqlite3 module names them only from Python 3.11 on).
_BUSY, _LOCKED, _READONLY, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 6, 8, 11, 13, 14, 26
_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    documents TEXT,  -- what answers come from: NULL no documents, '' every collection, else a collection's name
    preset TEXT,  -- the persona's name (runtime.engine.personas; the column's first name kept); NULL none
    model TEXT,  -- the model the chat answers with; NULL the window's current one
    tools TEXT,  -- '1': its answers may call the Tools panel's tools; NULL they may not
    thinking TEXT,  -- '1' a thinking model thinks in this chat, '0' it does not; NULL as Settings say
    speed TEXT  -- the speed preset this chat answers with (runtime.plan.policy: 'exact'...); NULL as Settings say
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    created REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""


class _Damaged(Exception):
    """PRAGMA quick_check found damage that no statement has hit yet."""


def is_damaged(e: BaseException) -> bool:
    """Whether SQLite says the file itself is damaged (not locked, full or read-only: those keep it)."""
    if isinstance(e, _Damaged):
        return True
    if not isinstance(e, sqlite3.DatabaseError):
        return False
    code = getattr(e, "sqlite_errorcode", None)  # Python 3.11+; the extended code, its low byte the primary
    if code is not None:
        return code & 0xFF in (_CORRUPT, _NOTADB)
    text = str(e).lower()
    return "file is not a database" in text or "malformed" in text


def _foreign(path: Path) -> bool:
    """Whether `path` has content that does not start as an SQLite database does (missing or empty: ours)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_MAGIC))
    except OSError:  # missing, or unreadable: SQLite says which
        return False
    return bool(head) and head != _MAGIC


class Store:
    """One SQLite file of conversations. A damaged file is moved aside, never deleted; any other fault is a
    UserError that leaves the file alone. `busy_timeout`: seconds a statement waits for another's lock."""

    def __init__(self, path: Path | str | None = None, busy_timeout: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path) if path else data_dir() / "conversations.sqlite3"
        self.busy_timeout = busy_timeout
        self.recovered_from: Path | None = None  # where an unreadable old file was moved, for the banner
        self._closed = False
        try:
            private_dir(self.path.parent)
            create_private(self.path)  # its -wal and -shm take its mode
        except OSError as e:
            raise UserError(f"cannot create the data folder {self.path.parent}: {e.strerror or e}") from None
        # Two windows writing one history would interleave their conversations' turns; SQLite alone would
        # let them. thread_local=False: the lock belongs to this Store, whichever thread closes it.
        self._lock = filelock.FileLock(f"{self.path}.lock", timeout=0, thread_local=False)
        try:
            self._lock.acquire()
        except filelock.Timeout:
            raise UserError(
                f"the conversation history {self.path} is open in another SpecQuant window; use that one or close it"
            ) from None
        except OSError as e:
            raise UserError(f"cannot lock the conversation history {self.path}: {e.strerror or e}") from None
        try:
            self.db = self._open_or_recover()
        except BaseException:
            self._lock.release()
            raise

    def _open_or_recover(self) -> sqlite3.Connection:
        try:
            return self._open()
        except (sqlite3.Error, _Damaged) as e:
            if not is_damaged(e):
                raise UserError(self._problem(e)) from None
            self.recovered_from = self._move_aside()
            log.warning("%s was damaged (%s); moved aside to %s", self.path, e, self.recovered_from)
        with self._guard():
            return self._open()

    def _open(self) -> sqlite3.Connection:
        # Checked before SQLite opens it: closing a connection to a file that is not a database deletes the
        # -wal and -shm beside it, and those must go aside with it.
        if _foreign(self.path):
            raise _Damaged("file is not a database")
        db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)  # `with db:` for transactions
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise UserError(f"{self.path} was written by a newer SpecQuant (schema {version}); update the app")
            # Damage a statement would only meet later ("malformed" in the middle of a chat) is found now,
            # while the file can still be set aside. The history is text: a few MB, read in milliseconds.
            check = db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise _Damaged(check)
            # An older table lacks the newer columns (CREATE TABLE IF NOT EXISTS adds none); a new file has them.
            columns = {row[1] for row in db.execute("PRAGMA table_info(conversations)")}
            missing = [name for name in ADDED_COLUMNS if columns and name not in columns]
            if version < SCHEMA_VERSION or missing:  # written only when needed: opening must not wait for a lock
                upgrade = "".join(f"ALTER TABLE conversations ADD COLUMN {name} TEXT;" for name in missing)
                db.executescript(f"BEGIN; {_SCHEMA} {upgrade} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
        except BaseException:
            db.close()
            raise
        return db

    def _move_aside(self) -> Path:
        """Rename the damaged file and its companions to `<name>.unreadable-<time>[-wal|-shm|-journal]`."""
        stamp = int(time.time())
        aside = self.path.with_name(f"{self.path.name}.unreadable-{stamp}")
        n = 1
        while any(Path(f"{aside}{side}").exists() for side in ("", *_SIDE_FILES)):
            n += 1
            aside = self.path.with_name(f"{self.path.name}.unreadable-{stamp}-{n}")
        try:
            self.path.rename(aside)
            for side in _SIDE_FILES:
                companion = Path(f"{self.path}{side}")
                if companion.exists():
                    companion.rename(f"{aside}{side}")
        except OSError as e:
            raise UserError(
                f"the conversation history {self.path} is damaged and could not be moved aside: {e.strerror or e}"
            ) from None
        return aside

    def _problem(self, e: BaseException) -> str:
        """One line for a database fault, naming the file and what to do."""
        code = getattr(e, "sqlite_errorcode", None)
        primary = code & 0xFF if code is not None else None
        text = str(e).lower()
        where = f"the conversation history {self.path}"
        if is_damaged(e):
            return f"{where} is damaged; restart SpecQuant to keep it aside and start a new one"
        if primary in (_BUSY, _LOCKED) or "locked" in text:
            return f"{where} is locked by another program; close it and try again"
        if primary == _FULL or "disk is full" in text:
            return f"disk full: {where} cannot be written; free some space and try again"
        if primary == _READONLY or "readonly" in text:
            return f"{where} is read-only; check its permissions and those of its folder"
        if primary == _CANTOPEN or "unable to open" in text:
            return f"cannot open {where}: check that it and its folder can be read and written"
        return f"cannot use {where}: {e}"

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite's faults as one-line UserErrors; the file is never touched."""
        try:
            yield
        except sqlite3.Error as e:
            # A failed COMMIT (full disk, a lock) can leave the transaction open; the next BEGIN would fail.
            db: sqlite3.Connection | None = getattr(self, "db", None)  # None while opening
            if db is not None and not self._closed and db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.rollback()
            raise UserError(self._problem(e)) from None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.db.close()
            self._lock.release()

    # --- conversations -----------------------------------------------------------------------------
    def conversations(self, search: str = "") -> list[StoredConversation]:
        """Newest first; `search` matches the title or any message, case-insensitively."""
        with self._guard():
            return self._conversations(search)

    def _conversations(self, search: str) -> list[StoredConversation]:
        if search.strip():
            pattern = "%" + search.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self.db.execute(
                "SELECT id, title, updated FROM conversations c WHERE title LIKE ?1 ESCAPE '\\' OR EXISTS "
                "(SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE ?1 ESCAPE '\\') "
                "ORDER BY updated DESC, id DESC",
                (pattern,),
            )
        else:
            rows = self.db.execute("SELECT id, title, updated FROM conversations ORDER BY updated DESC, id DESC")
        return [StoredConversation(*r) for r in rows]

    def create(
        self,
        title: str = "New chat",
        documents: str | None = None,
        persona: str | None = None,
        model: str | None = None,
    ) -> int:
        """A new conversation; `documents` is what it answers from (see `documents`), `persona` its persona
        and `model` the model it answers with (None: none chosen)."""
        now = time.time()
        with self._guard():
            cur = self.db.execute(
                "INSERT INTO conversations (title, created, updated, documents, preset, model) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (title, now, now, documents, persona, model),
            )
        return int(cur.lastrowid)

    def import_conversation(self, title: str, messages: Sequence[Any], documents: str | None = None) -> int:
        """A new conversation holding `messages` (anything with role, content and meta, as
        app.conversation_io reads them), all in one transaction: a failure leaves nothing half imported."""
        title = " ".join(title.split())[:200]
        if not title:
            raise UserError("a conversation needs a title")
        for i, m in enumerate(messages):
            if m.role not in ROLES:
                raise UserError(f"message {i + 1} is a {m.role!r} message; a chat here holds {', '.join(ROLES)}")
        now = time.time()
        with self._guard(), self.db:
            self.db.execute("BEGIN")
            cur = self.db.execute(
                "INSERT INTO conversations (title, created, updated, documents) VALUES (?, ?, ?, ?)",
                (title, now, now, documents),
            )
            conversation = int(cur.lastrowid)
            self.db.executemany(
                "INSERT INTO messages (conversation_id, role, content, created, meta) VALUES (?, ?, ?, ?, ?)",
                [(conversation, m.role, m.content, now, json.dumps(m.meta or {})) for m in messages],
            )
        return conversation

    def documents(self, conversation_id: int) -> str | None:
        """What the conversation answers from: None no documents, "" every collection, else a collection."""
        return self._text_column("documents", conversation_id)

    def set_documents(self, conversation_id: int, documents: str | None) -> None:
        with self._guard():
            self.db.execute("UPDATE conversations SET documents = ? WHERE id = ?", (documents, conversation_id))

    def persona(self, conversation_id: int) -> str | None:
        """The name of the conversation's persona; None for none."""
        return self._text_column("preset", conversation_id)

    def set_persona(self, conversation_id: int, persona: str | None) -> None:
        with self._guard():
            self.db.execute("UPDATE conversations SET preset = ? WHERE id = ?", (persona, conversation_id))

    def tools(self, conversation_id: int) -> bool:
        """Whether the conversation's answers may call tools (the Tools panel's "Tools in this chat")."""
        return self._text_column("tools", conversation_id) == "1"

    def set_tools(self, conversation_id: int, on: bool) -> None:
        with self._guard():
            self.db.execute("UPDATE conversations SET tools = ? WHERE id = ?", ("1" if on else None, conversation_id))

    def thinking(self, conversation_id: int) -> bool | None:
        """Whether a thinking model thinks in this chat (the Chat menu's switch); None: as Settings say."""
        value = self._text_column("thinking", conversation_id)
        return None if value is None else value == "1"

    def set_thinking(self, conversation_id: int, on: bool | None) -> None:
        value = None if on is None else "1" if on else "0"
        with self._guard():
            self.db.execute("UPDATE conversations SET thinking = ? WHERE id = ?", (value, conversation_id))

    def speed(self, conversation_id: int) -> str | None:
        """The speed preset this chat answers with (the composer's "Exact words" switch); None as Settings say."""
        return self._text_column("speed", conversation_id)

    def set_speed(self, conversation_id: int, speed: str | None) -> None:
        with self._guard():
            self.db.execute("UPDATE conversations SET speed = ? WHERE id = ?", (speed, conversation_id))

    def model(self, conversation_id: int) -> str | None:
        """The model the conversation last answered with (or was switched to); None if never recorded."""
        return self._text_column("model", conversation_id)

    def set_model(self, conversation_id: int, model: str | None) -> None:
        with self._guard():
            self.db.execute("UPDATE conversations SET model = ? WHERE id = ?", (model, conversation_id))

    def _text_column(self, column: str, conversation_id: int) -> str | None:
        with self._guard():
            row = self.db.execute(f"SELECT {column} FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return row[0] if row and isinstance(row[0], str) else None

    def title(self, conversation_id: int) -> str:
        with self._guard():
            row = self.db.execute("SELECT title FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return row[0] if row else ""

    def rename(self, conversation_id: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise UserError("a conversation needs a title")
        with self._guard():
            self.db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title[:200], conversation_id))

    def delete(self, conversation_id: int) -> None:
        with self._guard():
            self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # --- messages ----------------------------------------------------------------------------------
    def messages(self, conversation_id: int) -> list[StoredMessage]:
        with self._guard():
            rows = self.db.execute(
                "SELECT id, role, content, meta FROM messages WHERE conversation_id = ? ORDER BY id",
                (conversation_id,),
            ).fetchall()
        return [StoredMessage(i, role, content, _load_meta(meta)) for i, role, content, meta in rows]

    def last_message(self, conversation_id: int) -> StoredMessage | None:
        with self._guard():
            row = self.db.execute(
                "SELECT id, role, content, meta FROM messages WHERE conversation_id = ? ORDER BY id DESC LIMIT 1",
                (conversation_id,),
            ).fetchone()
        return None if row is None else StoredMessage(row[0], row[1], row[2], _load_meta(row[3]))

    def add_message(self, conversation_id: int, role: str, content: str, meta: dict[str, Any] | None = None) -> int:
        """Append one message and bump the conversation, in one transaction."""
        now = time.time()
        with self._guard(), self.db:
            self.db.execute("BEGIN")
            cur = self.db.execute(
                "INSERT INTO messages (conversation_id, role, content, created, meta) VALUES (?, ?, ?, ?, ?)",
                (conversation_id, role, content, now, json.dumps(meta or {})),
            )
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
        return int(cur.lastrowid)

    def delete_message(self, message_id: int) -> None:
        with self._guard():
            self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))


def _load_meta(text: str) -> dict[str, Any]:
    try:
        meta = json.loads(text)
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}
