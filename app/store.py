"""Conversations and per-message stats in SQLite (WAL), written as each message completes.

No Qt here: the window calls it on the GUI thread, and each call is one short transaction, so a crash or a
kill loses at most the answer in flight.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from runtime.errors import UserError

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
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


def data_dir() -> Path:
    """The app's own data (conversations): $SPECQUANT_DATA_DIR, else the per-user data directory."""
    env = os.environ.get("SPECQUANT_DATA_DIR")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("specquant", appauthor=False))


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    updated: float


@dataclass(frozen=True)
class StoredMessage:
    id: int
    role: str
    content: str
    meta: dict[str, Any] = field(default_factory=dict)

    def as_chat(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


class Store:
    """One SQLite file of conversations. A file that is not our database is moved aside, never deleted."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / "conversations.sqlite3"
        self.recovered_from: Path | None = None  # where an unreadable old file was moved, for the banner
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the data folder {self.path.parent}: {e.strerror or e}") from None
        try:
            self.db = self._open()
        except sqlite3.DatabaseError:
            self.recovered_from = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            self.path.rename(self.recovered_from)
            self.db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None)  # autocommit; `with db:` for transactions
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise UserError(f"{self.path} was written by a newer SpecQuant (schema {version}); update the app")
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        self.db.close()

    # --- conversations -----------------------------------------------------------------------------
    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first; `search` matches the title or any message, case-insensitively."""
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
        return [Conversation(*r) for r in rows]

    def create(self, title: str = "New chat") -> int:
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO conversations (title, created, updated) VALUES (?, ?, ?)", (title, now, now)
        )
        return int(cur.lastrowid)

    def title(self, conversation_id: int) -> str:
        row = self.db.execute("SELECT title FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return row[0] if row else ""

    def rename(self, conversation_id: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise UserError("a conversation needs a title")
        self.db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title[:200], conversation_id))

    def delete(self, conversation_id: int) -> None:
        self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # --- messages ----------------------------------------------------------------------------------
    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self.db.execute(
            "SELECT id, role, content, meta FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
        )
        return [StoredMessage(i, role, content, _load_meta(meta)) for i, role, content, meta in rows]

    def last_message(self, conversation_id: int) -> StoredMessage | None:
        row = self.db.execute(
            "SELECT id, role, content, meta FROM messages WHERE conversation_id = ? ORDER BY id DESC LIMIT 1",
            (conversation_id,),
        ).fetchone()
        return None if row is None else StoredMessage(row[0], row[1], row[2], _load_meta(row[3]))

    def add_message(self, conversation_id: int, role: str, content: str, meta: dict[str, Any] | None = None) -> int:
        """Append one message and bump the conversation, in one transaction."""
        now = time.time()
        with self.db:
            self.db.execute("BEGIN")
            cur = self.db.execute(
                "INSERT INTO messages (conversation_id, role, content, created, meta) VALUES (?, ?, ?, ?, ?)",
                (conversation_id, role, content, now, json.dumps(meta or {})),
            )
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
        return int(cur.lastrowid)

    def delete_message(self, message_id: int) -> None:
        self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))


def _load_meta(text: str) -> dict[str, Any]:
    try:
        meta = json.loads(text)
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}
