"""One big generated file must not hold `docs add` for minutes (issue 59 item 6): each distinct chunk is
embedded once, one file's vectors stop at its budget (keyword only beyond, said in its note), and with a time
limit the command returns once everything is searchable by words, the next run finishing the vectors."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from runtime.documents import Embedder, Library, vectors
from tests.test_embeddings import embedder, embedding_gguf  # noqa: F401 (fixtures)


class Counting:
    """The real embedder, counting the texts it is given; more than `limit` fails the test at once (the old
    code embedded all 6,667 alike chunks, 9 minutes on a 2-core CPU)."""

    def __init__(self, real: Embedder, limit: int) -> None:
        self.real, self.limit, self.texts = real, limit, 0

    @property
    def name(self) -> str:
        return self.real.name

    def embed(self, texts: Sequence[str], cancel: threading.Event | None = None) -> np.ndarray:
        self.texts += len(texts)
        assert self.texts <= self.limit, f"{self.texts} texts embedded, at most {self.limit} distinct ones"
        return self.real.embed(texts, cancel)


def test_a_generated_file_of_alike_chunks_is_embedded_once(tmp_path: Path, embedder: Embedder) -> None:  # noqa: F811
    folder = tmp_path / "gen"
    folder.mkdir()
    (folder / "settings.txt").write_text("x=1\n" * 2_000_000)  # 8 MB
    counting = Counting(embedder, limit=5)
    with Library(tmp_path / "documents.sqlite3", embedder=counting) as lib:  # type: ignore[arg-type]
        result = lib.add([folder])
        [record] = lib.list_files()
        with_vectors, chunks = lib.index.vector_coverage(embedder.name)
        assert result.chunks > 6_000 and result.embedded == chunks == with_vectors == record.chunks
        assert record.note is None
        assert lib.search("x", top=1)


def test_a_file_past_its_vector_budget_is_searched_by_keyword_beyond_it(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setattr(vectors, "MAX_FILE_VECTORS", 3)
    folder = tmp_path / "docs"
    folder.mkdir()
    # ten sections of distinct words, each its own chunk (a heading ends a chunk)
    (folder / "big.md").write_text("".join(f"# Part {i}\n\n" + f"word{i} " * 100 + "\n\n" for i in range(10)))
    (folder / "small.md").write_text("# Small\n\nA short note about frobnicators.\n")
    counting = Counting(embedder, limit=4)  # big.md's first three distinct passages, and small.md's one
    with Library(tmp_path / "documents.sqlite3", embedder=counting) as lib:  # type: ignore[arg-type]
        result = lib.add([folder])
        assert result.chunks >= 11 and result.embedded == 4 and counting.texts == 4
        assert [Path(p).name for p in result.keyword_only] == ["big.md"]
        notes = {Path(f.path).name: f.note for f in lib.list_files()}
        assert notes["small.md"] is None
        assert "searchable by keyword only beyond its first 3 distinct passages of " in notes["big.md"]
        assert {Path(f.path).name: f.as_dict()["error"] for f in lib.list_files()} == {"big.md": None,
                                                                                       "small.md": None}
        counting.limit = 5  # the query's vector
        assert Path(lib.search("word7", top=1)[0].path).name == "big.md"  # found by its words
        again = lib.sync()  # nothing more to embed, nothing said twice
        assert again.embedded == 0 and again.keyword_only == [] and counting.texts == 5


def test_with_a_time_limit_the_add_returns_searchable_and_the_next_run_finishes(
    tmp_path: Path, embedder: Embedder  # noqa: F811
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(3):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nThe frobnicator number {i} needs oil.\n")
    with Library(tmp_path / "documents.sqlite3", embedder=embedder) as lib:
        first = lib.add([folder], vector_seconds=0.0)
        assert first.indexed == 3 and first.embedded == 0 and first.vectors_left == 3
        assert lib.search("frobnicator", top=3)  # by its words already
        second = lib.sync()
        assert second.embedded == 3 and second.vectors_left == 0
        assert lib.index.vector_coverage(embedder.name) == (3, 3)


def test_the_command_says_what_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from commands import docs
    from commands.main import main

    monkeypatch.setattr(docs, "VECTOR_SECONDS", 0.0)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nOne note.\n")
    assert main(["docs", "add", str(folder)]) == 0
    err = capsys.readouterr().err
    if "embedding model" in err and "not installed" in err:  # words alone: nothing is left
        pytest.skip("the embedding model's package is not installed")
    assert "vectors for 1 chunks are left for the next `specquant docs add` or `sync`" in err
