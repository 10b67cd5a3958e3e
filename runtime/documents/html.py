"""HTML to blocks through selectolax's lexbor parser (HTML5 parsing, as browsers do it; docs/documents.md
compares it with the standard library's html.parser). Headings become the blocks' heading trail."""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser

from runtime.documents.blocks import Block, Trail, text_blocks
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


def html_blocks(html: str) -> list[Block]:
    """Paragraphs under their headings; scripts, styles and other invisible content dropped. No line numbers:
    a source line of HTML is not what a reader sees."""
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
