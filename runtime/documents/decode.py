"""Bytes to text the way editors open a file: a BOM or UTF-8 first (a few broken bytes replaced), then
charset-normalizer's guess, else UTF-8 with replacement characters. Only content that is not text is refused."""

from __future__ import annotations

import codecs

import charset_normalizer

from runtime.documents.blocks import ExtractError

# Longest first: the UTF-32 LE mark starts with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_SNIFF = 64 * 1024  # how much is looked at to call a file binary: enough for any header, quick for 100 MB
_NOT_TEXT_LIMIT = 0.10  # share of control or undecodable characters beyond which it is not a text file
_TEXT_CONTROLS = frozenset("\t\n\r\f\v\x1b")  # form feeds and ANSI colour codes appear in real text and logs


def decode(data: bytes) -> str:
    """The text of a file's bytes; ExtractError("binary file ...") for content that is not text."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    # UTF-16 without a BOM is refused with the binaries: no editor guesses it either.
    if b"\x00" in data[:_SNIFF]:
        raise ExtractError("binary file (NUL bytes), not text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        bad = text.count("\ufffd")
        good = sum(1 for ch in text if ch > "\x7f") - bad
        # Mostly UTF-8 with a few broken bytes (a bad paste, a cut-off file) stays UTF-8, as editors open it;
        # a legacy encoding (Latin-1, cp1251, Shift-JIS) has almost no valid multi-byte sequences.
        if bad > good:
            best = charset_normalizer.from_bytes(data).best()
            if best is not None:
                text = str(best)
    share = not_text_share(text[:_SNIFF])
    if share > _NOT_TEXT_LIMIT:
        raise ExtractError(f"binary file ({share:.0%} control or undecodable characters), not text")
    return text


def not_text_share(text: str) -> float:
    """The share of characters no text file has: C0/C1 controls (less tab, newlines, form feed, escape) and
    replacement characters from bytes that decoded as nothing."""
    if not text:
        return 0.0
    bad = sum(1 for ch in text if ch == "\ufffd" or ((ch < " " or "\x7f" <= ch <= "\x9f") and ch not in _TEXT_CONTROLS))
    return bad / len(text)


def lines_of(text: str) -> list[str]:
    """Lines as an editor numbers them: CRLF, CR and LF each end one (str.splitlines also splits on form feeds
    and Unicode separators, which editors do not count)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
