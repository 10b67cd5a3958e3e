"""PDF (pypdf) and DOCX (python-docx): their text as blocks. A password-protected PDF and a DOCX whose zip
declares more than it may expand to are refused before any text is read."""

from __future__ import annotations

import io
import logging
import zipfile

from runtime.documents.blocks import Block, ExtractError, Trail, text_blocks
from runtime.documents.decode import lines_of

# A DOCX is a zip: its declared sizes are what zipfile lets each member expand to (it stops at the declared size
# and fails the CRC past it), so checking them bounds what reading may allocate.
DOCX_MAX_UNCOMPRESSED = 512 * 1024 * 1024
DOCX_MAX_RATIO = 200  # a real document's XML compresses 5-20x; zip bombs reach 1000x
DOCX_MAX_MEMBERS = 10_000

# pypdf logs every repaired cross-reference and odd object as a warning: damage it reads past is not the
# user's concern, and a folder of old PDFs would bury the progress line in them.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def pdf_blocks(data: bytes) -> list[Block]:
    """Each page's paragraphs with its page number (1-based)."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):  # an owner password alone does not hide the text
            raise ExtractError("encrypted PDF: it needs a password")
        blocks: list[Block] = []
        for number, page in enumerate(reader.pages, 1):
            blocks += text_blocks(lines_of(page.extract_text() or ""), page=number, numbered=False)
    except DependencyError as e:
        raise ExtractError(f"encrypted PDF: {e}") from None
    except FileNotDecryptedError:
        raise ExtractError("encrypted PDF: it needs a password") from None
    except PdfReadError as e:
        raise ExtractError(f"damaged PDF: {e}") from None
    return blocks


def check_zip(data: bytes, what: str = "DOCX") -> None:
    """Refuse a zip whose members declare too much (a zip bomb) before anything is decompressed."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
    except zipfile.BadZipFile:
        raise ExtractError(f"not a {what} file: not a zip archive") from None
    declared = sum(i.file_size for i in infos)
    compressed = sum(i.compress_size for i in infos) or 1
    if len(infos) > DOCX_MAX_MEMBERS:
        raise ExtractError(f"{what} refused: {len(infos)} members in its zip (a zip bomb?)")
    if declared > DOCX_MAX_UNCOMPRESSED or (declared / compressed > DOCX_MAX_RATIO and declared > 10_000_000):
        raise ExtractError(
            f"{what} refused: its zip declares {declared / 1e6:.0f} MB uncompressed from "
            f"{compressed / 1e6:.1f} MB (a zip bomb?)"
        )


def docx_blocks(data: bytes) -> list[Block]:
    """Paragraphs under Heading/Title-styled paragraphs, and tables row by row, in document order."""
    check_zip(data)
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
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            rows = [" | ".join(c.text.strip() for c in row.cells) for row in item.rows]
            text = "\n".join(r for r in rows if r.strip(" |"))
            if text:
                blocks.append(Block(text, trail.text))
            continue
        text = item.text.strip()
        if not text:
            continue
        level = _heading_level(item.style.name if item.style is not None else "")
        if level:
            trail.enter(level, text)
        blocks.append(Block(text, trail.text))
    return blocks


def _heading_level(style: str) -> int:
    """Word's built-in heading styles: "Title" above "Heading 1".."Heading 9"; 0 for any other style."""
    if style == "Title":
        return 1
    name, _, number = style.partition(" ")
    return int(number) + 1 if name == "Heading" and number.isdigit() else 0
