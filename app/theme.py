"""Look: Fusion style, light / dark / the system's colour scheme, and the zoomed font size."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import QApplication

from app.settings import AppSettings

_SCHEMES = {"system": Qt.ColorScheme.Unknown, "light": Qt.ColorScheme.Light, "dark": Qt.ColorScheme.Dark}
_base_point_size: float | None = None


def apply_look(settings: AppSettings) -> None:
    """Apply the theme and zoom to the whole application (the system font size is the starting point)."""
    global _base_point_size
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        return
    if app.style().name().lower() != "fusion":
        app.setStyle("Fusion")  # renders the system or a forced colour scheme the same on every OS
    # Unknown hands the choice back to the platform: the window follows the system's light or dark mode.
    QGuiApplication.styleHints().setColorScheme(_SCHEMES[settings.theme])
    if _base_point_size is None:
        _base_point_size = QGuiApplication.font().pointSizeF()
    font = QFont(QGuiApplication.font())
    font.setPointSizeF(max(6.0, _base_point_size + settings.zoom))
    app.setFont(font)
