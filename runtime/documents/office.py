"""PDF (pypdf) and DOCX (python-docx): their text as blocks. A password-protected PDF, one of too many pages and
a DOCX whose zip declares or expands to more than it may are refused before their text is read."""

from __future__ import annotations

import io
import logging
import zipfile
from typing import Any

from runtime.documents.blocks import Block, ExtractError, Trail, text_blocks
from runtime.documents.budget import NO_DEADLINE, Deadline, file_memory_budget
from runtime.documents.decode import lines_of

# A DOCX's XML parts are decompressed here, in blocks, to at most the file's memory budget (budget.py: 300 MiB,
# less on a small machine) / XML_MEMORY_FACTOR bytes in all, whatever the zip's headers declare (zipfile asks
# zlib for up to 2 GB at once when a member is read whole: a 6 MB DOCX whose headers said 200 KB peaked at
# 2.2 GB). python-docx and lxml then take about 11 bytes a byte of XML (15 MiB of it: 176 MB), and the XML
# itself one more: 25 MiB of XML in 300 MiB. A 500-page report's document.xml is 5-20 MB.
XML_MEMORY_FACTOR = 12
DOCX_MAX_RATIO = 200  # per member: a real document's XML compresses 5-20x; zip bombs reach 1000x
DOCX_RATIO_FLOOR = 1024 * 1024  # members smaller than this may compress better (a part of repeated tags)
DOCX_MAX_MEMBERS = 10_000
_DOCX_BLOCK = 64 * 1024
_DOCX_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # Word writes no other; bzip2 and LZMA reads unbounded
# Pages read from one PDF: a 5,000-page manual (the largest real ones) fits; past it a PDF is refused, since
# pypdf's text of one page can take seconds and each page keeps its parsed objects (20,000 pages: 479 MB).
PDF_MAX_PAGES = 5000

# pypdf logs every repaired cross-reference and odd object as a warning: damage it reads past is not the
# user's concern, and a folder of old PDFs would bury the progress line in them.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def pdf_blocks(data: bytes, deadline: Deadline = NO_DEADLINE, max_pages: int = PDF_MAX_PAGES) -> list[Block]:
    """Each page's paragraphs with its page number (1-based). A page object the page tree lists again (a
    crafted PDF listed one page 20,000 times) is read once, at its first place; more than `max_pages` pages
    are refused."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):  # an owner password alone does not hide the text
            raise ExtractError("encrypted PDF: it needs a password")
        pages = reader.pages
        blocks: list[Block] = []
        seen: set[tuple[int, int]] = set()
        read = 0
        for number, page in enumerate(pages, 1):
            ref = page.indirect_reference
            if ref is not None:
                if (ref.idnum, ref.generation) in seen:
                    continue
                seen.add((ref.idnum, ref.generation))
            read += 1
            if read > max_pages:
                raise ExtractError(f"PDF refused: more than {max_pages:,} pages ({len(pages):,} listed)")
            deadline.check()
            blocks += text_blocks(lines_of(page.extract_text() or ""), page=number, numbered=False)
    except DependencyError as e:
        raise ExtractError(f"encrypted PDF: {e}") from None
    except FileNotDecryptedError:
        raise ExtractError("encrypted PDF: it needs a password") from None
    except PdfReadError as e:
        raise ExtractError(f"damaged PDF: {e}") from None
    return blocks


def max_xml_bytes(budget: int) -> int:
    """The XML one DOCX may decompress to within `budget` bytes of memory (budget.file_memory_budget)."""
    return budget // XML_MEMORY_FACTOR


def _over_budget(budget: int) -> str:
    return f"the {max_xml_bytes(budget) / 2**20:.0f} MiB of XML one file may take ({budget / 2**20:.0f} MiB of " \
        "memory on this machine)"


def check_zip(infos: list[zipfile.ZipInfo], what: str = "DOCX", budget: int | None = None) -> None:
    """Refuse a zip whose XML members declare too much (a zip bomb, or more than `budget` bytes of memory
    allow; None: this machine's file_memory_budget) before anything is decompressed: each member's declared
    size and ratio on its own (a stored member of padding pulls a zip-wide ratio down)."""
    budget = budget or file_memory_budget()
    if len(infos) > DOCX_MAX_MEMBERS:
        raise ExtractError(f"{what} refused: {len(infos):,} members in its zip (a zip bomb?)")
    for info in infos:
        if not _xml_part(info.filename):  # never decompressed (unpacked_docx leaves it empty)
            continue
        if info.compress_type not in _DOCX_METHODS:
            raise ExtractError(f"{what} refused: {info.filename} is compressed with method {info.compress_type}")
        ratio = info.file_size / max(info.compress_size, 1)
        if ratio > DOCX_MAX_RATIO and info.file_size > DOCX_RATIO_FLOOR:
            raise ExtractError(
                f"{what} refused: {info.filename} declares {info.file_size / 1e6:.0f} MB uncompressed from "
                f"{info.compress_size / 1e6:.1f} MB (a zip bomb?)"
            )
        if info.file_size > max_xml_bytes(budget):
            raise ExtractError(
                f"{what} refused: {info.filename} declares {info.file_size / 2**20:.0f} MiB, over "
                f"{_over_budget(budget)}"
            )


def _xml_part(name: str) -> bool:
    return name.lower().endswith((".xml", ".rels"))


def unpacked_docx(data: bytes, budget: int | None = None) -> bytes:
    """The DOCX's zip written again with its XML parts (`.xml`, `.rels`) decompressed in blocks, at most
    max_xml_bytes(budget) in all whatever the headers say (`budget`: the file's memory, None: this machine's
    file_memory_budget), and stored; other parts (images, fonts, embedded files: no text) are left empty.
    python-docx then reads nothing that was not counted."""
    budget = budget or file_memory_budget()
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
            check_zip(infos, budget=budget)
            out = io.BytesIO()
            left = max_xml_bytes(budget)
            with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as w:
                names: set[str] = set()
                for info in infos:
                    if info.is_dir() or info.filename in names:  # a name twice: the first one only
                        continue
                    names.add(info.filename)
                    if not _xml_part(info.filename):
                        w.writestr(info.filename, b"")
                        continue
                    parts: list[bytes] = []
                    with z.open(info) as member:
                        while block := member.read(_DOCX_BLOCK):
                            left -= len(block)
                            if left < 0:
                                raise ExtractError(f"DOCX refused: its XML expands past {_over_budget(budget)}")
                            parts.append(block)
                    w.writestr(info.filename, b"".join(parts))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as e:
        raise ExtractError(f"not a DOCX file or a damaged one: {e}") from None
    return out.getvalue()


def docx_blocks(data: bytes, deadline: Deadline = NO_DEADLINE) -> list[Block]:
    """Paragraphs under Heading/Title-styled paragraphs, and tables row by row, in document order."""
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ExtractError("not a DOCX file: not a zip archive")
    data = unpacked_docx(data)
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
    except PackageNotFoundError:
        raise ExtractError("not a DOCX file: no Word document in the zip") from None
    except (KeyError, zipfile.BadZipFile) as e:
        raise ExtractError(f"damaged DOCX: {e}") from None
    trail = Trail()
    blocks: list[Block] = []
    style_names = _paragraph_style_names(document)
    for item in document.iter_inner_content():
        deadline.check()
        if isinstance(item, Table):
            rows = [" | ".join(c.text.strip() for c in row.cells) for row in item.rows]
            text = "\n".join(r for r in rows if r.strip(" |"))
            if text:
                blocks.append(Block(text, trail.text))
            continue
        text = item.text.strip()
        if not text:
            continue
        # The style's id, read from the paragraph's XML (python-docx's `style` looks the style up anew for each
        # paragraph, scanning every style for the default: 8 ms a paragraph, minutes for a long report).
        level = _heading_level(style_names.get(item._p.style, style_names[None]))
        if level:
            trail.enter(level, text)
        blocks.append(Block(text, trail.text))
    return blocks


def _paragraph_style_names(document: Any) -> dict[str | None, str]:
    """Paragraph style id -> its name ("Heading 1"), and None -> the default paragraph style's name."""
    from docx.enum.style import WD_STYLE_TYPE

    styles = document.styles
    names: dict[str | None, str] = {
        style.style_id: style.name or "" for style in styles if style.type == WD_STYLE_TYPE.PARAGRAPH
    }
    default = styles.default(WD_STYLE_TYPE.PARAGRAPH)
    names[None] = default.name or "" if default is not None else ""
    return names


def _heading_level(style: str) -> int:
    """Word's built-in heading styles: "Title" above "Heading 1".."Heading 9"; 0 for any other style."""
    if style == "Title":
        return 1
    name, _, number = style.partition(" ")
    return int(number) + 1 if name == "Heading" and number.isdigit() else 0
