"""`specquant docs` (commands/docs.py): add, list, search, sync and remove as a user runs them, the JSON
shapes, and user errors as one line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error
from tests.doc_samples import pdf_bytes

# The command as the dispatcher will run it: through `specquant docs` once commands/main.py lists it, until then
# through the same parser class and error handling (commands.main.OneLineParser, runtime.errors.run_command).
_RUNNER = """
import sys
from commands import docs, main as dispatcher
from runtime.errors import run_command
if docs in dispatcher.COMMANDS:
    sys.exit(dispatcher.main(["docs", *sys.argv[1:]]))
parser = dispatcher.OneLineParser(prog="specquant docs")
docs.add_arguments(parser)
args = parser.parse_args(sys.argv[1:])
sys.exit(run_command("specquant", lambda: docs.main(args)))
"""


def docs(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    env = {**__import__("os").environ, "SPECQUANT_DATA_DIR": str(data)}
    return subprocess.run(
        [sys.executable, "-c", _RUNNER, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n\n## Boats\n\nA lighthouse keeper watches the boats.\n")
    (root / "manual.pdf").write_bytes(pdf_bytes([["Cover page."], ["The lighthouse lamp turns at night."]]))
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 8)
    return root


def test_add_list_search_sync_remove(tmp_path: Path, folder: Path) -> None:
    data = tmp_path / "data"
    added = docs("add", str(folder), "--collection", "manuals", data=data)
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("2 files indexed") and "1 could not be indexed" in added.stdout
    assert "broken.pdf" in added.stderr and "\r" not in added.stderr  # no progress line off a terminal

    listed = json.loads(docs("list", "--json", data=data).stdout)
    assert {tuple(sorted(f)) for f in listed} == {("chunks", "collection", "error", "note", "path", "state")}
    by_name = {Path(f["path"]).name: f for f in listed}
    assert by_name["broken.pdf"]["state"] == "error" and by_name["broken.pdf"]["error"]
    assert by_name["guide.md"] == {
        "path": str(folder / "guide.md"),
        "collection": "manuals",
        "state": "indexed",
        "chunks": 1,
        "error": None,
        "note": None,
    }

    found = docs("search", 'lighthouse ("AND" *', "--json", "--top", "2", data=data)
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert len(hits) == 2 and hits[0]["score"] >= hits[1]["score"] > 0
    pdf = next(h for h in hits if h["path"].endswith("manual.pdf"))
    md = next(h for h in hits if h["path"].endswith("guide.md"))
    assert pdf["page"] == 2 and "lines" not in pdf and "lamp" in pdf["text"]
    assert md["lines"] == [1, 5] and md["heading"] == "Guide > Boats" and "page" not in md

    text = docs("search", "lighthouse", data=data).stdout
    assert "manual.pdf p. 2" in text and "guide.md:1-5" in text

    (folder / "guide.md").unlink()
    assert "1 gone from disk" in docs("sync", data=data).stdout
    assert docs("remove", "--collection", "manuals", data=data).stdout.startswith("removed 2 files")
    assert json.loads(docs("list", "--json", data=data).stdout) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("add", "/no/such/path"), "no such file or folder"),
        (("search", "anything"), "no indexed text"),
        (("search", "   "), "give something to search for"),
        (("search", "x", "--collection", "missing"), "no collection named 'missing'"),
        (("remove",), "give a path or a collection"),
        (("add",), "the following arguments are required"),
    ],
)
def test_user_errors_are_one_line_exit_2(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(docs(*args, data=tmp_path / "data"), needle)


@pytest.mark.parametrize("top", ["99999999999999999999", "0", "-3"])
def test_search_top_out_of_range_is_one_line(tmp_path: Path, top: str) -> None:
    """--top 99999999999999999999 ended in an OverflowError traceback from SQLite (#52)."""
    result = docs("search", "lighthouse", "--top", top, data=tmp_path / "data")
    assert_one_line_error(result, f"top must be between 1 and 1,000, not {top}")


@pytest.mark.skipif(sys.platform == "win32", reason="Windows forbids newlines and ESC in file names")
def test_names_and_text_from_outside_reach_the_terminal_escaped(tmp_path: Path) -> None:
    """A file name with a newline forged a `docs list` line, and escape sequences in a name or in a document's
    text reached the terminal (#52): they are shown as escapes; JSON keeps them exact."""
    folder = tmp_path / "docs"
    folder.mkdir()
    forged = "evil\n[default] passwords.md  3 chunks\x1b]0;pwned\x07.md"
    (folder / forged).write_text("# Herons \x1b[2J\n\nThe heron waits.\x1b[31m Red.\x1b[0m\x9b1m\n")
    (folder / "bad\x1b[2J.pdf").write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 8)
    data = tmp_path / "data"
    added = docs("add", str(folder), data=data)
    assert added.returncode == 0, added.stderr
    listed = docs("list", data=data)
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 2  # one line per file: none forged
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert "evil\\n[default] passwords.md  3 chunks\\e]0;pwned\\x07.md" in listed.stdout
    assert "bad\\e[2J.pdf" in listed.stdout and "\x1b" not in added.stderr and "bad\\e[2J.pdf" in added.stderr
    found = docs("search", "heron", data=data)
    assert found.returncode == 0, found.stderr
    assert "\x1b" not in found.stdout and "\x9b" not in found.stdout
    assert "Herons \\e[2J" in found.stdout and "waits.\\e[31m Red.\\e[0m\\x9b1m" in found.stdout
    exact = json.loads(docs("list", "--json", data=data).stdout)
    assert {Path(f["path"]).name for f in exact} == {forged, "bad\x1b[2J.pdf"}
    (hit,) = json.loads(docs("search", "heron", "--json", data=data).stdout)
    assert "\x1b[31m" in hit["text"] and hit["heading"] == "Herons \x1b[2J"
    missing = docs("add", str(tmp_path / "gone\x1b[2J"), data=data)
    assert_one_line_error(missing, "no such file or folder", "gone\\e[2J")


def test_progress_is_one_redrawn_line_on_a_terminal_only() -> None:
    import io

    from commands.docs import ProgressLine
    from runtime.documents import IndexProgress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term, pipe = Terminal(), io.StringIO()
    for stream in (term, pipe):
        line = ProgressLine(stream)
        line(IndexProgress(0, 2, 0, 0, 10, "/a.md"))
        line(IndexProgress(2, 2, 7, 10, 10))
        line.end()
    assert pipe.getvalue() == ""
    drawn = term.getvalue()
    assert "\n" not in drawn and drawn.count("\r") == 4 and "2/2 files, 7 chunks" in drawn
    assert "[--------------------]   0% 0/2 files" in drawn and "[####################] 100% 2/2" in drawn


def test_the_vectors_stage_says_search_by_words_works_then_shows_chunks_embedded() -> None:
    import io

    from commands.docs import ProgressLine, progress_text
    from runtime.documents import IndexProgress
    from runtime.documents.library import VECTORS

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert progress_text(IndexProgress(0, 3, 16, 0, 0, "/a.md", VECTORS, 64)).startswith(
        "vectors [#####---------------]  25% 16/64 chunks  /a.md")
    term, pipe = Terminal(), io.StringIO()
    for stream in (term, pipe):
        line = ProgressLine(stream)
        line(IndexProgress(2, 2, 64, 10, 10))  # the words stage's last report
        line(IndexProgress(0, 2, 0, 0, 0, "/a.md", VECTORS, 64))
        line(IndexProgress(1, 2, 32, 0, 0, "/b.md", VECTORS, 64))
        line(IndexProgress(2, 2, 64, 0, 0, "", VECTORS, 64))
        line.end()
    note = "searchable by words now; computing vectors of 64 chunks"
    logged = pipe.getvalue().splitlines()  # off a terminal: the note, then the stage's end (no redrawing)
    assert len(logged) == 2 and logged[0].startswith(note) and logged[1].startswith("vectors [####")
    drawn = term.getvalue()  # the words' bar is cleared, the note stays on its own line, the vectors' bar follows
    assert drawn.count("\n") == 1 and note in drawn and "100% 64/64 chunks" in drawn


def test_the_bar_follows_bytes_not_files() -> None:
    from commands.docs import progress_text
    from runtime.documents import IndexProgress

    # One file of two done, but it was the small one: a quarter of the bytes, a quarter of the bar.
    assert progress_text(IndexProgress(1, 2, 3, 250, 1000, "b.pdf")).startswith("[#####---------------]  25% 1/2 files")
    assert progress_text(IndexProgress(1, 4, 0, 0, 0)).startswith("[#####---------------]  25% 1/4 files")  # no sizes


def test_search_notes_chunks_without_a_vector_of_the_model(tmp_path: Path, folder: Path) -> None:
    """#53: chunks indexed without vectors (a stopped add, another model, no model) are found by their words, and
    `docs search` says how many and what computes them."""
    from runtime.documents import Library

    data = tmp_path / "data"
    with Library(data / "documents.sqlite3") as lib:  # no embedding model: words alone
        lib.add([folder])
    found = docs("search", "lighthouse", data=data)
    assert found.returncode == 0 and "guide.md" in found.stdout, found.stderr
    assert "note: 3 of 3 chunks have no vector of all-minilm-l6-v2 yet" in found.stderr  # guide, 2 pages
    assert "`specquant docs sync` computes them" in found.stderr
