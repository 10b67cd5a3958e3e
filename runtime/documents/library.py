"""Collections of documents: add files and folders, sync them with the disk, remove them, list and search.

Adding walks the paths (runtime.documents.walk), marks new and changed files 'pending' in one transaction,
then indexes the pending files one transaction each: a crash or a cancel leaves every file either done or
pending, and the next add or sync finishes the pending ones.

Indexing has two stages. WORDS: every pending file is read, chunked and written with its BM25 (FTS5) index,
one transaction each, so it can be searched from then on. VECTORS: with an `Embedder`, the chunks without a
vector of its model get theirs, a few at a time (runtime.documents.vectors; the slow part: a small BERT over
every chunk, each distinct text once). A stop or a kill in either stage leaves a state that says what is left
(pending files; chunks without vectors), and the next add or sync goes on from there. A search fuses the BM25
ranking with the cosine ranking of the chunks that have vectors (Reciprocal Rank Fusion): a chunk without one
yet is found by its words alone.
Vectors of another model (an index embedded by the F16 model before the Q8_0 one became the default) are
never compared with this model's query: those chunks count as without a vector and are embedded again.
A Library keeps the chunks' collections and the vectors (one float32 matrix) in memory between searches, read
again when the index's generation shows a change (runtime.documents.nearest).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.documents.budget import MAX_FILE_SECONDS, Deadline
from runtime.documents.extract import ExtractError, detect_format, extract
from runtime.documents.index import Index
from runtime.documents.nearest import Snapshot, nearest
from runtime.documents.query import fuse, query_terms
from runtime.documents.reading import UNKNOWN, read_found, within_roots
from runtime.documents.records import VECTORS, WORDS, AddResult, FileRecord, Hit, IndexProgress  # noqa: F401 (theirs too)
from runtime.documents.vectors import embed_missing
from runtime.documents.walk import MAX_FILE_BYTES, Found, Refused, display_path, walk
from runtime.errors import Cancelled, UserError

if TYPE_CHECKING:
    from runtime.documents.embed import Embedder

DEFAULT_COLLECTION = "default"
# Each ranking's depth before fusion (at least `top`). Shallow on purpose: in a deep list a chunk that shares
# only common words with the query ("how", "the") and is ranked low in both lists outscores one that a single
# list ranks first, the paraphrase hybrid search is for (measured on this repository's docs: a paraphrased
# question's answer came 3rd-5th at depth 10, 5th-7th at 20, past 10th at 50).
CANDIDATES = 10
MAX_TOP = 1000  # the most hits one search returns: each is a passage of up to 400 tokens


def check_collection(name: str) -> str:
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > 100 or any(ch < " " for ch in name):
        raise UserError(f"invalid collection name {name!r}: use 1-100 printable characters")
    return name


class Library:
    """The documents index and the operations on it. `path`: the SQLite file (default: the data directory's
    documents.sqlite3, $SPECQUANT_DATA_DIR to move it); `embedder`: the embedding model (None: BM25 alone, and
    no vectors written); `max_file_seconds`: one file's extraction budget (None: none). One thread at a time."""

    def __init__(
        self,
        path: Path | str | None = None,
        max_file_bytes: int = MAX_FILE_BYTES,
        embedder: Embedder | None = None,
        max_file_seconds: float | None = MAX_FILE_SECONDS,
    ) -> None:
        self.index = Index(path)
        self.max_file_bytes = max_file_bytes
        self.max_file_seconds = max_file_seconds
        self.embedder = embedder
        self._snapshot: Snapshot | None = None
        # path -> (st_dev, st_ino) as this run's walk saw it: a file is read only if it is still that file.
        self._walked: dict[bytes, tuple[int, int]] = {}

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(
        self,
        paths: Iterable[str | os.PathLike[str]],
        collection: str = DEFAULT_COLLECTION,
        progress: Callable[[IndexProgress], None] | None = None,
        cancel: threading.Event | None = None,
        vector_seconds: float | None = None,
    ) -> AddResult:
        """Add files and folders to a collection (created if new) and index what is new, changed or pending;
        the vectors for `vector_seconds` at most (None: all), the rest left for the next run."""
        name = check_collection(collection)
        if isinstance(paths, str | os.PathLike):  # one path, not its characters
            paths = [paths]
        roots = [os.path.abspath(os.path.expanduser(os.fspath(p))) for p in paths]
        if not roots:
            raise UserError("give a file or folder to add")
        for root in roots:
            if not os.path.lexists(root):
                raise UserError(f"no such file or folder: {display_path(root)}")
        self._walked = {}  # this run's walk only: a file saved anew since an earlier walk has a new inode
        cid = self.index.collection_id(name, create=True)
        assert cid is not None
        for root in roots:
            self.index.add_root(cid, os.fsencode(root))
        result = AddResult()
        if self._scan(cid, roots, result, cancel, prune=False):
            self._index_pending(result, progress, cancel, vector_seconds)
        return result

    def sync(
        self,
        collection: str | None = None,
        progress: Callable[[IndexProgress], None] | None = None,
        cancel: threading.Event | None = None,
        vector_seconds: float | None = None,
    ) -> AddResult:
        """Walk every added path again: new files are added, files whose size or time changed are read (and
        re-chunked if their hash changed), files gone from disk are forgotten; then pending files are done."""
        result = AddResult()
        self._walked = {}
        for cid, _ in self._collections(collection):
            roots = [os.fsdecode(p) for p in self.index.roots(cid)[0]]
            if not self._scan(cid, roots, result, cancel, prune=True):
                return result
        self._index_pending(result, progress, cancel, vector_seconds)
        return result

    def remove(self, path: str | os.PathLike[str] | None = None, collection: str | None = None) -> int:
        """Forget a file or folder (in one collection, or every one), or a whole collection. Returns the number
        of files forgotten; UserError when nothing matched."""
        if path is None:
            if collection is None:
                raise UserError("give a path or a collection to remove")
            files = len(self.list_files(collection))
            self.index.remove_collection(check_collection(collection))
            return files
        cid = self._collections(collection)[0][0] if collection is not None else None
        raw = os.fsencode(os.path.abspath(os.path.expanduser(os.fspath(path))))
        files, roots = self.index.remove_path(raw, cid)
        if not files and not roots:
            raise UserError(f"{display_path(raw)} is not in the documents index")
        return files

    def list_files(self, collection: str | None = None) -> list[FileRecord]:
        cid = self._collections(collection)[0][0] if collection is not None else None
        return [
            FileRecord(
                display_path(r["path"]),
                r["collection"],
                r["state"],
                r["chunks"],
                r["error"],
                r["format"],
                r["size"],
                r["path"],
            )
            for r in self.index.files(cid)
        ]

    def search(self, query: str, collection: str | None = None, top: int = 5) -> list[Hit]:
        """The `top` chunks that match best, best first: BM25 and the embeddings' cosine fused by Reciprocal
        Rank Fusion when the chunks have vectors of the embedder's model, else BM25 alone. UserError for a
        query without words, a missing collection or an index with nothing in it."""
        if not 1 <= top <= MAX_TOP:
            raise UserError(f"top must be between 1 and {MAX_TOP:,}, not {top}")
        terms = query_terms(query)  # also when embedded: a query of punctuation alone means nothing
        cid = self._collections(collection)[0][0] if collection is not None else None
        snapshot = self._current()
        among = snapshot.among(cid)
        if not len(snapshot.ids) or (among is not None and not len(among)):
            where = f"the collection {collection!r}" if collection is not None else "the documents index"
            raise UserError(f"{where} has no indexed text yet: add documents first")
        depth = max(top, CANDIDATES)
        match = " OR ".join(self._informative(terms, len(snapshot.ids)))
        lexical = self.index.search(match, depth, among)
        dense = nearest(self.index, self.embedder, query, snapshot, cid, depth)
        if dense is None:
            ranked = [(chunk_id, -bm25) for chunk_id, bm25 in lexical[:top]]
        else:
            ranked = fuse([chunk_id for chunk_id, _ in lexical], dense)[:top]
        rows = self.index.chunk_rows(chunk_id for chunk_id, _ in ranked)
        hits = []
        for chunk_id, score in ranked:
            if chunk_id not in rows:  # deleted by another process since the snapshot
                continue
            name, path, text, heading, page, first, last = rows[chunk_id]
            lines = (first, last) if first is not None else None
            hits.append(Hit(display_path(path), float(f"{score:.6g}"), text, name, page, lines, heading))
        return hits

    def full_texts(self, collection: str | None, max_chars: int) -> list[tuple[str, str]] | None:
        """Every indexed file of a collection (None: of all; a file in several once) as (path as shown, its
        whole text: its chunks in order, a blank line between two), by path; None when together they hold more
        than `max_chars` characters, so a caller can put whole documents in a prompt when they fit. UserError for
        a missing collection."""
        cid = self._collections(collection)[0][0] if collection is not None else None
        if self.index.whole_chars(cid) > max_chars:  # counted in SQL: a large collection is not read
            return None
        texts = [(display_path(path), text) for path, text in self.index.texts(cid)]
        return texts if sum(len(text) for _, text in texts) <= max_chars else None  # grown since it was counted

    def _current(self) -> Snapshot:
        """The snapshot of the index as it is now: kept while the index's generation stays the same."""
        generation = self.index.generation()  # before reading: a change while it is read shows next time
        if self._snapshot is None or self._snapshot.generation != generation:
            self._snapshot = None  # the old matrix goes before the new one is read
            self._snapshot = Snapshot(generation, *self.index.chunk_collections())
        return self._snapshot

    def _informative(self, terms: list[str], chunks: int) -> list[str]:
        """The terms that can rank. A term in half the chunks or more has no weight in FTS5's bm25 (its IDF,
        log((N - n + 0.5) / (n + 0.5)), is clamped to 1e-6), yet matching it scores most chunks: such terms are
        left out while a rarer one matches, so a search of 100,000 chunks scores the chunks that hold a rarer
        word, not all of them. Terms no chunk holds are left out too."""
        counts = [self.index.documents_with(term) for term in terms]
        present = [(term, n) for term, n in zip(terms, counts, strict=True) if n]
        return [term for term, n in present if 2 * n < chunks] or [term for term, _ in present] or terms

    # The work

    def _collections(self, name: str | None) -> list[tuple[int, str]]:
        if name is None:
            return self.index.collections()
        cid = self.index.collection_id(check_collection(name))
        if cid is None:
            known = ", ".join(n for _, n in self.index.collections()) or "none yet"
            raise UserError(f"no collection named {name!r} (collections: {known})")
        return [(cid, name)]

    def _scan(self, cid: int, roots: list[str], result: AddResult, cancel: threading.Event | None, prune: bool) -> bool:
        """Walk `roots` and record what is there: new and changed files pending, refusals as errors, and (prune)
        files gone from disk forgotten. False when cancelled (nothing recorded)."""
        excluded = frozenset(os.fsdecode(p) for p in self.index.roots(cid)[1])
        found: list[Found] = []
        refused: list[Refused] = []
        for root in roots:
            for item in walk(root, result.passed, excluded, self.max_file_bytes, cancel):
                (found if isinstance(item, Found) else refused).append(item)
        if cancel is not None and cancel.is_set():
            result.cancelled = True
            return False
        self.index.mark(cid, [(os.fsencode(f.path), f.format, f.size, f.mtime_ns) for f in found])
        self._walked.update((os.fsencode(f.path), f.identity) for f in found)
        self.index.refuse(cid, [(os.fsencode(r.path), r.reason) for r in refused])
        result.errors += [(display_path(r.path), r.reason) for r in refused]
        if prune:
            seen = {os.fsencode(item.path) for item in (*found, *refused)}
            gone = [r["id"] for r in self.index.files(cid) if r["path"] not in seen and not os.path.lexists(r["path"])]
            self.index.delete_files(gone)
            result.removed += len(gone)
        return True

    def _index_pending(
        self, result: AddResult, progress: Callable[[IndexProgress], None] | None, cancel: threading.Event | None,
        vector_seconds: float | None = None,
    ) -> None:
        """Every pending file (in any collection: a run that was killed is finished here), one transaction each;
        a cancel stops between files."""
        todo = self.index.pending()
        total = sum(size or 0 for _, _, _, size, _, _, _ in todo)
        done_bytes = 0
        roots: dict[int, list[bytes]] = {}
        for n, (fid, raw, fmt, size, sha, chunks, cid) in enumerate(todo):
            if progress is not None:
                progress(IndexProgress(n, len(todo), result.chunks, done_bytes, total, display_path(raw)))
            if cancel is not None and cancel.is_set():  # after the report: a cancel from its callback counts now
                result.cancelled = True
                return
            if cid not in roots:
                roots[cid] = self.index.roots(cid)[0]
            try:
                self._index_file(fid, os.fsdecode(raw), fmt, sha, chunks, result, cancel, roots[cid])
            except Cancelled:  # while its chunks were embedded: the file stays pending
                result.cancelled = True
                return
            done_bytes += size or 0
        if progress is not None:
            progress(IndexProgress(len(todo), len(todo), result.chunks, total, total))
        self._embed_missing(result, progress, cancel, vector_seconds)

    def _embed_missing(
        self, result: AddResult, progress: Callable[[IndexProgress], None] | None, cancel: threading.Event | None,
        seconds: float | None,
    ) -> None:
        """The VECTORS stage (runtime.documents.vectors: each distinct text once, within each file's budget)."""
        if self.embedder is None:
            return

        def report(files_done: int, files_total: int, chunks_done: int, path: str, total: int) -> IndexProgress:
            return IndexProgress(files_done, files_total, chunks_done, 0, 0, path, VECTORS, total)

        embed_missing(self.index, self.embedder, result, progress, cancel, report, seconds)

    def _index_file(
        self,
        fid: int,
        path: str,
        fmt: str | None,
        old_sha: str | None,
        old_chunks: int,
        result: AddResult,
        cancel: threading.Event | None = None,
        roots: list[bytes] | None = None,
    ) -> None:
        raw = os.fsencode(path)
        follow = raw in (roots or [])  # a path the user named is followed even when it is a link
        try:
            identity = self._walked.get(raw) or self._identity_now(path, roots or [], follow)
            read = read_found(path, identity, self.max_file_bytes, follow)
        except FileNotFoundError:
            self._failed(fid, path, "the file disappeared while it was being indexed", result)
            return
        except ExtractError as e:
            self._failed(fid, path, str(e), result)
            return
        except OSError as e:  # no size is stored: sync tries it again (permissions may be fixed)
            self._failed(fid, path, f"cannot read it: {e.strerror or e}", result)
            return
        sha = hashlib.sha256(read.data).hexdigest()
        if sha == old_sha and old_chunks > 0:  # touched, not changed: the chunks stand
            self.index.finish(fid, read.size, read.mtime_ns, sha, None)
            result.unchanged += 1
            return
        fmt = fmt or detect_format(path, named=True) or "text"
        try:
            chunks = extract(read.data, fmt, os.path.basename(path), Deadline(self.max_file_seconds)).chunks
        except ExtractError as e:
            if self.index.finish(fid, read.size, read.mtime_ns, sha, None, error=str(e)):
                result.errors.append((display_path(path), str(e)))
            return
        # Words only: the vectors follow once every file is searchable by its words (_embed_missing).
        if self.index.finish(fid, read.size, read.mtime_ns, sha, chunks):
            result.indexed += 1
            result.chunks += len(chunks)

    @staticmethod
    def _identity_now(path: str, roots: list[bytes], follow: bool) -> tuple[int, int]:
        """(st_dev, st_ino) of a file this run's walk did not see (left pending by an earlier run): it must
        still lie in one of its collection's added paths once every link is resolved."""
        if not within_roots(path, [os.fsdecode(r) for r in roots]):
            raise ExtractError("it now leads outside the added folders: not read")
        st = os.stat(path) if follow else os.lstat(path)
        return (st.st_dev, st.st_ino) if st.st_ino else UNKNOWN

    def _failed(self, fid: int, path: str, reason: str, result: AddResult) -> None:
        if self.index.finish(fid, None, None, None, None, error=reason):
            result.errors.append((display_path(path), reason))
