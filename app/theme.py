"""Look: Fusion style, light / dark / the system's colour scheme, and the zoomed font size."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app.settings import AppSettings

_SCHEMES = {"system": Qt.ColorScheme.Unknown, "light": Qt.ColorScheme.Light, "dark": Qt.ColorScheme.Dark}
_base_point_size: float | None = None

# Text on these backgrounds keeps a contrast ratio above 7:1 (#e6e6e6 on #1e1e1e is 13:1).
_DARK = {
    QPalette.ColorRole.Window: "#2b2b2b",
    QPalette.ColorRole.WindowText: "#e6e6e6",
    QPalette.ColorRole.Base: "#1e1e1e",
    QPalette.ColorRole.AlternateBase: "#2b2b2b",
    QPalette.ColorRole.Text: "#e6e6e6",
    QPalette.ColorRole.Button: "#353535",
    QPalette.ColorRole.ButtonText: "#e6e6e6",
    QPalette.ColorRole.Highlight: "#3d7bd9",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.Link: "#6aa9ff",
    QPalette.ColorRole.PlaceholderText: "#a0a0a0",
    QPalette.ColorRole.ToolTipBase: "#2b2b2b",
    QPalette.ColorRole.ToolTipText: "#e6e6e6",
}


def dark_palette() -> QPalette:
    palette = QPalette()
    for role, colour in _DARK.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#7a7a7a"))
    return palette


def wants_dark(theme: str) -> bool:
    """"system" follows the desktop's light or dark mode, where the platform reports one."""
    if theme == "system":
        return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark
    return theme == "dark"


def apply_look(settings: AppSettings) -> None:
    """Apply the theme and zoom to the whole application (the system font size is the starting point)."""
    global _base_point_size
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        return
    if app.style().name().lower() != "fusion":
        app.setStyle("Fusion")  # renders either palette the same on every OS
    # Tell the platform too (title bars, native dialogs); Unknown hands the choice back to the system.
    QGuiApplication.styleHints().setColorScheme(_SCHEMES[settings.theme])
    # An explicit palette: without a platform theme (many Linux desktops, Xvfb) the hint alone changes nothing.
    app.setPalette(dark_palette() if wants_dark(settings.theme) else app.style().standardPalette())
    if _base_point_size is None:
        _base_point_size = QGuiApplication.font().pointSizeF()
    font = QFont(QGuiApplication.font())
    font.setPointSizeF(max(6.0, _base_point_size + settings.zoom))
    app.setFont(font)
