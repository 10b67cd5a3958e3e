"""The user guides (docs/guide/*.md), read inside the window (#63: Help handed developer documents to a
desktop viewer that often was not there): a list of the guides and the one chosen, rendered from its
Markdown; a link to another guide opens it here, a web link in the browser."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QHBoxLayout, QListWidget, QTextBrowser, QVBoxLayout, QWidget


class GuideViewer(QDialog):
    """The guides (menu text, file) of `folder`; `show_guide` opens one."""

    def __init__(self, folder: Path, guides: tuple[tuple[str, str], ...], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.folder, self.guides = folder, guides
        self.setWindowTitle("SpecQuant Help")
        self.resize(820, 600)
        self.contents = QListWidget()
        self.contents.setAccessibleName("Guides")
        self.contents.addItems([text.replace("&", "") for text, _ in guides])
        self.contents.setMaximumWidth(220)
        self.contents.currentRowChanged.connect(lambda row: row >= 0 and self._open(guides[row][1]))
        self.page = QTextBrowser()
        self.page.setAccessibleName("Guide")
        self.page.setOpenExternalLinks(True)  # http(s): the browser; a guide's own links stay here
        self.page.setSearchPaths([str(folder)])
        self.page.sourceChanged.connect(self._follow)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(self.contents)
        row.addWidget(self.page, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(row, 1)
        layout.addWidget(buttons)

    def show_guide(self, name: str) -> None:
        """Show the guide file `name` and bring the viewer up."""
        self._open(name)
        self.show()
        self.raise_()
        self.activateWindow()

    def _open(self, name: str) -> None:
        path = self.folder / name
        if path.is_file():
            self.page.setSource(QUrl.fromLocalFile(str(path)), QTextDocument.ResourceType.MarkdownResource)
        else:
            self.page.setPlainText(f"This guide is not part of this install: {path}")

    def _follow(self, url: QUrl) -> None:
        """The list marks the guide shown, whether chosen there or reached by a link."""
        name = Path(url.toLocalFile()).name
        row = next((i for i, (_, file) in enumerate(self.guides) if file == name), -1)
        if row >= 0 and row != self.contents.currentRow():
            self.contents.blockSignals(True)
            self.contents.setCurrentRow(row)
            self.contents.blockSignals(False)

    def shown(self) -> str:
        """The guide shown (its file name), what the tests read."""
        return Path(self.page.source().toLocalFile()).name
