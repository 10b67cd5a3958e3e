"""What the documents library reports: indexing's progress and result, the files and the search hits
(runtime.documents.library)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.documents.walk import Passed

WORDS = "words"  # IndexProgress.stage: files read and chunked, their words indexed (BM25): searchable from here on
VECTORS = "vectors"  # IndexProgress.stage: the chunks' vectors computed, a few at a time, for hybrid search


@dataclass(frozen=True)
class IndexProgress:
    """Where indexing is. In the WORDS stage: files and chunks done, and bytes (the sizes of the files to do)
    as the time's measure. In the VECTORS stage: files and chunks given their vectors, of `chunks_total`."""

    files_done: int
    files_total: int
    chunks_done: int
    bytes_done: int
    bytes_total: int
    path: str = ""
    stage: str = WORDS
    chunks_total: int = 0

    @property
    def share(self) -> float:
        """How much of this stage is done, 0 to 1: bytes read, or chunks embedded (files when unknown)."""
        if self.stage == VECTORS and self.chunks_total:
            share = self.chunks_done / self.chunks_total
        elif self.bytes_total:
            share = self.bytes_done / self.bytes_total
        else:
            share = self.files_done / max(self.files_total, 1)
        return min(max(share, 0.0), 1.0)

    @property
    def finished(self) -> bool:
        """The last report of its stage."""
        if self.stage == VECTORS and self.chunks_total:
            return self.chunks_done >= self.chunks_total
        return self.files_done >= self.files_total


@dataclass
class AddResult:
    indexed: int = 0  # files whose chunks were written
    unchanged: int = 0  # read again (size or time changed) with the same content: chunks kept
    chunks: int = 0
    removed: int = 0  # files gone from disk, forgotten by sync
    embedded: int = 0  # chunks given their vectors in this run (after their words: new ones and older ones)
    vectors_left: int = 0  # chunks whose vectors the time given left for the next run (searchable by words)
    keyword_only: list[str] = field(default_factory=list)  # files found past their vector budget in this run
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, reason) met in this run
    passed: Passed = field(default_factory=Passed)
    cancelled: bool = False


@dataclass(frozen=True)
class FileRecord:
    path: str  # for display (names that are not UTF-8 shown with U+FFFD); raw_path is as on disk
    collection: str
    state: str  # indexed | pending | error
    chunks: int
    error: str | None
    format: str | None
    size: int | None
    raw_path: bytes

    @property
    def note(self) -> str | None:
        """About an indexed file: searched by keyword only past its vector budget (runtime.documents.vectors)."""
        return self.error if self.state == "indexed" else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "collection": self.collection,
            "state": self.state,
            "chunks": self.chunks,
            "error": self.error if self.state != "indexed" else None,
            "note": self.note,
        }


@dataclass(frozen=True)
class Hit:
    path: str
    # Higher is better, comparable within one query only: with embeddings the fused score, the sum of
    # 1 / (60 + rank) over the BM25 and cosine rankings the chunk is in; without them -bm25.
    score: float
    text: str
    collection: str
    page: int | None = None
    lines: tuple[int, int] | None = None
    heading: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "collection": self.collection, "score": self.score, "text": self.text}
        if self.page is not None:
            out["page"] = self.page
        if self.lines is not None:
            out["lines"] = list(self.lines)
        if self.heading is not None:
            out["heading"] = self.heading
        return out
