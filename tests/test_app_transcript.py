"""The transcript view on its own (pytest-qt, offscreen): Markdown, the draft tint over it, coloured code."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtGui import QColor, QFont, QGuiApplication, QTextDocument
from PySide6.QtWidgets import QApplication

from app.stored_messages import StoredMessage
from app.theme import dark_palette
from app.transcript import DRAFT_TINT, TranscriptView
from app.transcript_text import align, split_code

ANSWER = "Some **bold** words.\n\n- first item\n- second item\n\nAnd `code` here.\n\n```python\nx = 1\nprint(x)\n```\n"
CODE = "def greet(name):\n    return 'hi ' + name  # a comment\n"


def message(role: str, content: str, **meta: object) -> StoredMessage:
    return StoredMessage(id=1, role=role, content=content, meta=dict(meta))


def runs_of(content: str, *parts: str) -> list[list[int]]:
    """draft_mask runs covering each part (first occurrence) of the message's source text."""
    return [[content.index(p), content.index(p) + len(p)] for p in parts]


def fragments(doc: QTextDocument):
    """(position, text, format, block) for every text fragment, table cells included."""
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            yield frag.position(), frag.text(), frag.charFormat(), block
            it += 1
        block = block.next()


def tinted_runs(doc: QTextDocument) -> list[str]:
    """The tinted text, one string per run of adjacent tinted characters."""
    runs: list[str] = []
    last_end = -1
    for pos, text, fmt, _ in fragments(doc):
        if fmt.background().color() != QColor(DRAFT_TINT):
            continue
        if pos == last_end:
            runs[-1] += text
        else:
            runs.append(text)
        last_end = pos + len(text)
    return runs


def code_colours(view: TranscriptView, code_line: str) -> set[str]:
    """The foreground colours in the block that holds `code_line`."""
    return {
        fmt.foreground().color().name() for _, _, fmt, block in fragments(view.document()) if block.text() == code_line
    }


def make_view(qtbot, highlight: bool = False) -> TranscriptView:
    view = TranscriptView()
    view.highlight_draft = highlight
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    return view


def test_align_skips_markup() -> None:
    assert align("bold", "**bold**") == [2, 3, 4, 5]
    assert align("a b\u2029c", "a\nb\n\nc") == [0, 1, 2, 3, 5]  # a soft break and a paragraph break
    assert align("x\ufffc", "x") == [0, None]  # shown from nothing: an image placeholder


def test_split_code_keeps_offsets_and_knows_an_open_fence() -> None:
    segs = split_code(ANSWER)
    code = next(s for s in segs if s.kind == "code")
    assert ANSWER[code.start : code.start + len(code.text)] == code.text == "x = 1\nprint(x)" and code.closed
    assert not split_code("intro\n```py\nx = 1")[-1].closed


def test_the_draft_tint_lies_over_rendered_markdown(qtbot) -> None:
    view = make_view(qtbot, highlight=True)
    # Runs that include Markdown syntax (** and the list marker): only the characters shown get tinted.
    mask = runs_of(ANSWER, "**bold** words", "- second", "`code`", "print")
    view.show_messages([message("user", "hi"), message("assistant", ANSWER, draft_mask=mask)])
    doc = view.document()
    assert tinted_runs(doc) == ["bold words", "second", "code", "print"]
    formats = {text: (fmt, block) for _, text, fmt, block in fragments(doc)}
    assert formats["bold"][0].fontWeight() == QFont.Weight.Bold  # Markdown is still on
    assert formats["second"][1].textList() is not None and formats["first item"][1].textList() is not None
    assert formats["code"][0].fontFixedPitch()
    assert "**" not in view.toPlainText() and "- first" not in view.toPlainText()


def test_without_the_highlight_nothing_is_tinted(qtbot) -> None:
    view = make_view(qtbot, highlight=False)
    view.show_messages([message("assistant", ANSWER, draft_mask=runs_of(ANSWER, "bold"))])
    assert tinted_runs(view.document()) == []


def test_a_code_block_is_coloured_for_the_theme_with_a_label_and_copy(qtbot) -> None:
    content = f"Here:\n\n```python\n{CODE}```\n"
    light = make_view(qtbot)
    light.show_messages([message("assistant", content)])
    first_line = CODE.split("\n")[1]
    light_colours = code_colours(light, first_line)
    assert len(light_colours) > 1  # a keyword, a string, a comment...
    dark = make_view(qtbot)
    dark.setPalette(dark_palette())
    dark.show_messages([message("assistant", content)])
    assert len(code_colours(dark, first_line)) > 1 and code_colours(dark, first_line) != light_colours
    header = [block.text() for _, _, _, block in fragments(light.document())]
    assert "Python" in header and "Copy" in header
    anchor = next(fmt.anchorHref() for _, text, fmt, _ in fragments(light.document()) if text == "Copy")
    QGuiApplication.clipboard().clear()
    with qtbot.waitSignal(light.copied) as blocker:
        light.anchorClicked.emit(QUrl(anchor))  # what a click on the link emits
    assert QApplication.clipboard().text() == blocker.args[0] == CODE.rstrip("\n")


def test_unknown_or_absent_languages_stay_plain(qtbot) -> None:
    view = make_view(qtbot)
    view.show_messages([message("assistant", f"```nosuchlang\n{CODE}```\n\n```\n{CODE}```\n")])
    assert len(code_colours(view, CODE.split("\n")[1])) == 1
    texts = {block.text() for _, _, _, block in fragments(view.document())}
    assert {"nosuchlang", "text"} <= texts


def test_an_open_fence_streams_plain_and_is_coloured_once_finished(qtbot) -> None:
    view = make_view(qtbot)
    view.show_messages([message("user", "code please")])
    view.begin_live()
    view.update_live(f"Sure:\n\n```python\n{CODE}")
    line = CODE.split("\n")[1]
    assert len(code_colours(view, line)) == 1  # not re-lexed on every frame while it grows
    view.update_live(f"Sure:\n\n```python\n{CODE}```\nDone.")
    assert len(code_colours(view, line)) > 1  # closed: coloured (lexed once, then cached)
    live = (view.toPlainText(), view.document().blockCount())
    view.show_messages([message("user", "code please"), message("assistant", f"Sure:\n\n```python\n{CODE}```\nDone.")])
    assert (view.toPlainText(), view.document().blockCount()) == live  # streamed = finished, no stray blocks
    view.show_messages([message("user", "code please"), message("assistant", f"Sure:\n\n```python\n{CODE}")])
    assert len(code_colours(view, line)) > 1  # a finished answer's unclosed fence is coloured too


def test_user_messages_render_markdown(qtbot) -> None:
    view = make_view(qtbot)
    view.show_messages([message("user", "Make **this** bold and `that` code")])
    formats = {text: fmt for _, text, fmt, _ in fragments(view.document())}
    assert formats["this"].fontWeight() == QFont.Weight.Bold and formats["that"].fontFixedPitch()
    assert "**" not in view.toPlainText()


def test_the_reading_column_is_centred_in_a_wide_view(qtbot) -> None:
    view = make_view(qtbot)
    view.show_messages([message("assistant", "word " * 400)])
    view.resize(2400, 700)
    qtbot.waitUntil(lambda: view.document().rootFrame().frameFormat().leftMargin() > 300)
    fmt = view.document().rootFrame().frameFormat()
    assert fmt.leftMargin() == fmt.rightMargin()
    column = view.document().textWidth() - fmt.leftMargin() - fmt.rightMargin()
    assert 30 * view.fontMetrics().height() < column < 2400 / 2
    view.resize(500, 700)
    qtbot.waitUntil(lambda: view.document().rootFrame().frameFormat().leftMargin() < 50)


def test_a_calls_line_shows_what_came_back_cut_short() -> None:
    """#63: the call's result was only inside its collapsed block."""
    from app.transcript_text import RESULT_PREVIEW, call_heading

    call = {"server": "files", "tool": "read_file", "outcome": "allowed", "elapsed_s": 0.5,
            "result": "line one\nline two " + "x" * 200}
    line = call_heading(call)
    assert line.startswith("files › read_file — allowed — 0.50 s → line one line two x") and line.endswith("…")
    assert len(line.split(" → ", 1)[1]) == RESULT_PREVIEW + 1
    assert " → " not in call_heading(call | {"outcome": "denied"})  # nothing ran: nothing came back
