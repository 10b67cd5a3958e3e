"""What the window was like when it closed, so that it opens the same way (#63: it opened on a blank chat at
its default size, the text being typed gone): its size and place, the chat that was open and the unsent text
in the input box. Kept beside the settings (the same QSettings file, its own group), not among them: these
are not choices the user makes in Settings. The draft is saved shortly after typing stops as well as at close,
so a crash or a killed session keeps it."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QSettings

from app.settings import APPLICATION, ORGANIZATION

GROUP = "window"
DRAFT_CHARS = 100_000  # a draft longer than this is cut where it is saved (a pasted book is not a draft)


@dataclass(frozen=True)
class WindowState:
    geometry: QByteArray | None = None  # QWidget.saveGeometry's: size, place, maximised, on which screen
    conversation: int | None = None  # the chat open at close (None: a new chat)
    draft: str = ""  # the input box's unsent text


def load_state(store: QSettings | None = None) -> WindowState:
    """The saved state; anything missing or unreadable is left at its default (a damaged file never stops us)."""
    store = store or QSettings(ORGANIZATION, APPLICATION)
    store.beginGroup(GROUP)
    try:
        geometry = store.value("geometry")
        conversation = store.value("conversation")
        draft = store.value("draft")
    finally:
        store.endGroup()
    try:
        chat = int(conversation) if conversation not in (None, "") else None
    except (TypeError, ValueError):
        chat = None
    return WindowState(geometry if isinstance(geometry, QByteArray) else None, chat,
                       draft if isinstance(draft, str) else "")


def save_state(state: WindowState, store: QSettings | None = None) -> None:
    store = store or QSettings(ORGANIZATION, APPLICATION)
    store.beginGroup(GROUP)
    try:
        if state.geometry is not None:
            store.setValue("geometry", state.geometry)
        store.setValue("conversation", "" if state.conversation is None else state.conversation)
        store.setValue("draft", state.draft[:DRAFT_CHARS])
    finally:
        store.endGroup()
    store.sync()
