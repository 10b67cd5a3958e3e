"""Text as written (#51): the transcript keeps the model's line breaks, lists and code as it wrote them; Markdown
is rendered, plain lines are not run together."""

from __future__ import annotations

from app.stored_messages import StoredMessage
from app.transcript import TranscriptView
from app.transcript_text import LINE_BREAK, keep_line_breaks
from tests.test_app_transcript import tinted_runs

POEM = "Roses are red,\nViolets are blue,\nSugar is sweet,\nAnd so are you."
LIST = "Shopping:\n- eggs\n- milk,\n  the full-fat kind\n1. first\n2. second"
CODE = "Run this:\n```python\ndef f(x):\n\n    return x  # kept\n```\nThen:\nline one\nline two"
MIXED = "# Notes\nDear Ann,\nsee **below**:\n\n> a quote\n> on two lines\n\n| a | b |\n|---|---|\n| 1 | 2 |\nBye\nBob"


def view_of(qtbot, text: str, role: str = "assistant", highlight: bool = False) -> TranscriptView:
    view = TranscriptView()
    view.highlight_draft = highlight
    qtbot.addWidget(view)
    view.resize(900, 700)
    meta = {"draft_mask": [[0, len(text)]]} if highlight else {}
    view.show_messages([StoredMessage(id=1, role=role, content=text, meta=meta)])
    return view


def shown_lines(view: TranscriptView) -> list[str]:
    return [line.strip() for line in view.document().toPlainText().splitlines() if line.strip()]


def test_a_poem_keeps_its_four_lines(qtbot) -> None:
    for role in ("assistant", "user"):
        lines = shown_lines(view_of(qtbot, POEM, role))
        assert lines[1:] == POEM.split("\n"), role  # after "Assistant" / "You"
    view = view_of(qtbot, POEM)
    assert [b.text() for b in _blocks(view)][1:] == [POEM.replace("\n", LINE_BREAK)]  # one paragraph, four lines
    assert view.document().blockCount() == 2


def test_lists_keep_their_items_and_an_items_own_line_break(qtbot) -> None:
    lines = shown_lines(view_of(qtbot, LIST))
    assert lines[1:] == ["Shopping:", "eggs", "milk,", "the full-fat kind", "first", "second"]
    view = view_of(qtbot, LIST)
    items = [b.text() for b in _blocks(view) if b.textList() is not None]
    assert items == ["eggs", f"milk,{LINE_BREAK}the full-fat kind", "first", "second"], items  # one item, two lines


def test_code_is_kept_exactly_and_the_text_around_it_keeps_its_lines(qtbot) -> None:
    view = view_of(qtbot, CODE)
    lines = view.document().toPlainText().splitlines()
    assert "def f(x):" in lines and "    return x  # kept" in lines  # indentation and the comment as written
    i = lines.index("def f(x):")
    assert lines[i + 1] == ""  # the blank line inside the code stays
    assert lines[-2:] == ["line one", "line two"]


def test_mixed_markdown_is_rendered_and_its_plain_lines_stay_apart(qtbot) -> None:
    view = view_of(qtbot, MIXED)
    lines = shown_lines(view)
    for expected in ("Notes", "Dear Ann,", "see below:", "Bye", "Bob"):
        assert expected in lines, (expected, lines)
    assert "a quote" in lines and "on two lines" in lines
    assert not any("**" in line or line.startswith("#") for line in lines)  # rendered, not shown as syntax
    assert view.document().toPlainText().count("|") == 0  # the table is a table


def test_the_draft_tint_still_covers_the_text_over_hard_breaks(qtbot) -> None:
    view = view_of(qtbot, POEM, highlight=True)
    assert tinted_runs(view.document()) == POEM.split("\n")  # each line whole; the breaks are not characters


def test_only_a_line_that_continues_a_paragraph_is_joined() -> None:
    br = LINE_BREAK
    assert keep_line_breaks("a\nb\n\nc\n") == f"a{br}b\n\nc\n"
    for block in ("- item", "* item", "1. item", "2) item", "# Heading", "| 1 | 2 |", "```", "---", "===", "<div>"):
        assert keep_line_breaks(f"text\n{block}") == f"text\n{block}", block
    assert keep_line_breaks("# Title\ntext") == "# Title\ntext"  # a heading ends at its line
    assert keep_line_breaks("    code\nmore") == "    code\nmore"  # an indented code block keeps its lines
    assert keep_line_breaks("> one\n> two") == f"> one{br}two"
    assert keep_line_breaks("- milk,\n  full-fat") == f"- milk,{br}full-fat"


def _blocks(view: TranscriptView):
    block = view.document().begin()
    while block.isValid():
        yield block
        block = block.next()


INDENTED = ("The sea is wide,\n  and deep and blue;\nThe waves come in,\n\tand go back too.\n"
            "- a list item,\n  its second line")


def test_an_indented_line_shows_indented(qtbot) -> None:
    """#63: a poem's indented lines (spaces or a tab) showed flush left; a list item's own column is not more."""
    view = view_of(qtbot, INDENTED)
    lines = view.document().toPlainText().splitlines()
    assert "  and deep and blue;" in lines and "    and go back too." in lines, lines
    assert "The sea is wide," in lines and "its second line" in lines, lines
