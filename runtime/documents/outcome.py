"""What an add or sync did, in the words both front ends show (#62: the Documents tab and `specquant docs` each
wrote them): "2 files indexed (5 chunks), 1 unchanged, 1 could not be indexed". Each front end adds its own
frame (the tab names the collection, the CLI prints the reasons under it)."""

from __future__ import annotations

from runtime.documents.records import AddResult


def count_of(n: int, word: str) -> str:
    """"1 file", "2 files"."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def changed(r: AddResult) -> bool:
    """Whether the run did anything to tell: files indexed, forgotten or unreadable, vectors computed, a stop."""
    return bool(r.indexed or r.removed or r.errors or r.cancelled or r.embedded)


def outcome_parts(r: AddResult) -> list[str]:
    """The run's outcome, one phrase per kind of thing it did (none when it did nothing)."""
    parts = []
    if r.indexed:
        parts.append(f"{count_of(r.indexed, 'file')} indexed ({count_of(r.chunks, 'chunk')})")
    if r.unchanged:
        parts.append(f"{r.unchanged} unchanged")
    if r.removed:
        parts.append(f"{r.removed} gone from disk")
    if r.errors:
        parts.append(f"{len(r.errors)} could not be indexed")
    if r.embedded > r.chunks:  # vectors a stopped run left to do, or for another embedding model
        parts.append(f"vectors for {count_of(r.embedded - r.chunks, 'chunk')} indexed before")
    if r.keyword_only:
        parts.append(f"{len(r.keyword_only)} past the vector budget of a file, searchable by keyword beyond it")
    skipped = r.passed.hidden + r.passed.other
    if skipped:
        parts.append(f"{skipped} hidden or of other formats skipped")
    if r.cancelled:
        parts.append("stopped (the next add or sync goes on from there)")
    return parts


def outcome_line(r: AddResult) -> str:
    """The outcome in one line: the parts joined, or "nothing new" (with what was unchanged)."""
    if not changed(r):
        return "nothing new" + (f", {r.unchanged} unchanged" if r.unchanged else "")
    return ", ".join(outcome_parts(r))
