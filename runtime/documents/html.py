"""HTML to blocks through selectolax's lexbor parser (HTML5 parsing, as browsers do it; docs/documents.md
compares it with the standard library's html.parser). Headings become the blocks' heading trail.

Before lexbor sees a page, its nesting is estimated by a linear scan of its tags: lexbor's tree builder looks
down the stack of open elements at every start tag, so its time grows with tags x depth (20,000 nested divs
took 0.6 s, 40,000 took 4 s, a million never finished) and cannot be interrupted once started.
"""

from __future__ import annotations

import re

import numpy as np
from selectolax.lexbor import LexborHTMLParser

from runtime.documents.blocks import Block, ExtractError, Trail, text_blocks
from runtime.documents.decode import lines_of

_INVISIBLE = ["script", "style", "noscript", "template", "head", "svg", "math", "iframe", "object"]
_BLOCKS = (
    "p,div,li,dt,dd,pre,blockquote,tr,table,section,article,aside,header,footer,nav,main,figure,figcaption,"
    "caption,form,fieldset,details,summary,address,hr,br"
)
_HEADINGS = "h1,h2,h3,h4,h5,h6"
# Control characters that mark headings in the flattened text: they never occur in the text of a page.
_MARK, _SEP = "\x1e", "\x1f"
_HEADING_PIECE = re.compile(rf"H([1-6]){_SEP}(.*)", re.S)

# Browsers stop nesting at 512 (Chromium) and real pages stay under 100; the estimate errs high (an inline
# element left open counts as open for good), hence the margin.
HTML_MAX_DEPTH = 1024
# Start tags times the depth each opens at: lexbor's steps, about 3 ns each here; 3 x 10^8 is about a second. A
# 1.9 MB book of 100,000 tags at depth 15 needs 1.5 million.
HTML_MAX_WORK = 3 * 10**8
# Text that is not markup: comments, and the content of raw-text elements up to their end tag.
_NOT_MARKUP = re.compile(r"<!--|<(script|style|textarea|title|xmp|iframe|noembed|noframes|noscript)[\s/>]")
# Tags that never nest: void elements, elements whose end tag may be left out (a new <p>, <li> or <td> closes the
# last), doctypes and processing instructions. (Lower case: the page is lowered first, cheaper than re.I.)
_NEVER_NEST = re.compile(
    r"</?(?:area|base|br|col|embed|hr|img|input|keygen|link|meta|param|source|track|wbr|frame|"
    r"p|li|dt|dd|td|th|tr|thead|tbody|tfoot|option|optgroup|rb|rt|rp|rtc|colgroup|caption|html|head|body)"
    r"(?=[\s/>])[^<>]*>|<[!?][^<>]*>"
)
# A self-closed tag opens an element in HTML (`<div/>` is `<div>`), and none in SVG or MathML (`<path/>`).
_SELF_CLOSED = re.compile(r"<([a-z][^\s/<>]*)[^<>]*/>")
_HTML_NAMES = frozenset(
    {
        "a",
        "abbr",
        "address",
        "article",
        "aside",
        "audio",
        "b",
        "bdi",
        "bdo",
        "blockquote",
        "button",
        "canvas",
        "center",
        "cite",
        "code",
        "data",
        "datalist",
        "del",
        "details",
        "dfn",
        "dialog",
        "div",
        "dl",
        "em",
        "fieldset",
        "figcaption",
        "figure",
        "font",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hgroup",
        "i",
        "ins",
        "kbd",
        "label",
        "legend",
        "main",
        "map",
        "mark",
        "menu",
        "meter",
        "nav",
        "object",
        "ol",
        "output",
        "picture",
        "pre",
        "progress",
        "q",
        "s",
        "samp",
        "section",
        "select",
        "small",
        "span",
        "strong",
        "sub",
        "summary",
        "sup",
        "table",
        "template",
        "time",
        "u",
        "ul",
        "var",
        "video",
    }
)
_START = re.compile(r"<[a-z][^<>]*>")
_END = re.compile(r"</[a-z][^<>]*>")
_OTHER = re.compile(r"[^\x01\x02]+")


def check_nesting(html: str) -> None:
    """ExtractError when the page nests deeper than HTML_MAX_DEPTH or would cost lexbor more than HTML_MAX_WORK
    steps. An estimate in linear time, by regular expressions and numpy: each start tag of an element that can
    nest opens one, each end tag closes one (one too many is ignored, as a parser ignores it)."""
    if html.count("<") <= HTML_MAX_DEPTH:
        return  # too few tags to reach either limit (1,024 tags cost at most half a million steps)
    tags = _SELF_CLOSED.sub(_self_closed, _NEVER_NEST.sub("", _markup(html.lower())))
    marks = _OTHER.sub("", _END.sub("\x02", _START.sub("\x01", tags)))
    if len(marks) <= HTML_MAX_DEPTH:
        return
    steps = np.frombuffer(marks.encode("ascii"), np.uint8)
    opens = steps == 1
    level = np.cumsum(np.where(opens, 1, -1), dtype=np.int64)
    depth = level - np.minimum(np.minimum.accumulate(level), 0)  # a stray end tag below the root is ignored
    if int(depth.max()) > HTML_MAX_DEPTH:
        raise ExtractError(f"HTML nested more than {HTML_MAX_DEPTH:,} elements deep: not read")
    if int(depth[opens].sum()) > HTML_MAX_WORK:
        raise ExtractError("HTML with too many elements nested too deeply to read in reasonable time")


def _self_closed(m: re.Match[str]) -> str:
    return m.group(0) if m.group(1) in _HTML_NAMES else ""


def _markup(html: str) -> str:
    """The page without comments and raw text (scripts, styles, ...), with the marks below taken out of it."""
    html = html.replace("\x01", "").replace("\x02", "")
    pieces: list[str] = []
    pos = 0
    while m := _NOT_MARKUP.search(html, pos):
        pieces.append(html[pos : m.start()])
        if m.group(1) is None:  # a comment
            end = html.find("-->", m.end())
            end = end + 3 if end >= 0 else -1
        else:  # up to and with its end tag, which would otherwise close an element it never opened
            close = re.compile(rf"</{m.group(1)}[\s/>]").search(html, m.end())
            end = close.end() if close else -1
        if end < 0:  # open to the end: the rest is not markup
            return "".join(pieces)
        pos = end
    pieces.append(html[pos:])
    return "".join(pieces)


def html_blocks(html: str) -> list[Block]:
    """Paragraphs under their headings; scripts, styles and other invisible content dropped. No line numbers:
    a source line of HTML is not what a reader sees."""
    check_nesting(html)
    tree = LexborHTMLParser(html.replace(_MARK, " ").replace(_SEP, " "))
    tree.strip_tags(_INVISIBLE)
    # Mark the structure with text nodes, then let the parser flatten it (in C) in one call.
    for node in tree.css(_BLOCKS):
        node.insert_before("\n\n")
        node.insert_after("\n\n")
    for node in tree.css(_HEADINGS):
        node.insert_before(f"\n\n{_MARK}H{node.tag[1]}{_SEP}")
        node.insert_after(f"{_MARK}\n\n")
    root = tree.body or tree.root
    text = root.text(deep=True) if root is not None else ""
    trail = Trail()
    blocks: list[Block] = []
    for piece in text.split(_MARK):
        if m := _HEADING_PIECE.fullmatch(piece):
            trail.enter(int(m.group(1)), m.group(2))
            title = " ".join(m.group(2).split())
            if title:
                blocks.append(Block(title, trail.text))
        else:
            blocks += text_blocks(lines_of(piece), numbered=False, trail=trail)
    return blocks
