"""A conversation exported to JSON and Markdown, and imported again (#43): everything stored with a message
comes back, and a file that is not an export is refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.conversation_io import (
    FORMAT,
    ExportedConversation,
    ExportedMessage,
    from_json,
    read_file,
    to_json,
    to_markdown,
    write_file,
)
from runtime.errors import UserError

FACTS = {"pair": "F16 ← Q4_K_M", "tok_per_s": 131.8, "draft_mask": [[0, 4]],
         "citations": [{"n": 1, "path": "/home/ann/notes/install.md", "collection": "notes", "score": 1.0,
                        "text": "Run pip install frobnicator."}]}
CHAT = ExportedConversation(
    "Installing — ünïcode",
    (ExportedMessage("user", "How do I install it?"), ExportedMessage("assistant", "Run `pip install` [1].", FACTS)),
    documents="notes",
)


def test_json_round_trips_everything_stored_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "chat with space.json"
    write_file(path, CHAT)
    assert json.loads(path.read_text())["format"] == FORMAT
    assert read_file(path) == CHAT
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left beside it


def test_markdown_reads_as_a_transcript_with_its_sources(tmp_path: Path) -> None:
    text = to_markdown(CHAT)
    assert text.startswith("# Installing — ünïcode\n")
    assert "## User\n\nHow do I install it?" in text and "> F16 ← Q4_K_M · 131.8 tok/s" in text
    assert "Sources:\n\n1. /home/ann/notes/install.md" in text
    write_file(tmp_path / "chat.md", CHAT)
    assert (tmp_path / "chat.md").read_text() == text


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "not a JSON file"),
        ('{"messages": []}', "not a SpecQuant conversation"),
        (json.dumps({"format": FORMAT, "version": 9, "title": "t", "messages": []}), "version 9"),
        (json.dumps({"format": FORMAT, "version": 1, "title": "t", "messages": [{"role": "robot", "content": "x"}]}),
         "messages[0] needs a role"),
        (json.dumps({"format": FORMAT, "version": 1, "title": " ", "messages": []}), "no title"),
    ],
)
def test_a_file_that_is_not_an_export_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(UserError, match=r"chat\.json") as e:
        from_json(text, "chat.json")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read it"):
        read_file(tmp_path / "missing.json")
    assert from_json(to_json(CHAT), "x") == CHAT
