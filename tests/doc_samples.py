"""Real documents for the documents tests, written by each format's own library (a PDF's text page by hand:
pypdf writes pages but lays out no text)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

FRENCH = (
    "Le café du coin est fermé le lundi. Nous avons goûté une crème brûlée délicieuse près de la rivière.\n"
    "Il était une fois une princesse qui habitait dans un château. Elle aimait se promener dans la forêt, où elle\n"
    "rencontrait des élèves et des enseignants. À côté du château, il y avait un théâtre très fréquenté.\n"
)


def pdf_bytes(pages: list[list[str]], user_password: str | None = None, owner_password: str | None = None) -> bytes:
    """A PDF whose pages show these lines in Helvetica; encrypted (RC4-128, no extra package) when a password
    is given."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
            NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
        }
    )
    for lines in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        shown = " 0 -16 Td ".join(
            "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj" for line in lines
        )
        content = DecodedStreamObject()
        content.set_data(f"BT /F1 12 Tf 72 720 Td {shown} ET".encode("latin-1"))
        page.replace_contents(content)
    if user_password is not None or owner_password is not None:
        writer.encrypt(user_password or "", owner_password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def write_docx(path: Path) -> Path:
    """A Word document: a title, two headings, paragraphs and a table."""
    import docx

    document = docx.Document()
    document.add_heading("Field guide", level=0)
    document.add_heading("Herons", level=1)
    document.add_paragraph("The grey heron stands still in shallow water and waits for fish.")
    document.add_heading("Nesting", level=2)
    document.add_paragraph("Herons nest in colonies called heronries, high in old trees.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "bird", "wingspan"
    table.cell(1, 0).text, table.cell(1, 1).text = "heron", "185 cm"
    document.save(str(path))
    return path


def zip_bomb_docx(path: Path, megabytes: int = 64) -> Path:
    """A zip named .docx whose document part declares `megabytes` of zeros (about 1000:1)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        z.writestr("word/document.xml", b"\0" * (megabytes * 1024 * 1024))
    return path
