"""Text from outside (file names, document text, tool names and results) made safe to print on a terminal.

A terminal acts on control characters: ESC starts a sequence that can clear the screen, set the window title
or move the cursor, a carriage return overwrites what the line showed, and a newline in a file name forges a
line of its own. `visible` replaces each one with a readable escape, so what is shown is what is there.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

# C0 controls, DEL, the C1 controls (0x80-0x9f: 0x9b is a one-byte CSI on many terminals), and the
# bidirectional overrides and isolates that can make a name read as another (Trojan Source).
_BIDI = {0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069, 0x200E, 0x200F}
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _unsafe(ch: str, keep: str) -> bool:
    if ch in keep:
        return False
    code = ord(ch)
    return code < 0x20 or 0x7F <= code <= 0x9F or code in _BIDI or unicodedata.category(ch) == "Cs"


def visible(text: str, keep: str = "") -> str:
    """`text` with every control character (except those in `keep`, e.g. "\\n" for a multi-line result)
    shown as an escape: ESC as \\e, a newline as \\n, others as \\xNN or \\uNNNN."""
    if all(not _unsafe(ch, keep) for ch in text):  # the common case costs one pass and no copy
        return text
    return "".join(_escape(ch) if _unsafe(ch, keep) else ch for ch in text)


def visible_lines(text: str) -> str:
    """Multi-line text (a tool's result, a passage) with its line breaks and tabs kept, everything else
    that a terminal would act on made visible."""
    return visible(text, keep="\n\t")


# What json.dumps(ensure_ascii=False) leaves raw and a terminal acts on: the C1 controls and the bidirectional
# overrides (C0 controls and DEL it escapes itself).
_JSON_RAW = re.compile("[\x7f-\x9f" + "".join(map(chr, sorted(_BIDI))) + "]")


def terminal_json(value: Any) -> str:
    """`value` as indented JSON for a terminal: non-ASCII text kept readable, every control character escaped
    (\\uNNNN, so the JSON reads back the same)."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
