"""The VECTORS stage of indexing (runtime.documents.library): vectors for every chunk without one of the
embedder's model, VECTOR_COMMIT chunks per transaction, so a stop loses at most those and the next add or
sync goes on from there.

Each distinct chunk text is embedded once per run: a generated file (8 MB of `x=1` lines is 6,667 chunks,
all alike) costs one embedding, not 6,667 (9 minutes on a 2-core CPU). The vectors of texts already
embedded in this run are kept, up to KEEP_TEXTS of them, for the chunks that repeat them. One file gets
vectors for its first MAX_FILE_VECTORS distinct passages at most: beyond them it is searchable by keyword
only, and its reason (`docs list`, the Documents tab) says so. With `seconds` the stage stops between
commits once they have passed (`specquant docs add`): everything is searchable by its words already, and
the next add or sync (the window's, in the background) computes the vectors left.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.documents.walk import display_path
from runtime.errors import Cancelled

if TYPE_CHECKING:
    from runtime.documents.embed import Embedder
    from runtime.documents.index import Index

VECTOR_COMMIT = 64  # vectors written per transaction: a stop loses at most this many chunks' work (seconds)
KEEP_TEXTS = 8192  # distinct texts' vectors kept for repeats in one run (384 float32 each: 12 MB)
# Distinct passages of one file given vectors (about 3 minutes at 12 chunks/s on a slow CPU; a 500-page book
# is about 1,000): past it, a generated or huge file is searched by its words, and its note says so.
MAX_FILE_VECTORS = 2_000


class Known:
    """Vectors of texts embedded in this run, by the text's hash, least recently used out."""

    def __init__(self, limit: int = KEEP_TEXTS) -> None:
        self.limit = limit
        self._rows: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self.embedded = 0  # distinct texts given to the embedder

    def vectors(self, embedder: Embedder, texts: list[str], cancel: threading.Event | None) -> list[np.ndarray]:
        """A vector for each of `texts`, embedding only the distinct ones not seen before."""
        keys = [hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest() for t in texts]
        new: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in self._rows and key not in new:
                new[key] = text
        if new:
            rows = embedder.embed(list(new.values()), cancel)
            self.embedded += len(new)
            for key, row in zip(new, rows, strict=True):
                self._rows[key] = row
        found = []
        for key in keys:
            self._rows.move_to_end(key)
            found.append(self._rows[key])
        while len(self._rows) > self.limit:
            self._rows.popitem(last=False)
        return found


def keyword_only(total: int) -> str:
    """A file's note once it is past its vector budget."""
    return (f"searchable by keyword only beyond its first {MAX_FILE_VECTORS:,} distinct passages of {total:,} "
            "(one file's vector budget)")


def budgeted(index: Index, fid: int, rows: list[tuple[int, str]]) -> tuple[list[tuple[int, str]], int]:
    """Of a file's chunks without a vector, those within its budget: the chunks whose text is among the
    file's first MAX_FILE_VECTORS distinct texts (the same on every run); and its count of distinct texts."""
    texts = dict.fromkeys(index.chunk_texts(fid))
    if len(texts) <= MAX_FILE_VECTORS:
        return rows, len(texts)
    allowed = set(itertools.islice(texts, MAX_FILE_VECTORS))
    return [r for r in rows if r[1] in allowed], len(texts)


def embed_missing(
    index: Index, embedder: Embedder, result: Any, progress: Callable[[Any], None] | None,
    cancel: threading.Event | None, progress_of: Callable[..., Any], seconds: float | None = None,
) -> None:
    """Vectors for every chunk without one of `embedder`'s model (just indexed, indexed by a Library without
    a model or with another model, or left by a run that stopped), within each file's budget; `result`
    counts them (`embedded`), the files past their budget (`keyword_only`, once each) and, after `seconds`,
    the chunks left for the next run (`vectors_left`); a stop sets `result.cancelled`.
    `progress_of(files_done, files_total, chunks_done, path, chunks_total)`: a report."""
    model = embedder.name
    todo = []
    for fid, raw, _ in index.unembedded(model):
        rows, distinct = budgeted(index, fid, index.chunks_without_vectors(fid, model))
        if distinct > MAX_FILE_VECTORS and index.note(fid, keyword_only(distinct)):
            result.keyword_only.append(display_path(raw))
        if rows:
            todo.append((fid, raw, rows))
    total = sum(len(rows) for _, _, rows in todo)
    done = 0
    known = Known()
    until = None if seconds is None else time.monotonic() + seconds
    for n, (fid, raw, rows) in enumerate(todo):
        for start in range(0, len(rows), VECTOR_COMMIT):
            if progress is not None:
                progress(progress_of(n, len(todo), done, display_path(raw), total))
            if cancel is not None and cancel.is_set():
                result.cancelled = True
                return
            if until is not None and time.monotonic() > until:
                result.vectors_left = total - done
                return
            part = rows[start : start + VECTOR_COMMIT]
            try:
                vectors = known.vectors(embedder, [text for _, text in part], cancel)
            except Cancelled:
                result.cancelled = True
                return
            blobs = [(cid, row.astype("<f4").tobytes()) for (cid, _), row in zip(part, vectors, strict=True)]
            result.embedded += index.put_vectors(fid, blobs, model)
            done += len(part)
    if todo and progress is not None:
        progress(progress_of(len(todo), len(todo), total, "", total))
