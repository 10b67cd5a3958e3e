"""Chat with your documents (#42), its foundation: collections of files, text extraction, structure-following
chunks and one SQLite index searched with BM25 (FTS5). No Qt, converters or commands here.

    from runtime.documents import Library
    lib = Library()                      # $SPECQUANT_DATA_DIR/documents.sqlite3, else the user data directory
    lib.add(["~/notes"], collection="notes")
    hits = lib.search("how do I install", top=5)

docs/documents.md describes the formats, the chunking, the index's tables and its consistency guarantees.
"""

from runtime.documents.library import AddResult, FileRecord, Hit, Library, Progress

__all__ = ["AddResult", "FileRecord", "Hit", "Library", "Progress"]
