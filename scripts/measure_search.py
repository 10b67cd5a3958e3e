"""Measure documents search at scale (#42): a temporary index of synthetic chunks (Zipf-distributed made-up
words, about 200 a chunk, 100 chunks a file) with random unit vectors written through the index's own API,
then the latency of `Library.search` (p50, p95), hybrid and BM25 alone, over queries of 2-5 words (content
words; `with_function_words`: drawn from every word, as if the stop list did not exist). No
embedding model: the query's vector is random too, so what is timed is the search, not the model (embedding
a query with all-MiniLM-L6-v2 adds about 1.5-2 ms, docs/documents.md).

    python scripts/measure_search.py --chunks 100000 --queries 100

Prints one JSON object. `synthesise` is also what tests/test_documents_index.py builds its 10,000-chunk index with.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from runtime.documents import Library
from runtime.documents.chunk import Passage
from runtime.documents.index import Index, Vectors
from runtime.machine.hardware import cpu_name

DIM = 384  # all-MiniLM-L6-v2's
MODEL = "synthetic"
CHUNKS_PER_FILE = 100
WORDS_PER_CHUNK = 200


def vocabulary(rng: np.random.Generator, n: int = 30_000) -> list[str]:
    """Made-up words of 3-10 lowercase letters, distinct, in a fixed order (the first are the most common)."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: dict[str, None] = {}
    while len(words) < n:
        size = int(rng.integers(3, 11))
        words["".join(rng.choice(letters, size))] = None
    return list(words)


def zipf_ids(rng: np.random.Generator, vocab: int, size: int) -> np.ndarray:
    """Word ranks drawn with frequency ~ 1/rank (Zipf's law, as English words are), over `vocab` words."""
    weights = 1.0 / np.arange(1, vocab + 1)
    return rng.choice(vocab, size, p=weights / weights.sum())


def synthesise(path: Path, chunks: int, collection: str = "synthetic", seed: int = 0) -> list[str]:
    """An index at `path` of `chunks` synthetic chunks with random unit vectors of model MODEL, written through
    Index (mark, finish) as indexing would. Returns the vocabulary, most common first, to draw queries from."""
    rng = np.random.default_rng(seed)
    words = vocabulary(rng)
    index = Index(path)
    try:
        cid = index.collection_id(collection, create=True)
        assert cid is not None
        files = -(-chunks // CHUNKS_PER_FILE)
        index.mark(cid, [(f"/synthetic/file{i:06d}.txt".encode(), "text", 0, 0) for i in range(files)])
        left = chunks
        for fid, *_ in index.pending():
            n = min(CHUNKS_PER_FILE, left)
            left -= n
            ids = zipf_ids(rng, len(words), n * WORDS_PER_CHUNK).reshape(n, WORDS_PER_CHUNK)
            texts = [" ".join(words[i] for i in row) for row in ids]
            vectors = rng.standard_normal((n, DIM), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            blobs = [row.astype("<f4").tobytes() for row in vectors]
            index.finish(fid, 0, 0, f"{fid:064x}", [Passage(t) for t in texts], vectors=Vectors(MODEL, blobs))
    finally:
        index.close()
    return words


class RandomEmbedder:
    """Stands in for Embedder at search time: a random unit vector per query, of model MODEL."""

    name = MODEL

    def __init__(self, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)

    def embed(self, texts: list[str], cancel: object = None) -> np.ndarray:
        out = self.rng.standard_normal((len(texts), DIM), dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


FUNCTION_WORDS = 100  # the most common words: what runtime.documents.query.STOP_WORDS takes out of English


def queries(words: list[str], n: int, seed: int = 2, skip: int = FUNCTION_WORDS) -> list[str]:
    """2-5 words each, drawn as text draws them (Zipf) from all but the `skip` most common words: a question's
    function words ("how", "the") never reach BM25, its content words do, common ones and rare ones."""
    rng = np.random.default_rng(seed)
    rest = words[skip:]
    return [" ".join(rest[i] for i in zipf_ids(rng, len(rest), int(rng.integers(2, 6)))) for _ in range(n)]


def latencies(library: Library, texts: list[str], top: int = 5) -> dict[str, float]:
    """p50 and p95 in ms of `library.search` over `texts` (after one warm-up search, not counted)."""
    library.search(texts[0], top=top)
    times = []
    for text in texts:
        started = time.perf_counter()
        library.search(text, top=top)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"p50_ms": round(statistics.median(times), 2), "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "documents.sqlite3"
        started = time.perf_counter()
        words = synthesise(db, args.chunks)
        built = time.perf_counter() - started
        texts = queries(words, args.queries)
        common = queries(words, args.queries, seed=3, skip=0)  # function words too: every chunk holds some
        with Library(db) as bm25:
            lexical = latencies(bm25, texts)
            lexical_common = latencies(bm25, common)
        with Library(db, embedder=RandomEmbedder()) as library:  # type: ignore[arg-type]
            started = time.perf_counter()
            library.search(texts[0])
            first = (time.perf_counter() - started) * 1000
            hybrid = latencies(library, texts)
            hybrid_common = latencies(library, common)
        print(json.dumps({
            "chunks": args.chunks,
            "queries": len(texts),
            "cpu": cpu_name(),
            "index_mb": round(sum(f.stat().st_size for f in Path(folder).iterdir()) / 1e6, 1),
            "build_s": round(built, 1),
            "hybrid": hybrid,
            "hybrid_first_search_ms": round(first, 1),
            "bm25": lexical,
            "with_function_words": {"hybrid": hybrid_common, "bm25": lexical_common},
        }, indent=1))


if __name__ == "__main__":
    main()
