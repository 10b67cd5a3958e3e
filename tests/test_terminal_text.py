"""Text from outside reaches a terminal with its control characters shown, never obeyed (#52)."""

from __future__ import annotations

import json

from runtime.terminal_text import terminal_json, visible, visible_lines

CLEAR, TITLE, CSI_C1, RLO = "\x1b[2J", "\x1b]0;pwned\x07", "\x9b2J", "\u202e"


def test_every_control_character_is_shown_as_an_escape() -> None:
    shown = visible(f"a{CLEAR}b{TITLE}c{CSI_C1}d{RLO}e\nf\r")
    assert shown == "a\\e[2Jb\\e]0;pwned\\x07c\\x9b2Jd\\u202ee\\nf\\r"
    assert visible("plain text, é ü 漢字") == "plain text, é ü 漢字"  # nothing to do: the same text


def test_multi_line_text_keeps_its_lines_and_tabs() -> None:
    assert visible_lines(f"one\n\ttwo{CLEAR}") == "one\n\ttwo\\e[2J"


def test_json_for_a_terminal_reads_back_the_same_and_carries_no_raw_control() -> None:
    value = {"result": f"x{CLEAR}{CSI_C1}{RLO}é", "calls": [{"tool": f"add{TITLE}"}]}
    text = terminal_json(value)
    assert json.loads(text) == value and "é" in text
    assert not any(ch in text for ch in ("\x1b", "\x07", "\x9b", RLO))
