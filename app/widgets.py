"""Small widgets: the message input, the level badge and the error banner; and every dialog as wide as its
title (`fit_titles`)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent, QPainter, QPaintEvent
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QWidget,
)

# One colour per level, with white text at a contrast ratio of at least 4.5:1 (WCAG AA).
LEVEL_COLOURS = {"low": "#1b7f3b", "medium": "#9a5b00", "high": "#b3261e"}


class InputBox(QPlainTextEdit):
    """Multi-line input: Enter sends, Shift+Enter makes a new line."""

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Message SpecQuant (Enter sends, Shift+Enter for a new line)")
        self.setAccessibleName("Message input")
        self.setTabChangesFocus(True)  # Tab moves on to Send, as keyboard users expect
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(self.fontMetrics().lineSpacing() * 4 + 16)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        if enter:  # Shift+Enter: a plain paragraph break, not Qt's line separator
            self.textCursor().insertText("\n")
            return
        super().keyPressEvent(event)


class LevelBadge(QLabel):
    """"Low" / "Medium" / "High" on its level's colour; the router's reason is the tooltip."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Complexity level")
        self.level = ""
        self.set_level("", "")

    def set_level(self, level: str, reason: str) -> None:
        if (level, reason) == (self.level, self.toolTip()) and self.level:
            return  # a style sheet set again re-polishes the widget: not on every tick of an answer
        self.level = level
        if not level:
            self.setText("")
            self.setStyleSheet("")
            self.setToolTip("The complexity level of the last prompt appears here")
            return
        self.setText(f" {level.capitalize()} ")
        self.setStyleSheet(
            f"QLabel {{ background: {LEVEL_COLOURS[level]}; color: white; border-radius: 4px; "
            "padding: 1px 6px; font-weight: bold; }"
        )
        self.setToolTip(reason)
        self.setAccessibleDescription(f"{level} complexity: {reason}")


class ErrorBanner(QWidget):
    """A dismissable line at the top of the window: what went wrong and how to fix it."""

    action = Signal(str)  # the text of the action button, when one is shown

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("errorBanner")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setStyleSheet(
            "#errorBanner { background: #fdecea; border: 1px solid #b3261e; border-radius: 4px; }"
            "#errorBanner QLabel { color: #5f1410; }"
        )
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setAccessibleName("Error message")
        self.button = QPushButton()
        self.button.clicked.connect(lambda: self.action.emit(self.button.text()))
        close = QPushButton("Dismiss")
        close.clicked.connect(self.hide)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button)
        layout.addWidget(close)
        self.hide()

    def show_error(self, message: str, action: str = "") -> None:
        self.label.setText(message)
        self.button.setText(action)
        self.button.setVisible(bool(action))
        self.show()

    @property
    def message(self) -> str:
        return "" if self.isHidden() else self.label.text()


class ElidedLabel(QLabel):
    """A one-line label that ends in "…" where its room ends, rather than being cut off mid-letter; `text()` is
    still the whole line (and the tooltip should hold it). It asks for no width of its own."""

    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def paintEvent(self, event: QPaintEvent) -> None:
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        painter = QPainter(self)
        self.style().drawItemText(painter, rect, int(self.alignment()), self.palette(), self.isEnabled(), shown,
                                  self.foregroundRole())


def title_width(widget: QWidget) -> int:
    """A window's title and, since the title bar also holds the window manager's buttons, about three of them."""
    metrics = widget.fontMetrics()
    return metrics.horizontalAdvance(widget.windowTitle()) + 12 * metrics.height()


def fit_title(dialog: QWidget) -> None:
    """Widen `dialog` to its title's width, should it be narrower (Qt's message and input boxes fix their own
    size as they are shown: this runs after that)."""
    need = title_width(dialog)
    screen = dialog.screen()
    if screen is not None:  # a title longer than the screen is cut whatever we do: no wider than the screen
        need = min(need, screen.availableGeometry().width())
    if dialog.width() < need:
        dialog.setMaximumWidth(max(dialog.maximumWidth(), need))
        dialog.setMinimumWidth(need)
        dialog.resize(need, dialog.height())


class TitleFit(QObject):
    """Each dialog the application shows, widened to its whole title (#51, #63: a plain window manager cut the
    title of a narrow dialog). An application-wide filter, so that Qt's own message boxes are fitted too."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Show and isinstance(watched, QDialog) and watched.isWindow():
            QTimer.singleShot(0, watched, lambda: fit_title(watched))
        return False


def fit_titles(app: QApplication) -> None:
    """Install TitleFit on `app`, once."""
    if app.findChild(TitleFit) is None:
        app.installEventFilter(TitleFit(app))
