"""Chat with your documents (#42), its foundation: collections of files, text extraction, structure-following
chunks and one SQLite index searched with BM25 (FTS5) and, given an embedding model, with dense vectors too
(hybrid: Reciprocal Rank Fusion). No Qt, converters or commands here.

    from runtime.documents import Embedder, Library
    embedder = Embedder(path_to_gguf, threads=4)   # commands/docs.py converts the model on first use
    lib = Library(embedder=embedder)     # $SPECQUANT_DATA_DIR/documents.sqlite3, else the user data directory
    lib.add(["~/notes"], collection="notes")
    hits = lib.search("how do I install", top=5)

docs/documents.md describes the formats, the chunking, the index's tables and its consistency guarantees.
"""

from runtime.documents.embed import Embedder
from runtime.documents.library import AddResult, FileRecord, Hit, IndexProgress, Library

__all__ = ["AddResult", "Embedder", "FileRecord", "Hit", "IndexProgress", "Library"]
