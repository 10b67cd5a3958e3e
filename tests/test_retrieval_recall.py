"""Retrieval quality (#42): recall@5 of hybrid search (BM25 and all-MiniLM-L6-v2's cosine, fused by rank) and of
BM25 alone on a labelled set of questions about this repository's own documentation (docs/*.md and README.md),
indexed with `Library.add`. tests/data/retrieval_questions.jsonl: one question a line, with the file that
answers it (`path`, relative to the repository) and, where the answer sits under one heading, a substring of
its heading trail (`heading`). About half are phrased in other words than the text ("How can I stop the
program from using my graphics card?"), the rest name a flag, a function or a term (`--max-queue`,
`JobReader`). A question counts as found when one of the 5 hits comes from that file (and heading)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from converters import embedding as converter
from runtime.documents import Embedder, Hit, Library
from runtime.documents.embed import F16_NAME, MODEL_NAME, Q8_NAME
from runtime.machine.hardware import ensure_backends, physical_cores
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # embedding the docs: about 10 s on 2 idle cores, minutes on busy ones

QUESTIONS = [json.loads(line) for line in (REPO / "tests" / "data" / "retrieval_questions.jsonl").open()]
TOP = 5


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The F16 conversion (the default) and its Q8_0 quantization: name -> GGUF."""
    folder = tmp_path_factory.mktemp("models")
    f16 = converter.convert_embedding_model(folder / f"{F16_NAME}.gguf")
    return {F16_NAME: f16, Q8_NAME: converter.quantize_embedding_model(f16, folder / f"{Q8_NAME}.gguf")}


def _indexed(folder: Path, gguf: Path) -> tuple[Path, Embedder]:
    embedder = Embedder(gguf, physical_cores(), prepare=ensure_backends)
    files = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
    with Library(folder / "documents.sqlite3", embedder=embedder) as lib:
        result = lib.add(files, collection="docs")
        assert (result.indexed, result.errors) == (len(files), [])
    return folder / "documents.sqlite3", embedder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, models: dict[str, Path]) -> Iterator[tuple[Path, Embedder]]:
    """The docs indexed once with the default embedding model: (the index, the model)."""
    db, embedder = _indexed(tmp_path_factory.mktemp("recall"), models[MODEL_NAME])
    yield db, embedder
    embedder.close()


def _answers(hit: Hit, label: dict) -> bool:
    return Path(hit.path) == REPO / label["path"] and label.get("heading", "") in (hit.heading or "")


def _recall(lib: Library) -> tuple[float, list[str]]:
    missed = [q["question"] for q in QUESTIONS if not any(_answers(h, q) for h in lib.search(q["question"], top=TOP))]
    return 1 - len(missed) / len(QUESTIONS), missed


def test_the_labelled_set_is_large_enough_and_every_label_names_a_passage(corpus: tuple[Path, Embedder]) -> None:
    assert len(QUESTIONS) >= 30 and len({q["question"] for q in QUESTIONS}) == len(QUESTIONS)
    with Library(corpus[0]) as lib:
        rows = lib.index.db.execute("SELECT f.path, c.heading FROM chunks c JOIN files f ON f.id = c.file_id")
        passages = {(Path(path.decode()), heading or "") for path, heading in rows}
    # A doc renamed or a heading reworded fails here, by name, rather than lowering the recall quietly.
    stale = [q for q in QUESTIONS
             if not any(p == REPO / q["path"] and q.get("heading", "") in h for p, h in passages)]
    assert stale == []


def test_hybrid_recall_at_5_is_at_least_0_88_and_not_below_bm25(corpus: tuple[Path, Embedder]) -> None:
    db, embedder = corpus
    with Library(db, embedder=embedder) as lib:
        hybrid, hybrid_missed = _recall(lib)
    with Library(db) as lib:  # the same index, BM25 alone
        bm25, bm25_missed = _recall(lib)
    report = f"recall@{TOP} over {len(QUESTIONS)} questions: hybrid {hybrid:.3f}, BM25 alone {bm25:.3f}"
    print(f"\n{report}\nhybrid missed: {hybrid_missed}\nBM25 missed: {bm25_missed}")
    # 0.930 on the docs of 2026-12-06; 0.884 (38 of 43) once #59-#64's sections joined the corpus, with the
    # library's code of either day (measured both ways): the corpus grew, the ranking did not get worse. The gate
    # follows the corpus; recovering the five questions is a retrieval task of its own (docs/documents.md).
    assert hybrid >= 0.88, f"{report}; hybrid missed {hybrid_missed}"
    assert hybrid >= bm25, report


def test_q8_0_is_the_default_only_if_it_recalls_within_0_02_of_f16(corpus: tuple[Path, Embedder],
                                                                   models: dict[str, Path], tmp_path: Path) -> None:
    """#53: the Q8_0 quantization is faster to load and smaller; it may be the default only when its recall@5
    stays within 0.02 of F16's. Measured on two runs the same day: 0.907 against 0.930, then 0.907 against
    0.907; one question of 43 is 0.023, so F16 stays the default until a larger question set decides. The
    Q8_0 model stays close either way."""
    db, f16 = corpus
    assert f16.name == F16_NAME == MODEL_NAME or MODEL_NAME == Q8_NAME
    q8_db, q8 = _indexed(tmp_path, models[Q8_NAME])
    try:
        with Library(q8_db, embedder=q8) as lib:
            q8_recall, q8_missed = _recall(lib)
    finally:
        q8.close()
    with Library(db, embedder=f16) as lib:
        f16_recall, f16_missed = _recall(lib)
    report = f"recall@{TOP} over {len(QUESTIONS)} questions: Q8_0 {q8_recall:.3f}, F16 {f16_recall:.3f}"
    print(f"\n{report}\nQ8_0 missed: {q8_missed}\nF16 missed: {f16_missed}")
    assert q8_recall >= f16_recall - 0.05, report  # two questions of 43 at most
    if MODEL_NAME == Q8_NAME:
        assert q8_recall >= f16_recall - 0.02, report
