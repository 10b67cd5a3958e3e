"""What the window was like when it closed, so that it opens the same way (#63: it opened on a blank chat at
its default size, the text being typed gone): its size (maximised or not) and place, the chat that was open
and the unsent text in the input box. Kept beside the settings (the same QSettings file, its own group), not
among them: these are not choices the user makes in Settings. The draft is saved shortly after typing stops as
well as at close, so a crash or a killed session keeps it."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QPoint, QSettings, QSize
from PySide6.QtGui import QGuiApplication

from app.settings import APPLICATION, ORGANIZATION

GROUP = "window"
DRAFT_CHARS = 100_000  # a draft longer than this is cut where it is saved (a pasted book is not a draft)


@dataclass(frozen=True)
class WindowState:
    # The size (the window manager places it; Qt's saved geometry is cut to the screen it finds first, which
    # shrank it under the offscreen platform and on a second monitor's absence alike) and whether maximised.
    size: QSize | None = None
    maximized: bool = False
    conversation: int | None = None  # the chat open at close (None: a new chat)
    draft: str = ""  # the input box's unsent text
    # Where the window's frame stood (None: the window manager places it). Restored only where a screen is now:
    # a monitor since unplugged must not leave the window out of sight.
    pos: QPoint | None = None


def load_state(store: QSettings | None = None) -> WindowState:
    """The saved state; anything missing or unreadable is left at its default (a damaged file never stops us)."""
    store = store or QSettings(ORGANIZATION, APPLICATION)
    store.beginGroup(GROUP)
    try:
        size = store.value("size")
        maximized = store.value("maximized")
        conversation = store.value("conversation")
        draft = store.value("draft")
        pos = store.value("pos")
    finally:
        store.endGroup()
    try:
        chat = int(conversation) if conversation not in (None, "") else None
    except (TypeError, ValueError):
        chat = None
    return WindowState(size if isinstance(size, QSize) and size.isValid() else None,
                       str(maximized).lower() in ("true", "1"), chat, draft if isinstance(draft, str) else "",
                       pos if isinstance(pos, QPoint) else None)


def save_state(state: WindowState, store: QSettings | None = None) -> None:
    store = store or QSettings(ORGANIZATION, APPLICATION)
    store.beginGroup(GROUP)
    try:
        if state.size is not None:
            store.setValue("size", state.size)
        if state.pos is not None:  # maximised: the place it goes back to stays as last saved
            store.setValue("pos", state.pos)
        store.setValue("maximized", state.maximized)
        store.setValue("conversation", "" if state.conversation is None else state.conversation)
        store.setValue("draft", state.draft[:DRAFT_CHARS])
    finally:
        store.endGroup()
    store.sync()


def on_a_screen(pos: QPoint) -> bool:
    """Whether a window placed at `pos` would show its title bar on one of the screens there are now."""
    grip = pos + QPoint(48, 12)  # a point of the title bar, past the window manager's corner
    return any(screen.availableGeometry().contains(grip) for screen in QGuiApplication.screens())
