"""Hostile files in an added folder (#52): none may lead indexing out of the folder, hang it, or take the
memory or time of the machine. Each ends as one file's `error` with a one-line reason, and the rest of the
folder is indexed. The files are made here, small where the harm is in their shape (nesting, repetition,
what a zip's headers declare); where the harm is memory, a child process reports its own peak."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from runtime.documents.blocks import ExtractError
from runtime.documents.budget import Deadline
from runtime.documents.extract import extract
from runtime.documents.library import Library
from runtime.documents.office import pdf_blocks
from runtime.documents.reading import read_found
from runtime.documents.walk import Found, Passed, walk
from tests.conftest import REPO
from tests.doc_samples import pdf_bytes

needs_posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and O_NOFOLLOW are POSIX")


def _states(lib: Library) -> dict[str, tuple[str, str | None]]:
    return {Path(f.path).name: (f.state, f.error) for f in lib.list_files()}


def _swap_before_read(lib: Library, folder: Path, name: str, swap) -> threading.Thread:
    """`lib.add(folder)` on a thread, with `swap(path)` run between the walk and the read of `name`: the
    progress callback is called before each file is read, as a user's file manager could act then."""

    def progress(p) -> None:
        if Path(p.path).name == name and (folder / name).is_file() and not (folder / name).is_symlink():
            swap(folder / name)

    thread = threading.Thread(target=lambda: lib.add([folder], progress=progress), daemon=True)
    thread.start()
    return thread


@needs_posix
def test_a_file_swapped_for_a_link_after_the_walk_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the launch code is walrus-tangerine\n")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("an ordinary note about otters\n")
    (folder / "b.txt").write_text("another note about herons\n")

    def to_link(path: Path) -> None:
        path.unlink()
        path.symlink_to(secret)

    with Library(tmp_path / "index.sqlite3") as lib:
        thread = _swap_before_read(lib, folder, "a.txt", to_link)
        thread.join(30)
        assert not thread.is_alive()
        assert (folder / "a.txt").is_symlink()  # the swap happened
        state, reason = _states(lib)["a.txt"]
        assert state == "error" and reason is not None and "link" in reason and "\n" not in reason
        assert _states(lib)["b.txt"] == ("indexed", None)  # the rest of the folder goes on
        assert all("walrus" not in hit.text for hit in lib.search("otters herons walrus tangerine", top=10))


@needs_posix
def test_a_folder_swapped_for_a_link_after_the_walk_is_not_read(tmp_path: Path) -> None:
    """O_NOFOLLOW guards the last name only; the (device, inode) the walk saw guards the folders above it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "plan.txt").write_text("the vault opens with marmalade\n")
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "plan.txt").write_text("a harmless plan about gardening\n")
    found = [item for item in walk(str(folder), Passed()) if isinstance(item, Found)]
    assert [Path(f.path).name for f in found] == ["plan.txt"]
    (folder / "sub" / "plan.txt").unlink()
    (folder / "sub").rmdir()
    (folder / "sub").symlink_to(outside)
    with pytest.raises(ExtractError, match="replaced by another file"):
        read_found(found[0].path, found[0].identity, 10**6)


@needs_posix
def test_a_fifo_swapped_in_after_the_walk_does_not_hang(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("a note that becomes a pipe\n")
    (folder / "b.txt").write_text("a note about kingfishers\n")

    def to_fifo(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)

    with Library(tmp_path / "index.sqlite3") as lib:
        thread = _swap_before_read(lib, folder, "a.txt", to_fifo)
        thread.join(20)
        hung = thread.is_alive()
        if hung:  # before the fix open() waits for a writer: be one, so the thread can end
            fd = os.open(folder / "a.txt", os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
            thread.join(10)
        assert not hung, "indexing blocked on a FIFO"
        state, reason = _states(lib)["a.txt"]
        assert state == "error" and reason is not None and "pipe" in reason
        assert _states(lib)["b.txt"] == ("indexed", None)


@needs_posix
def test_reading_checks_the_open_file_not_the_name(tmp_path: Path) -> None:
    """The walk's record, then the name replaced: by a FIFO (no wait), by a link (not followed), by another
    file (a new inode); the walk's own file reads as before."""
    (tmp_path / "folder").mkdir()
    path = tmp_path / "folder" / "a.txt"
    path.write_text("first\n")
    os.link(path, tmp_path / "kept.txt")  # its inode stays taken, so the last file below cannot reuse it
    (found,) = [item for item in walk(str(tmp_path / "folder"), Passed()) if isinstance(item, Found)]
    assert read_found(found.path, found.identity, 100).data == b"first\n"
    path.unlink()
    os.mkfifo(path)
    started = time.monotonic()
    with pytest.raises(ExtractError, match="pipe"):
        read_found(found.path, found.identity, 100)
    assert time.monotonic() - started < 5
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text("elsewhere\n")
    with pytest.raises(ExtractError, match="became a link"):
        read_found(found.path, found.identity, 100)
    path.unlink()
    path.write_text("second\n")
    with pytest.raises(ExtractError, match="replaced by another file"):
        read_found(found.path, found.identity, 100)


# Memory: a child process extracts one file and prints its peak resident size above what it had before.
_PEAK = """
import resource, sys
from runtime.documents.extract import extract
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    result = len(extract(data, sys.argv[2], sys.argv[1]).chunks)
except Exception as e:
    result = f"{type(e).__name__}: {e}"
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((peak - before) * (1 if sys.platform == "darwin" else 1024), result, sep="\\n")
"""
_AS_LIMIT = 2 * 2**30  # the child's address space: a regression fails the test instead of filling the machine


def _peak(path: Path, fmt: str) -> tuple[int, str]:
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (_AS_LIMIT, _AS_LIMIT))

    run = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path), fmt],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        preexec_fn=limit if sys.platform.startswith("linux") else None,
    )
    assert run.returncode == 0, run.stderr
    grown, result = run.stdout.splitlines()[:2]
    return int(grown), result


@pytest.mark.skipif(sys.platform == "win32", reason="resource is POSIX")
def test_a_large_python_file_does_not_go_through_ast(tmp_path: Path) -> None:
    """1 MB of `x=1` lines: `ast` would build about 600 MB of tree for it (8 MB reached 4.9 GB)."""
    path = tmp_path / "generated.py"
    path.write_bytes(b"x=1\n" * 250_000)
    grown, chunks = _peak(path, "python")
    assert int(chunks) > 100  # still indexed, at blank-line boundaries like other code
    assert grown < 150 * 2**20, f"grew {grown / 2**20:.0f} MB"


def _zip(members: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip written by hand, so its headers can say what they like: (name, data as stored, method, declared
    uncompressed size, declared CRC-32) per member."""
    out, central = bytearray(), bytearray()
    for name, data, method, size, crc in members:
        raw = name.encode()
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(data), size, len(raw), 0)
        out += raw + data
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, len(data), size, len(raw), 0, 0, 0, 0, 0,
            offset,
        )  # fmt: skip
        central += raw
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), len(out), 0)
    return bytes(out + central + end)


def _deflated_zeros(n: int) -> bytes:
    """Raw deflate of n zero bytes, made a block at a time (never n bytes in memory)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = bytes(2**20)
    parts = [packer.compress(block) for _ in range(n // len(block))]
    return b"".join([*parts, packer.compress(bytes(n % len(block))), packer.flush()])


_TYPES = (
    b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    b'<Override PartName="/word/document.xml" '
    b'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
# The package's relationships: python-docx reads the document part they point to.
_RELS = (
    b'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Target="word/document.xml" '
    b'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"/></Relationships>'
)


def _stored(name: str, data: bytes) -> tuple[str, bytes, int, int, int]:
    return name, data, 0, len(data), zlib.crc32(data)


@pytest.mark.skipif(sys.platform == "win32", reason="resource is POSIX")
def test_a_docx_whose_headers_understate_is_decompressed_within_a_budget(tmp_path: Path) -> None:
    """The document part declares 200 KB and holds 300 MB of zeros: zipfile asked zlib for everything at once
    (a 6 MB DOCX of this kind peaked at 2.2 GB); read in blocks, what is read stops at what was declared."""
    declared = 200_000
    bomb = _deflated_zeros(300 * 2**20)
    path = tmp_path / "liar.docx"
    path.write_bytes(
        _zip(
            [
                _stored("[Content_Types].xml", _TYPES),
                _stored("_rels/.rels", _RELS),
                ("word/document.xml", bomb, 8, declared, zlib.crc32(bytes(declared))),
            ]
        )
    )
    grown, result = _peak(path, "docx")
    assert grown < 150 * 2**20, f"grew {grown / 2**20:.0f} MB ({result})"
    assert result.startswith("ExtractError") and "\n" not in result


def test_a_docx_bomb_behind_stored_padding_is_refused(tmp_path: Path) -> None:
    """One member expands 1000:1 while a stored member of noise keeps the whole zip's ratio near 10:1: each
    member's own ratio is checked."""
    noise = os.urandom(2 * 2**20)
    zeros = 24 * 2**20
    data = _zip(
        [
            _stored("[Content_Types].xml", _TYPES),
            _stored("_rels/.rels", _RELS),
            _stored("word/media/padding.bin", noise),
            ("word/document.xml", _deflated_zeros(zeros), 8, zeros, zlib.crc32(bytes(zeros))),
        ]
    )
    with pytest.raises(ExtractError, match=r"word/document\.xml declares 25 MB .*zip bomb"):
        extract(data, "docx", "padded.docx")


def test_one_files_memory_budget_is_a_few_hundred_mb_at_most_and_less_on_a_small_machine() -> None:
    from runtime.documents.budget import FILE_MEMORY_MAX, FILE_MEMORY_MIN, file_memory_budget

    gib = 2**30
    assert FILE_MEMORY_MAX <= 300 * 2**20 and file_memory_budget() <= FILE_MEMORY_MAX  # this machine's
    assert [file_memory_budget(n * gib) // 2**20 for n in (2, 4, 8, 16, 64)] == [64, 128, 256, 300, 300]
    assert file_memory_budget(512 * 2**20) == FILE_MEMORY_MIN


def _xml_part(name: str, xml_bytes: int) -> tuple[str, bytes, int, int, int]:
    """A deflated zip member of about `xml_bytes` of WordprocessingML paragraphs of varied words: it compresses
    as text does, well under the bomb ratio, and declares its true size."""
    words = [f"word{i % 9973}" for i in range(xml_bytes // 12)]
    body = "".join(f"<w:p><w:r><w:t>{' '.join(words[i:i + 12])}</w:t></w:r></w:p>" for i in range(0, len(words), 12))
    xml = ('<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/'
           f'main"><w:body>{body}</w:body></w:document>').encode()
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    return name, packer.compress(xml) + packer.flush(), 8, len(xml), zlib.crc32(xml)


def _docx(*parts: tuple[str, bytes, int, int, int]) -> bytes:
    return _zip([_stored("[Content_Types].xml", _TYPES), _stored("_rels/.rels", _RELS), *parts])


def test_a_docx_past_a_small_machines_memory_budget_is_refused_and_its_reason_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#53: 7-8 MiB of real XML fits the 300 MiB budget of a large machine, not the 64 MiB of a 2 GB one (5 MiB
    of XML): refused from what a part declares, or from what its parts expand to together, counted in blocks
    as they are decompressed (never more than the budget's XML in memory)."""
    from runtime.documents import budget
    from runtime.documents.office import unpacked_docx

    honest = _docx(_xml_part("word/document.xml", 8 * 2**20))
    half = 7 * 2**19  # 3.5 MiB: each part fits, together they do not
    halves = _docx(_xml_part("word/document.xml", half), _xml_part("word/header1.xml", half))
    assert len(unpacked_docx(honest, budget=300 * 2**20)) > 7 * 2**20
    said = "of XML one file may take (64 MiB of memory on this machine)"
    with pytest.raises(ExtractError, match=r"word/document\.xml declares [78] MiB, over the 5 MiB " + re.escape(said)):
        unpacked_docx(honest, budget=64 * 2**20)
    with pytest.raises(ExtractError, match=r"its XML expands past the 5 MiB " + re.escape(said)):
        unpacked_docx(halves, budget=64 * 2**20)

    monkeypatch.setattr(budget, "_total_ram", lambda: 2 * 2**30)  # a 2 GB machine: its file's row says why
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "report.docx").write_bytes(honest)
    with Library(tmp_path / "documents.sqlite3") as lib:
        (path, reason), = lib.add([tmp_path / "notes"]).errors
        assert path.endswith("report.docx") and reason.endswith(said) and "\n" not in reason
        assert [(f.state, f.error) for f in lib.list_files()] == [("error", reason)]


def test_a_long_markdown_heading_line_is_linear() -> None:
    """A heading pattern with the title between two optional runs of spaces backtracked quadratically: one
    line of 16k spaces took 4.5 s."""
    line = "# a" + " " * 40_000 + "b"
    started = time.monotonic()
    (chunk, *_) = extract(f"{line}\n\ntext\n".encode(), "markdown", "long.md").chunks
    assert time.monotonic() - started < 1.0
    assert chunk.heading is not None and chunk.heading.startswith("a") and chunk.heading.endswith("b")


def test_a_long_line_without_spaces_is_cut_in_linear_time() -> None:
    """A 16 MB line without spaces took 22 s: each cut copied the rest of the line."""
    data = b"x" * (8 * 2**20)
    started = time.monotonic()
    chunks = extract(data, "text", "minified.txt").chunks
    assert time.monotonic() - started < 5.0
    assert sum(len(c.text) for c in chunks) == len(data)


def test_deeply_nested_html_is_refused_before_parsing() -> None:
    """lexbor's time grows with tags x depth (40,000 nested divs: 4 s; a million never finished)."""
    started = time.monotonic()
    with pytest.raises(ExtractError, match="nested more than"):
        extract(("<div>" * 200_000 + "deep" + "</div>" * 200_000).encode(), "html", "deep.html")
    with pytest.raises(ExtractError, match="nested"):
        extract(("<div>" * 1000 + "<div>x</div>" * 300_000).encode(), "html", "wide.html")
    assert time.monotonic() - started < 10.0


def test_sloppy_but_real_html_is_still_read() -> None:
    """Thousands of unclosed <p>, <li>, <td> and <tr>, self-closed SVG paths, void elements and markup in
    scripts do not count as nesting."""
    section = (
        "<div class=s><h2>Part {i}</h2><p>Some <b>bold</b> text<p>More text<ul><li>one<li>two</ul>"
        "<table><tr><td>1<td>2<tr><td>3</table><svg><path d='M0'/><circle r=1/></svg>"
        "<script>if (a<b) s = '<div><div>'</script><!-- <div> --><br><img src=x.png></div>"
    )
    html = "<html><body>" + "".join(section.format(i=i) for i in range(3000)) + "</body></html>"
    chunks = extract(html.encode(), "html", "manual.html").chunks
    assert any(c.heading == "Part 2999" for c in chunks)


def _pdf_listing_one_page(times: int) -> bytes:
    """A PDF whose page tree lists the same page object `times` times (written by hand, with its xref)."""
    content = b"BT /F1 12 Tf 72 720 Td (The only page, about puffins.) Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + b"3 0 R " * times + b"] /Count %d >>" % times,
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_a_pdf_listing_one_page_many_times_reads_it_once() -> None:
    """20,000 listings of one page gave 20,000 chunks in 134 s and 479 MB."""
    started = time.monotonic()
    chunks = extract(_pdf_listing_one_page(3000), "pdf", "echo.pdf").chunks
    assert time.monotonic() - started < 10.0
    assert len(chunks) == 1 and "puffins" in chunks[0].text and chunks[0].page == 1


def test_a_pdf_over_the_page_limit_is_refused() -> None:
    data = pdf_bytes([[f"Page {n} about gannets."] for n in range(1, 5)])
    assert len(pdf_blocks(data, max_pages=4)) == 4
    with pytest.raises(ExtractError, match=r"more than 3 pages \(4 listed\)"):
        pdf_blocks(data, max_pages=3)


def test_a_file_over_the_time_budget_gets_a_reason_and_the_folder_goes_on(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "long.pdf").write_bytes(pdf_bytes([[f"Page {n} about terns."] for n in range(1, 40)]))
    (folder / "short.txt").write_text("a note about cormorants\n")
    with pytest.raises(ExtractError, match="took longer than the 0 s allowed"):
        extract((folder / "long.pdf").read_bytes(), "pdf", "long.pdf", Deadline(0))
    with Library(tmp_path / "index.sqlite3", max_file_seconds=0) as lib:
        result = lib.add([folder])
        assert {Path(p).name for p, _ in result.errors} == {"long.pdf", "short.txt"}
        assert _states(lib)["long.pdf"] == ("error", "took longer than the 0 s allowed to read one file")
    with Library(tmp_path / "index.sqlite3") as lib:  # a file is tried again once it changes; so is a new budget
        (folder / "short.txt").write_text("a note about cormorants, changed\n")
        lib.sync()
        assert _states(lib)["short.txt"] == ("indexed", None)


@needs_posix
def test_a_file_left_pending_is_read_only_inside_its_added_folder(tmp_path: Path) -> None:
    """A file left pending (a cancel, a kill) is finished by the next add of any collection, which did not walk
    it: its folder swapped for a link out of the added folder meanwhile, it is not read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "plan.txt").write_text("the vault opens with marmalade\n")
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "plan.txt").write_text("a harmless plan about gardening\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "c.txt").write_text("a note about grebes\n")
    cancel = threading.Event()
    with Library(tmp_path / "index.sqlite3") as lib:
        assert lib.add([folder], "notes", progress=lambda p: cancel.set(), cancel=cancel).cancelled
        assert _states(lib)["plan.txt"][0] == "pending"
    (folder / "sub" / "plan.txt").unlink()
    (folder / "sub").rmdir()
    (folder / "sub").symlink_to(outside)
    with Library(tmp_path / "index.sqlite3") as lib:
        lib.add([other], "other")
        assert _states(lib)["plan.txt"] == ("error", "it now leads outside the added folders: not read")
        assert _states(lib)["c.txt"] == ("indexed", None)
        assert all("marmalade" not in hit.text for hit in lib.search("grebes marmalade"))
