"""The model manager's Discover tab: the curated catalogue, each model checked against this computer's RAM."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from runtime.errors import UserError
from runtime.models.cache import cache_root, list_models
from runtime.plan.catalog import Entry, Fit, can_draft_for, fit, load_catalog

# "This computer" second: last, it was off-screen at the dialog's default size (#63).
COLUMNS = ["Model", "This computer", "Parameters", "Download", "F16 / Q8_0 / Q4_K_M", "RAM", "Licence"]
FIT = COLUMNS.index("This computer")
TOO_BIG = QColor("#b3261e")
PARTLY = QColor("#8a5a00")
NOTE_LINES = 5  # the selected model's description and fit: room for the longest in the catalogue


def _size(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _params(n: int) -> str:
    return f"{n / 1e9:.1f} B" if n >= 1e9 else f"{n / 1e6:.0f} M"


def verdict(f: Fit) -> str:
    """The short mark in the list; the full line is the item's tooltip and the note under the list."""
    if f.fits_plan:
        return "fits"
    if f.fits_all:
        return "fits, slower"  # F16 without its draft
    if f.fits_none:
        return "too big"
    return "only " + " and ".join(t.upper() for t in f.tiers)


class DiscoverTab(QWidget):
    """Lists assets/catalog.json; emits `download_requested(repo)` for the selected model."""

    download_requested = Signal(str)

    def __init__(self, path: Path | None = None, ram_bytes: int | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.path = path
        self.ram_bytes = ram_bytes  # None: this computer's (tests pass a figure)
        self.entries: list[Entry] = []
        self.fits: dict[str, Fit] = {}
        self.installed: dict[str, str] = {}  # repo -> the cached model converted from it
        self.busy = False

        self.error = QLabel("")
        self.error.setAccessibleName("Catalogue error")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #b3261e;")
        self.error.hide()
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.tree.header().setStretchLastSection(True)
        self.tree.setAccessibleName("Models to download")
        self.tree.itemSelectionChanged.connect(self._update)
        self.tree.itemDoubleClicked.connect(lambda *_: self._download())
        self.note = QLabel("")
        self.note.setAccessibleName("Selected model")
        self.note.setWordWrap(True)
        self.note.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        # Its height fixed: a row's longer description must not move the button under the pointer (#63).
        self.note.setFixedHeight(self.note.fontMetrics().lineSpacing() * NOTE_LINES + 4)
        self.download_button = QPushButton("Download and &convert")
        self.download_button.setToolTip(
            "Downloads the model's safetensors from Hugging Face (kept in its cache), then converts it into "
            "F16, Q8_0 and Q4_K_M tiers"
        )
        self.download_button.clicked.connect(self._download)
        row = QHBoxLayout()
        row.addWidget(self.note, 1)
        row.addWidget(self.download_button, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.addWidget(self.error)
        layout.addWidget(self.tree, 1)
        layout.addLayout(row)
        self.reload()

    def reload(self) -> None:
        """Read the catalogue again; a bad file is one line above an empty list, never a traceback."""
        keep = self.selected()
        self.installed = {
            (m.manifest or {}).get("source", {}).get("ref", ""): m.name for m in list_models(cache_root()) if m.complete
        }
        self.tree.clear()
        self.fits = {}
        try:
            self.entries = load_catalog(self.path)
        except UserError as e:
            self.entries = []
            self.error.setText(str(e))
            self.error.show()
            self._update()
            return
        self.error.hide()
        for entry in self.entries:
            f = fit(entry, self.ram_bytes)
            self.fits[entry.repo] = f
            tiers = " / ".join(_size(entry.tier_bytes[t]) for t in ("f16", "q8_0", "q4_k_m"))
            ram = f"{_size(f.needs['q4_k_m'])} – {_size(f.plan_need)}"  # to F16 with its draft (#63)
            mark = verdict(f) + (" · installed" if entry.repo in self.installed else "")
            item = QTreeWidgetItem(
                [entry.name, mark, _params(entry.params), _size(entry.download_bytes), tiers, ram, entry.licence]
            )
            item.setData(0, Qt.ItemDataRole.UserRole, entry.repo)
            item.setToolTip(0, f"{entry.repo}: {entry.description}")
            item.setToolTip(FIT, f.line)
            if not f.fits_plan:
                item.setForeground(FIT, QBrush(TOO_BIG if f.fits_none else PARTLY))
            self.tree.addTopLevelItem(item)
            if keep is not None and keep.repo == entry.repo:
                item.setSelected(True)
        self._update()

    def selected(self) -> Entry | None:
        items = self.tree.selectedItems()
        repo = items[0].data(0, Qt.ItemDataRole.UserRole) if items else None
        return next((e for e in self.entries if e.repo == repo), None)

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._update()

    def _update(self) -> None:
        entry = self.selected()
        self.download_button.setEnabled(entry is not None and not self.busy)
        if entry is None:
            self.note.setText("Pick a model to see what it needs." if self.entries else "")
            return
        gated = " The Hub asks you to accept its licence and log in first (`hf auth login`)." if entry.gated else ""
        have = f" Already converted as {self.installed[entry.repo]}." if entry.repo in self.installed else ""
        larger = can_draft_for(entry, self.entries)
        drafts = f"<br>Can draft for: {', '.join(larger)} (same family and vocabulary)." if larger else ""
        self.note.setText(
            f"<b>{entry.repo}</b>: {entry.description}<br>{self.fits[entry.repo].line}.{gated}{have}{drafts}"
        )

    def offer(self, repo: str) -> None:
        """Pick `repo` and ask whether to download it (the demo's note offers a better model this way)."""
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, Qt.ItemDataRole.UserRole) == repo:
                self.tree.setCurrentItem(item)
                self.tree.scrollToItem(item)
                self._download()
                return

    def _download(self) -> None:
        entry = self.selected()
        if entry is not None and not self.busy and self.confirm(entry):
            self.download_requested.emit(entry.repo)

    def confirm(self, entry: Entry) -> bool:
        """A download is asked for, with its size: a click meant for the list must not start one (#63)."""
        question = (f"Download {entry.name} ({_size(entry.download_bytes)}) from Hugging Face and convert it "
                    f"into three tiers ({_size(sum(entry.tier_bytes.values()))} on disk)?")
        answer = QMessageBox.question(self, "Download a model", question,
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes
