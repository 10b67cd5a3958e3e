"""Extraction and chunking (runtime/documents): each format from a real file made by its own library, the
structure each chunk keeps (page, lines, heading), and bad input refused with a one-line reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.documents.chunk import MAX_TOKENS, token_estimate
from runtime.documents.decode import decode
from runtime.documents.extract import ExtractError, detect_format, extract
from tests.doc_samples import FRENCH, pdf_bytes, write_docx, zip_bomb_docx


def _chunks(data: bytes, fmt: str, name: str = "f"):
    return extract(data, fmt, name).chunks


def test_plain_text_paragraphs_keep_their_lines() -> None:
    text = "first paragraph\nstill first\n\n\nsecond paragraph\n"
    (chunk,) = _chunks(text.encode(), "text")
    assert (chunk.first_line, chunk.last_line) == (1, 5)
    assert "first paragraph" in chunk.text and "second paragraph" in chunk.text
    assert chunk.page is None and chunk.heading is None


def test_markdown_chunks_follow_headings_and_keep_fences_whole() -> None:
    intro = "An introduction long enough to stand as a section of its own, not a lead-in. " * 3
    md = (
        f"# Guide\n\n{intro}\n\n## Install\n\nRun the installer.\n\n```sh\n# not a heading\n\nmake\n```\n\n"
        "Setext title\n------------\n\nUnder setext.\n"
    )
    chunks = _chunks(md.encode(), "markdown")
    by_heading = {c.heading: c for c in chunks}
    assert set(by_heading) == {"Guide", "Guide > Install", "Guide > Setext title"}
    install = by_heading["Guide > Install"]
    assert "# not a heading" in install.text and "make" in install.text
    assert (install.first_line, install.last_line) == (5, 13)
    assert by_heading["Guide > Setext title"].first_line == 15


def test_a_title_alone_joins_the_section_under_it() -> None:
    (chunk,) = _chunks(b"# Guide\n\n## Boats\n\nA lighthouse keeper watches the boats.\n", "markdown")
    assert chunk.heading == "Guide > Boats" and (chunk.first_line, chunk.last_line) == (1, 5)
    assert chunk.text.startswith("# Guide")


def test_rst_titles_rank_by_first_appearance() -> None:
    intro = "An introduction long enough to stand as a section of its own, not a lead-in. " * 3
    rst = f"=====\nTitle\n=====\n\n{intro}\n\nUsage\n-----\n\n{intro}\n\nMore\n----\n\nAgain.\n"
    chunks = _chunks(rst.encode(), "rst")
    assert [c.heading for c in chunks] == ["Title", "Title > Usage", "Title > More"]
    assert chunks[1].first_line == 7


def test_html_headings_and_invisible_content() -> None:
    html = (
        "<html><head><title>T</title><style>p{color:red}</style></head><body>"
        "<h1>Birds</h1><p>All about <b>birds</b>.</p><script>var secret = 'hidden';</script>"
        "<h2>Herons</h2><p>Herons wade.</p><ul><li>grey</li><li>purple</li></ul></body></html>"
    )
    chunks = _chunks(html.encode(), "html")
    text = "\n".join(c.text for c in chunks)
    assert "secret" not in text and "color" not in text
    herons = [c for c in chunks if c.heading == "Birds > Herons"]
    assert herons and "Herons wade." in herons[0].text and "purple" in herons[0].text
    assert all(c.first_line is None for c in chunks)


def test_pdf_pages_are_kept_one_based() -> None:
    data = pdf_bytes([["Alpha page talks about lighthouses."], ["Beta page is about harbours.", "Second line."]])
    chunks = _chunks(data, "pdf")
    assert [c.page for c in chunks] == [1, 2]
    assert "lighthouses" in chunks[0].text and "harbours" in chunks[1].text


def test_pdf_with_only_an_owner_password_is_read() -> None:
    data = pdf_bytes([["Open to read, locked to edit."]], owner_password="owner")
    assert "locked to edit" in _chunks(data, "pdf")[0].text


def test_docx_headings_paragraphs_and_tables(tmp_path: Path) -> None:
    chunks = _chunks(write_docx(tmp_path / "guide.docx").read_bytes(), "docx")
    nest = [c for c in chunks if c.heading == "Field guide > Herons > Nesting"]
    assert nest and "heronries" in nest[0].text and "heron | 185 cm" in nest[0].text
    assert "grey heron" in nest[0].text  # a one-line section is a lead-in to its subsection


def test_python_splits_at_definitions() -> None:
    src = "import os\n\n\n@decorator\ndef alpha():\n    return 1\n\n\nclass Beta:\n    x = 1\n"
    (chunk,) = _chunks(src.encode(), "python", "m.py")  # small: joined into one chunk naming both
    assert chunk.heading == "alpha, Beta" and (chunk.first_line, chunk.last_line) == (1, 10)
    big = "".join(f"def f{i}():\n" + "    value = 'some text to make this longer'\n" * 30 + "\n" for i in range(4))
    chunks = _chunks(big.encode(), "python", "m.py")
    assert [c.heading for c in chunks] == ["f0", "f1", "f2", "f3"]
    assert chunks[1].first_line == 33


def test_other_code_is_named_by_pygments() -> None:
    body = '    printf("%d\\n", x);\n' * 60
    src = f"#include <stdio.h>\n\nint first(int x) {{\n{body}}}\n\nstatic void second(void) {{\n{body}}}\n"
    chunks = _chunks(src.encode(), "code", "m.c")
    assert "first" in (chunks[0].heading or "")
    assert any(c.heading == "second" for c in chunks)
    assert detect_format("main.rs") == "code" and detect_format("photo.png") is None
    assert detect_format("notes", named=True) == "text"


def test_chunks_stay_within_the_token_budget_and_cover_every_line() -> None:
    words = " ".join(f"word{i}" for i in range(60))
    text = "\n".join(words for _ in range(80)) + "\n" + "x" * 5000  # one long paragraph, then one huge line
    chunks = _chunks(text.encode(), "text")
    assert len(chunks) > 5
    assert all(token_estimate(c.text) <= MAX_TOKENS for c in chunks)
    assert chunks[0].first_line == 1 and chunks[-1].last_line == 81
    covered = sorted({n for c in chunks for n in range(c.first_line, c.last_line + 1)})
    assert covered == list(range(1, 82))


def test_legacy_encodings_are_decoded_not_refused() -> None:
    assert "café" in decode(FRENCH.encode("cp1252"))
    russian = "Привет, как дела? Это текст на русском языке, записанный в кодировке Windows-1251."
    assert decode(russian.encode("cp1251")) == russian
    assert decode("ünïcode".encode("utf-16")) == "ünïcode"  # BOM
    broken = ("naïve " * 20).encode() + b"\xff" + b" end"  # UTF-8 with one bad byte: replaced, not guessed
    assert decode(broken).startswith("naïve naïve") and "\ufffd" in decode(broken)


@pytest.mark.parametrize(
    ("data", "fmt", "reason"),
    [
        (b"PK\x03\x04" + b"\x00\x01\x02" * 100, "text", "binary file"),
        (bytes(range(1, 32)) * 200, "text", "binary file"),
        (pdf_bytes([["secret"]], user_password="pw"), "pdf", "encrypted PDF: it needs a password"),
        (b"%PDF-1.7\n" + bytes(range(256)) * 20, "pdf", "PDF"),
        (b"not a zip at all", "docx", "not a DOCX file"),
    ],
    ids=["nul-bytes", "control-bytes", "encrypted-pdf", "corrupt-pdf", "docx-not-zip"],
)
def test_bad_input_is_one_line_reason(data: bytes, fmt: str, reason: str) -> None:
    with pytest.raises(ExtractError) as e:
        extract(data, fmt, "f")
    assert reason in str(e.value) and "\n" not in str(e.value)


def test_random_bytes_named_txt_are_refused() -> None:
    noise = bytes(b for b in os.urandom(30_000) if b)  # no NUL: the share of non-text decides
    with pytest.raises(ExtractError, match="binary file"):
        extract(noise, "text", "noise.txt")


def test_docx_zip_bomb_is_refused_before_reading(tmp_path: Path) -> None:
    bomb = zip_bomb_docx(tmp_path / "bomb.docx").read_bytes()
    assert len(bomb) < 1_000_000
    with pytest.raises(ExtractError, match="zip bomb"):
        extract(bomb, "docx", "bomb.docx")
