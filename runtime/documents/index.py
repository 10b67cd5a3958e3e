"""The documents index: one SQLite file (WAL; its schema in `index_schema`) of collections, their files, the
files' chunks, an FTS5 index over the chunks for BM25, and the chunks' dense embeddings (one float32 vector per
chunk and model). Each file's change is one transaction, so a crash or a kill leaves the last committed state:
a file is either 'pending' (found, not yet done; its old chunks, if any, still searchable) or has all its new
chunks. Paths are stored as the bytes the filesystem gave (os.fsencode), so any name round-trips.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.documents.chunk import Passage
from runtime.documents.index_schema import SCHEMA, SCHEMA_VERSION
from runtime.errors import UserError
from runtime.paths import create_private, data_dir, private_dir


@dataclass(frozen=True)
class Vectors:
    """One file's chunk vectors for `finish`: float32 little-endian blobs, in chunk order, and their model."""

    model: str
    blobs: list[bytes]


BUSY_TIMEOUT_S = 10.0  # another program indexing holds the write lock for one file's transaction at most
# BM25 weights of the FTS columns: a match in a heading counts double.
_BM25 = "bm25(chunks_fts, 1.0, 2.0)"


def _under(path: bytes) -> tuple[bytes, bytes]:
    """The byte-string range [under, past) that holds every path below `path`: index-friendly comparisons."""
    under = path.rstrip(os.fsencode(os.sep)) + os.fsencode(os.sep)
    return under, under[:-1] + bytes([under[-1] + 1])


def default_path() -> Path:
    return data_dir() / "documents.sqlite3"


class Index:
    """The SQLite file. One thread at a time uses an Index; other processes may use the same file."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path else default_path()
        try:
            private_dir(self.path.parent)
            create_private(self.path)  # its -wal and -shm take its mode
        except OSError as e:
            raise UserError(f"cannot create the data folder {self.path.parent}: {e.strerror or e}") from None
        try:
            self.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise UserError(f"cannot open the documents index {self.path}: {e}") from None
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            # NORMAL in WAL: a power cut may lose the last commits, never consistency; each file commits alone.
            self.db.execute("PRAGMA synchronous=NORMAL")
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise UserError(f"{self.path} was written by a newer SpecQuant (schema {version}); update it")
            if version < SCHEMA_VERSION:
                self.db.executescript(f"BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise UserError(
                f"the documents index {self.path} cannot be used ({e}); move it aside and add the documents again"
            ) from None
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at the start (IMMEDIATE) so it cannot fail half-way on another's lock."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # Collections and roots

    def collection_id(self, name: str, create: bool = False) -> int | None:
        row = self.db.execute("SELECT id FROM collections WHERE name = ?", (name,)).fetchone()
        if row is None and create:
            with self.transaction() as db:
                db.execute("INSERT OR IGNORE INTO collections(name, created) VALUES (?, ?)", (name, time.time()))
            row = self.db.execute("SELECT id FROM collections WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def collections(self) -> list[tuple[int, str]]:
        return list(self.db.execute("SELECT id, name FROM collections ORDER BY name"))

    def roots(self, collection_id: int) -> tuple[list[bytes], list[bytes]]:
        """(added paths, excluded paths) of a collection."""
        rows = list(self.db.execute("SELECT path, excluded FROM roots WHERE collection_id = ?", (collection_id,)))
        return [p for p, x in rows if not x], [p for p, x in rows if x]

    def add_root(self, collection_id: int, path: bytes) -> None:
        """An added file or folder; exclusions at or under it end (adding it again means all of it)."""
        under, past = _under(path)
        with self.transaction() as db:
            db.execute(
                "DELETE FROM roots WHERE collection_id = ? AND excluded = 1 AND (path = ? OR (path >= ? AND path < ?))",
                (collection_id, path, under, past),
            )
            db.execute("INSERT OR IGNORE INTO roots(collection_id, path) VALUES (?, ?)", (collection_id, path))

    # Files

    def files(self, collection_id: int | None = None) -> list[sqlite3.Row]:
        """Every file row (with its collection's name), by collection then path."""
        self.db.row_factory = sqlite3.Row
        try:
            where = "WHERE f.collection_id = ?" if collection_id is not None else ""
            args = (collection_id,) if collection_id is not None else ()
            return list(
                self.db.execute(
                    "SELECT f.*, c.name AS collection FROM files f JOIN collections c ON c.id = f.collection_id "
                    f"{where} ORDER BY c.name, f.path",
                    args,
                )
            )
        finally:
            self.db.row_factory = None

    def pending(self) -> list[tuple[int, bytes, str | None, int | None, str | None, int, int]]:
        """(id, path, format, size, sha256, chunks, collection id) of every pending file, in every collection."""
        return list(
            self.db.execute(
                "SELECT id, path, format, size, sha256, chunks, collection_id FROM files WHERE state = 'pending' "
                "ORDER BY id"
            )
        )

    def mark(self, collection_id: int, found: Iterable[tuple[bytes, str, int, int]]) -> int:
        """Files found on disk (path, format, size, mtime_ns): new ones and changed ones become pending, in one
        transaction. Returns how many are pending now from this call."""
        n = 0
        with self.transaction() as db:
            for path, fmt, size, mtime in found:
                row = db.execute(
                    "SELECT id, state, size, mtime_ns FROM files WHERE collection_id = ? AND path = ?",
                    (collection_id, path),
                ).fetchone()
                if row is None:
                    db.execute(
                        "INSERT INTO files(collection_id, path, format, size, mtime_ns, state) "
                        "VALUES (?, ?, ?, ?, ?, 'pending')",
                        (collection_id, path, fmt, size, mtime),
                    )
                    n += 1
                elif row[1] == "pending" or (row[2], row[3]) != (size, mtime):
                    # The size and mtime are the walk's until the file is read: an unread file stays "changed".
                    db.execute(
                        "UPDATE files SET state = 'pending', error = NULL, format = ? WHERE id = ?", (fmt, row[0])
                    )
                    n += 1
        return n

    def refuse(self, collection_id: int, refused: Iterable[tuple[bytes, str]]) -> None:
        """Paths the walk refused (links, loops, size), each an error row with its reason and no chunks (a file
        that was indexed before it grew past the limit loses its old ones)."""
        rows = [(collection_id, p, reason) for p, reason in refused]
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO files(collection_id, path, state, error) VALUES (?, ?, 'error', ?) "
                "ON CONFLICT(collection_id, path) DO UPDATE SET state = 'error', error = excluded.error, "
                "size = NULL, mtime_ns = NULL, sha256 = NULL, chunks = 0",
                rows,
            )
            db.executemany(
                "DELETE FROM chunks WHERE file_id = (SELECT id FROM files WHERE collection_id = ? AND path = ?)",
                [row[:2] for row in rows],
            )

    def finish(
        self,
        file_id: int,
        size: int | None,
        mtime: int | None,
        sha: str | None,
        chunks: list[Passage] | None,
        error: str | None = None,
        vectors: Vectors | None = None,
    ) -> bool:
        """One file done, in one transaction: its chunks replaced (chunks None: the old ones kept) with their
        vectors (one per chunk, in order) if given, or its error. False when the row was removed meanwhile
        (nothing is written)."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM files WHERE id = ?", (file_id,)).fetchone() is None:
                return False
            if chunks is not None or error is not None:
                db.execute("DELETE FROM chunks WHERE file_id = ?", (file_id,))
            if chunks:
                db.executemany(
                    "INSERT INTO chunks(file_id, ordinal, text, heading, page, first_line, last_line) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(file_id, i, c.text, c.heading, c.page, c.first_line, c.last_line) for i, c in enumerate(chunks)],
                )
                if vectors is not None:
                    ids = db.execute("SELECT id FROM chunks WHERE file_id = ? ORDER BY ordinal", (file_id,)).fetchall()
                    rows = [(row[0], blob) for row, blob in zip(ids, vectors.blobs, strict=True)]
                    self._put_vectors(db, file_id, rows, vectors.model)
            count = db.execute("SELECT count(*) FROM chunks WHERE file_id = ?", (file_id,)).fetchone()[0]
            db.execute(
                "UPDATE files SET state = ?, error = ?, size = ?, mtime_ns = ?, sha256 = ?, chunks = ?, indexed_at = ? "
                "WHERE id = ?",
                ("error" if error else "indexed", error, size, mtime, sha, count, time.time(), file_id),
            )
        return True

    # Vectors

    def _put_vectors(self, db: sqlite3.Connection, file_id: int, rows: list[tuple[int, bytes]], model: str) -> None:
        db.executemany(
            "INSERT OR REPLACE INTO embeddings(chunk_id, model, vector) VALUES (?, ?, ?)",
            [(chunk_id, model, blob) for chunk_id, blob in rows],
        )
        db.execute(
            "UPDATE collections SET embedding_model = ? WHERE id = (SELECT collection_id FROM files WHERE id = ?)",
            (model, file_id),
        )

    def unembedded(self, model: str) -> list[tuple[int, bytes, int]]:
        """(file id, path, chunks without a vector) of indexed files, in every collection, with chunks that have
        no vector of `model`: just indexed (vectors follow the words), indexed without the model, with another
        model, or by a run stopped before their vectors were done."""
        return list(
            self.db.execute(
                "SELECT f.id, f.path, count(*) FROM files f JOIN chunks c ON c.file_id = f.id "
                "LEFT JOIN embeddings e ON e.chunk_id = c.id AND e.model = ? "
                "WHERE e.chunk_id IS NULL AND f.state = 'indexed' GROUP BY f.id ORDER BY f.id",
                (model,),
            )
        )

    def vector_coverage(self, model: str) -> tuple[int, int]:
        """(chunks with a vector of `model`, all chunks), in every collection."""
        with_vectors = self.db.execute("SELECT count(*) FROM embeddings WHERE model = ?", (model,)).fetchone()[0]
        return with_vectors, self.db.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def chunks_without_vectors(self, file_id: int, model: str) -> list[tuple[int, str]]:
        """(chunk id, text) of a file's chunks with no vector of `model`, in order."""
        return list(
            self.db.execute(
                "SELECT c.id, c.text FROM chunks c LEFT JOIN embeddings e ON e.chunk_id = c.id AND e.model = ? "
                "WHERE c.file_id = ? AND e.chunk_id IS NULL ORDER BY c.ordinal",
                (model, file_id),
            )
        )

    def chunk_texts(self, file_id: int) -> list[str]:
        """A file's chunk texts, in order."""
        return [r[0] for r in self.db.execute("SELECT text FROM chunks WHERE file_id = ? ORDER BY ordinal", (file_id,))]

    def note(self, file_id: int, text: str) -> bool:
        """A line about an indexed file (its `error` column, shown as its reason); whether it is new."""
        with self.transaction() as db:
            cursor = db.execute("UPDATE files SET error = ? WHERE id = ? AND state = 'indexed' AND error IS NOT ?",
                                (text, file_id, text))
            return cursor.rowcount > 0

    def put_vectors(self, file_id: int, rows: list[tuple[int, bytes]], model: str) -> int:
        """Vectors for a file's existing chunks, in one transaction; chunks replaced meanwhile (another process
        re-indexed the file) are skipped. Returns how many were written."""
        with self.transaction() as db:
            present = {r[0] for r in db.execute("SELECT id FROM chunks WHERE file_id = ?", (file_id,))}
            rows = [(chunk_id, blob) for chunk_id, blob in rows if chunk_id in present]
            if rows:
                self._put_vectors(db, file_id, rows, model)
        return len(rows)

    def vectors(self, model: str, batch: int = 4096) -> Iterator[tuple[np.ndarray, bytes]]:
        """The vectors of `model`, by chunk id, in batches: (chunk ids, their vectors concatenated). One read
        statement, so one snapshot of the index."""
        cursor = self.db.execute("SELECT chunk_id, vector FROM embeddings WHERE model = ? ORDER BY chunk_id", (model,))
        while rows := cursor.fetchmany(batch):
            yield np.fromiter((r[0] for r in rows), np.int64, len(rows)), b"".join(r[1] for r in rows)

    def generation(self) -> int:
        """Grows with every chunk or vector written or deleted, by any process (a trigger counts)."""
        return self.db.execute("SELECT n FROM generation").fetchone()[0]

    def chunk_collections(self) -> tuple[np.ndarray, np.ndarray]:
        """(every chunk id, ascending; its collection id), read from the chunks' (file, ordinal) index alone."""
        rows = self.db.execute("SELECT c.id, f.collection_id FROM chunks c JOIN files f ON f.id = c.file_id").fetchall()
        ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        collections = np.fromiter((r[1] for r in rows), np.int64, len(rows))
        order = np.argsort(ids, kind="stable")
        return ids[order], collections[order]

    def delete_files(self, ids: Iterable[int]) -> None:
        with self.transaction() as db:
            db.executemany("DELETE FROM files WHERE id = ?", [(i,) for i in ids])

    def remove_path(self, path: bytes, collection_id: int | None) -> tuple[int, int]:
        """Forget a file or a folder's files (in one collection, or all), and keep sync from finding them again:
        a removed path under an added folder becomes an exclusion. Returns (files, roots) removed."""
        sep = os.fsencode(os.sep)
        under, past = _under(path)
        scope, args = ("AND collection_id = ?", (collection_id,)) if collection_id is not None else ("", ())
        match = f"(path = ? OR (path >= ? AND path < ?)) {scope}"
        with self.transaction() as db:
            files = db.execute(f"DELETE FROM files WHERE {match}", (path, under, past, *args)).rowcount
            roots = db.execute(f"DELETE FROM roots WHERE excluded = 0 AND {match}", (path, under, past, *args)).rowcount
            db.execute(f"DELETE FROM roots WHERE excluded = 1 AND {match}", (path, under, past, *args))
            # Still under an added folder: sync's walk would bring it back unless it is excluded.
            added = db.execute(f"SELECT collection_id, path FROM roots WHERE excluded = 0 {scope}", args).fetchall()
            for cid in {cid for cid, root in added if path.startswith(root.rstrip(sep) + sep)}:
                db.execute("INSERT OR REPLACE INTO roots(collection_id, path, excluded) VALUES (?, ?, 1)", (cid, path))
                roots += 1
        return files, roots

    def documents_with(self, term: str) -> int:
        """How many chunks match one FTS5 term (`"word"` or `"word"*`): FTS5 counts from its index alone."""
        return self.db.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (term,)).fetchone()[0]

    def search(self, match: str, top: int, among: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(chunk id, bm25) of the best `top` chunks for an FTS5 MATCH expression, best first (bm25: lower is
        better, so ascending). `among`: the chunk ids in scope, ascending (None: every chunk). The FTS table
        is read alone, never joined to the chunks' rows (that doubled a search's time at 100,000 chunks)."""
        query = f"SELECT rowid, {_BM25} AS rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank"
        if among is None:
            return list(self.db.execute(f"{query} LIMIT ?", (match, top)))
        if not len(among):
            return []
        out: list[tuple[int, float]] = []
        cursor = self.db.execute(query, (match,))
        while len(out) < top and (rows := cursor.fetchmany(max(64, 4 * top))):
            ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
            at = np.minimum(np.searchsorted(among, ids), len(among) - 1)
            out += [row for row, keep in zip(rows, among[at] == ids, strict=True) if keep]
        cursor.close()
        return out[:top]

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, tuple]:
        """chunk id -> (collection, path, text, heading, page, first_line, last_line)."""
        ids, out = list(ids), {}
        for start in range(0, len(ids), 500):  # within any SQLite's limit on bound variables (999 before 3.32)
            part = ids[start : start + 500]
            rows = self.db.execute(
                "SELECT c.id, k.name, f.path, c.text, c.heading, c.page, c.first_line, c.last_line FROM chunks c "
                "JOIN files f ON f.id = c.file_id JOIN collections k ON k.id = f.collection_id "
                f"WHERE c.id IN ({','.join('?' * len(part))})",
                part,
            )
            out.update({r[0]: r[1:] for r in rows})
        return out

    def _whole_files(self, collection_id: int | None) -> tuple[str, tuple]:
        """The files whose chunks make the whole texts of one collection or all: one per path (the first
        added, where several collections hold the same file)."""
        scope, args = ("AND collection_id = ?", (collection_id,)) if collection_id is not None else ("", ())
        return f"SELECT min(id) FROM files WHERE chunks > 0 {scope} GROUP BY path", args

    def whole_chars(self, collection_id: int | None) -> int:
        """The characters of `texts`: every file's chunks, a blank line between two."""
        files, args = self._whole_files(collection_id)
        return self.db.execute(
            "SELECT coalesce(sum(length(text)) + 2 * (count(*) - count(DISTINCT file_id)), 0) FROM chunks "
            f"WHERE file_id IN ({files})",
            args,
        ).fetchone()[0]

    def texts(self, collection_id: int | None) -> list[tuple[bytes, str]]:
        """(path, whole text: its chunks in order, a blank line between two) of every file with chunks in one
        collection or all (a path once), by path."""
        files, args = self._whole_files(collection_id)
        rows = self.db.execute(
            f"SELECT f.path, c.text FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.id IN ({files}) "
            "ORDER BY f.path, c.ordinal",
            args,
        )
        out: list[tuple[bytes, list[str]]] = []
        for path, text in rows:
            if not out or out[-1][0] != path:
                out.append((path, []))
            out[-1][1].append(text)
        return [(path, "\n\n".join(parts)) for path, parts in out]

    def remove_collection(self, name: str) -> bool:
        """Forget a collection, its files, chunks and vectors (the cascade's triggers clear the FTS index)."""
        with self.transaction() as db:
            return db.execute("DELETE FROM collections WHERE name = ?", (name,)).rowcount > 0
