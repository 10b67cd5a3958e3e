"""File → Export chat… and Import chat…: the file dialogs around app.conversation_io. Each returns the one
line the status bar shows; nothing here raises (a file that is not a SpecQuant chat, or an import that fails
halfway, adds nothing)."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from app.conversation_io import exported, read_file, write_file
from app.store import Store
from runtime.errors import UserError

EXPORT_FILTERS = "Markdown (*.md);;JSON (*.json)"


def export_chat(parent: QWidget, store: Store, conversation: int) -> str:
    """Save the chat as Markdown or JSON (the suffix, or else the chosen filter, says which)."""
    title = store.title(conversation)
    # A title's own full stop is not the suffix's (#63: "…Use the tool..md"); runs of spaces are one.
    stem = " ".join(re.sub(r'[\\/:*?"<>|\x00-\x1f]+', " ", title).split())[:80].rstrip(" .…") or "chat"
    path, chosen = QFileDialog.getSaveFileName(parent, "Export chat", str(Path.home() / f"{stem}.md"), EXPORT_FILTERS)
    if not path:
        return ""
    target = Path(path)
    if target.suffix.lower() not in (".md", ".markdown", ".json"):  # some platforms' dialogs add none
        target = target.with_name(target.name + (".json" if "json" in chosen.lower() else ".md"))
    try:
        write_file(target, exported(title, store.messages(conversation), store.documents(conversation)))
    except UserError as e:
        return str(e)
    return f"Exported to {target}"


def import_chat(parent: QWidget, store: Store) -> tuple[int | None, str]:
    """Read an exported JSON chat into a new conversation (all of it or, on any fault, none): its id (None
    when nothing was imported) and the line to show."""
    path, _ = QFileDialog.getOpenFileName(
        parent, "Import chat", str(Path.home()), "SpecQuant chats (*.json);;All files (*)"
    )
    if not path:
        return None, ""
    try:
        conv = read_file(Path(path))
        new = store.import_conversation(conv.title, conv.messages, conv.documents)
    except UserError as e:
        return None, str(e)
    return new, f"Imported “{conv.title}”"
