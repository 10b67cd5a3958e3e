"""Render assets/icon.svg into the icons installers need: icon.png (256 px, Linux and the window icon),
icon.ico (Windows) and icon.icns (macOS). Run after editing the SVG, then commit all four:

    QT_QPA_PLATFORM=offscreen python -m installer.render_icon
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def render(svg: Path, size: int) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(svg)).render(painter)
    painter.end()
    return image


def main() -> int:
    _app = QGuiApplication(sys.argv[:1])  # QImage's format plugins (ico, icns) need an application
    svg = ASSETS / "icon.svg"
    for name, size in (("icon.png", 256), ("icon.ico", 256), ("icon.icns", 512)):
        if not render(svg, size).save(str(ASSETS / name)):
            print(f"render_icon: could not write {name} (Qt image plugin missing?)", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
