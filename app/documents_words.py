"""The words the Documents panel shows, without widgets: a job's result, indexing progress, a file's state and
its name under the folder it was added with."""

from __future__ import annotations

import os
from pathlib import PurePath

from app.documents_worker import DocumentsJob
from runtime.documents.library import VECTORS, AddResult, FileRecord, IndexProgress
from runtime.documents.outcome import changed, count_of, outcome_line

UNREADABLE = "could not be read"  # a file the index could not read: said so, not "error" (#63)


def result_line(job: DocumentsJob, result: AddResult | int) -> str:
    """One line about a finished job; "" for an automatic sync that changed nothing."""
    if isinstance(result, int):
        what = job.paths[0] if job.paths else f"the collection {job.collection}"
        return f"Removed {what} ({count_of(result, 'file')})."
    where = job.collection or "every collection"
    head = f"Added to {where}" if job.verb == "add" else f"Synced {where}"
    if job.automatic and not changed(result):
        return ""
    return f"{head}: {outcome_line(result)}."


def progress_line(p: IndexProgress) -> str:
    if p.stage == VECTORS:  # after the words: search works already, by meaning once this is done
        name = f" · {PurePath(p.path).name}" if p.path else ""
        return (f"Searchable by words. Computing vectors for search by meaning: {p.chunks_done} of "
                f"{p.chunks_total} chunks ({p.share:.0%}){name}")
    share = f" ({p.bytes_done / p.bytes_total:.0%})" if p.bytes_total else ""
    name = f" · {PurePath(p.path).name}" if p.path else ""
    return f"Indexing {p.files_done} of {p.files_total} files{share}, {p.chunks_done} chunks{name}"


def relative_name(path: str, roots: tuple[str, ...]) -> str:
    """`path` under the added folder it came from, else whole."""
    for root in roots:
        if path != root and path.startswith(root.rstrip(os.sep) + os.sep):
            return os.path.relpath(path, root)
    return path


def state_words(f: FileRecord) -> str:
    """A file's state column: "indexed, 3 chunks", "pending", or "could not be read" (why: `unreadable_line`)."""
    if f.state == "indexed":
        return f"indexed, {count_of(f.chunks, 'chunk')}"
    return UNREADABLE if f.state == "error" else f.state


def unreadable_line(f: FileRecord) -> str:
    """The line under the list when a file that could not be read is selected: its name and why (#63: the
    reason showed only on hover)."""
    return f"{PurePath(f.path).name} {UNREADABLE}: {f.error or 'no reason was given'}"
