"""Code colouring: Pygments tokens as QTextCharFormats, in a light or a dark style to match the palette.

Lexing is cached by (code, language), so a finished block is lexed once however often the transcript
re-renders it; formats are cached by (token type, style).
"""

from __future__ import annotations

from functools import lru_cache

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.styles import get_style_by_name
from pygments.token import _TokenType
from pygments.util import ClassNotFound
from PySide6.QtGui import QColor, QFont, QTextCharFormat

LIGHT_STYLE = "default"
DARK_STYLE = "github-dark"
MIN_CONTRAST = 4.5  # WCAG AA for body text: token colours darker/lighter than this move towards the text colour


def style_for(background: QColor) -> str:
    """The Pygments style for a background: dark styles on dark backgrounds (lightness from the palette)."""
    return DARK_STYLE if background.lightnessF() < 0.5 else LIGHT_STYLE


@lru_cache(maxsize=64)
def _lexer(lang: str) -> Lexer:
    """The lexer for a fence's language tag; unknown or absent means plain text (guess_lexer misfires on
    short snippets, and a wrong colouring reads worse than none)."""
    options = {"stripnl": False, "ensurenl": False}  # the tokens join back to exactly the code
    if lang:
        try:
            return get_lexer_by_name(lang.lower(), **options)
        except ClassNotFound:
            pass
    return TextLexer(**options)


def language_label(lang: str) -> str:
    """What a block's header says: the lexer's name where Pygments knows the tag, else the tag, else "text"."""
    if not lang:
        return "text"
    lexer = _lexer(lang)
    return lang if isinstance(lexer, TextLexer) else lexer.name


@lru_cache(maxsize=128)
def tokens(code: str, lang: str) -> tuple[tuple[_TokenType, str], ...]:
    """(token type, text) pairs whose texts join to `code`."""
    return tuple(_lexer(lang).get_tokens(code))


def _luminance(c: QColor) -> float:
    def channel(v: float) -> float:
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in c.getRgbF()[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: QColor, b: QColor) -> float:
    """The WCAG contrast ratio of two colours (1 to 21)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def mix(a: QColor, b: QColor, t: float) -> QColor:
    """`a` moved the fraction `t` of the way towards `b`."""
    return QColor.fromRgbF(*(x + (y - x) * t for x, y in zip(a.getRgbF()[:3], b.getRgbF()[:3], strict=True)))


def _readable(colour: QColor, background: QColor, text: QColor) -> QColor:
    """`colour`, mixed towards the text colour just enough to keep MIN_CONTRAST on `background`."""
    for step in range(11):
        mixed = mix(colour, text, step / 10)
        if contrast(mixed, background) >= MIN_CONTRAST:
            return mixed
    return QColor(text)


@lru_cache(maxsize=1024)
def _format(token: _TokenType, style: str, background: str, text: str) -> QTextCharFormat:
    fmt = QTextCharFormat()
    spec = get_style_by_name(style).style_for_token(token)
    if spec["color"]:
        fmt.setForeground(_readable(QColor("#" + spec["color"]), QColor(background), QColor(text)))
    if spec["bold"]:
        fmt.setFontWeight(QFont.Weight.Bold)
    if spec["italic"]:
        fmt.setFontItalic(True)
    return fmt


def highlight(code: str, lang: str, background: QColor, text: QColor) -> list[tuple[str, QTextCharFormat]]:
    """`code` as (text, format) spans coloured for `background`; formats carry only what the style sets
    (colour, weight, italic), so the caller merges them over its monospace font."""
    style = style_for(background)
    return [(part, _format(tok, style, background.name(), text.name())) for tok, part in tokens(code, lang)]
