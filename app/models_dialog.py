"""The model manager: cached models and their tiers; add (convert), repair, delete; the demo in one click;
Discover, a short catalogue of models to download and convert."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QThread, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.discover import DiscoverTab
from app.worker import ConvertJob, ConvertWorker, start_thread
from runtime.errors import UserError
from runtime.models.cache import (
    DEMO_NAME,
    TIERS,
    CachedModel,
    ModelDir,
    cache_root,
    delete_model,
    list_models,
    size_text,
)
from runtime.plan import quality
from runtime.plan.catalog import eta_text

if TYPE_CHECKING:
    from converters.convert import ConvertProgress


def demo_available() -> bool:
    """Whether the demo model ships with this install (an installer may be built without it)."""
    from converters.sources import demo_gguf

    try:
        demo_gguf()
    except UserError:
        return False
    return True


STAGE_NAMES = {"f16": "Step 1 of 3: F16 tier", "q8_0": "Step 2 of 3: Q8_0 tier", "q4_k_m": "Step 3 of 3: Q4_K_M tier"}


# Each tier in words (#51), its technical name in brackets: the list is read by people who never quantized.
TIER_WORDS = {"f16": "Full model (F16)", "q8_0": "Compressed, 8-bit (Q8_0)", "q4_k_m": "Compressed, 4-bit (Q4_K_M)"}


def fallback_words(count: int) -> tuple[str, str]:
    """A tier's fallback tensors: plain words for the Notes column, and the technical detail for its tooltip."""
    if not count:
        return "", ""
    return ("some parts kept in another format", f"{count} tensors on fallback types: their shape does not fit "
            "this tier's quantization blocks, so they were stored in a type that does")


def quality_words(figures: dict[str, Any] | None, tier: str, note: str, detail: str) -> tuple[str, str]:
    """A quantized tier's Notes: what it keeps of F16's words (runtime.plan.quality), before any fallback note;
    the figures behind it in the tooltip."""
    if figures is None or tier == "f16" or tier not in figures.get("tiers", {}):
        return note, detail
    said = quality.words(figures, tier)
    return "; ".join(x for x in (said[0].upper() + said[1:], note) if x), "\n".join(
        x for x in (quality.detail(figures, tier), detail) if x
    )


def model_summary(m: CachedModel) -> str:
    if not m.complete:
        return "incomplete: repair it"
    manifest = m.manifest or {}
    total = sum(rec["bytes"] for rec in manifest.get("tiers", {}).values())
    return size_text(total) + (", F16 reconstructed from a quantized file" if manifest.get("reconstructed") else "")


class ModelsDialog(QDialog):
    """Lists the cache; runs one conversion at a time on its own thread, with progress and Cancel."""

    models_changed = Signal()
    use_model = Signal(str)
    convert_requested = Signal(object)  # ConvertJob, queued to the worker thread
    # On the GUI thread, once the dialog has shown them (the worker's own signals fire on its thread):
    progressed = Signal(object)  # converters.convert.ConvertProgress
    conversion_ended = Signal(str, str)  # model name ("" if none), error ("" on success or cancel)

    def __init__(self, release_engine: Callable[[], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(720, 480)
        self.release_engine = release_engine  # unloads the chat's models before a delete or repair
        self.worker = ConvertWorker()
        self.thread: QThread | None = None
        self.converting = ""
        self.last_error = ""
        self.download_started = 0.0  # monotonic time of the first byte report, for the ETA

        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Model", "Size", "Notes"])
        # Sizes and notes are never cut: each column is as wide as its contents (the list scrolls sideways).
        self.tree.header().setStretchLastSection(False)  # a stretched last column is as wide as the space left
        for column in (0, 1, 2):
            self.tree.header().setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.setAccessibleName("Cached models")
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        self.tree.itemDoubleClicked.connect(lambda *_: self._use())

        self.use_button = QPushButton("&Use for chat")
        self.repair_button = QPushButton("&Repair")
        self.repair_button.setToolTip("Convert the model again from its source; intact tiers are kept")
        self.delete_button = QPushButton("&Delete…")
        self.demo_button = QPushButton("Set up the &demo model")
        self.demo_button.setToolTip("SmolLM2-135M-Instruct, shipped with SpecQuant: about 15 seconds, no network")
        self.demo_shipped = demo_available()
        self.use_button.clicked.connect(self._use)
        self.repair_button.clicked.connect(self._repair)
        self.delete_button.clicked.connect(self._delete)
        self.demo_button.clicked.connect(self.setup_demo)
        row = QHBoxLayout()
        for b in (self.use_button, self.repair_button, self.delete_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.demo_button)

        self.source = QLineEdit()
        self.source.setPlaceholderText("A Hugging Face folder, a .gguf file, or a repo id such as org/name")
        self.source.setAccessibleName("Model source")
        self.name = QLineEdit()
        self.name.setPlaceholderText("optional; from the source")
        self.name.setAccessibleName("Model name")
        self.requant = QCheckBox("Accept a quantized .gguf (its F16 tier is reconstructed, not original)")
        folder = QPushButton("Folder…")
        folder.clicked.connect(self._browse_folder)
        gguf = QPushButton(".gguf…")
        gguf.clicked.connect(self._browse_file)
        self.add_button = QPushButton("&Add model")
        self.add_button.clicked.connect(self._add)
        form = QGridLayout()
        form.addWidget(QLabel("&Source:", buddy=self.source), 0, 0)
        form.addWidget(self.source, 0, 1)
        form.addWidget(folder, 0, 2)
        form.addWidget(gguf, 0, 3)
        form.addWidget(QLabel("&Name:", buddy=self.name), 1, 0)
        form.addWidget(self.name, 1, 1)
        form.addWidget(self.add_button, 1, 2, 1, 2)
        form.addWidget(self.requant, 2, 1, 1, 3)

        self.stage = QLabel("")
        self.stage.setAccessibleName("Conversion status")
        self.stage.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setAccessibleName("Conversion progress")
        self.cancel_button = QPushButton("&Cancel")
        self.cancel_button.setToolTip("Stop the download or conversion; no half-written model is kept")
        self.cancel_button.clicked.connect(self.cancel)
        progress = QHBoxLayout()
        progress.addWidget(self.bar, 1)
        progress.addWidget(self.cancel_button)
        close = QPushButton("Close")
        close.clicked.connect(self.close)

        installed = QWidget()
        inner = QVBoxLayout(installed)
        inner.addWidget(self.tree, 1)
        inner.addLayout(row)
        inner.addSpacing(8)
        inner.addWidget(QLabel("<b>Add a model</b> (converted once into F16, Q8_0 and Q4_K_M tiers)"))
        inner.addLayout(form)
        self.discover = DiscoverTab()
        self.discover.download_requested.connect(self.download)
        self.tabs = QTabWidget()
        self.tabs.addTab(installed, "&Installed")
        self.tabs.addTab(self.discover, "Disc&over")

        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.stage)
        layout.addLayout(progress)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignRight)

        self.worker.progress.connect(self._on_progress)
        self.worker.done.connect(self._on_done)
        self.worker.failed.connect(self._on_failed)
        self.convert_requested.connect(self.worker.run)
        self._show_idle()
        self.refresh()

    # --- listing -----------------------------------------------------------------------------------
    def refresh(self) -> None:
        selected = self.selected()
        self.tree.clear()
        for m in list_models(cache_root()):
            item = QTreeWidgetItem([m.name, model_summary(m), "" if m.complete else "incomplete"])
            item.setData(0, Qt.ItemDataRole.UserRole, m.name)
            tiers = (m.manifest or {}).get("tiers", {})
            figures = quality.cached(ModelDir(m.path.parent, m.name))  # measured by a conversion or `info`
            if figures is not None and figures.get("reconstructed"):
                item.setToolTip(1, quality.REQUANT_NOTE[0].upper() + quality.REQUANT_NOTE[1:] + ".")
            for tier, rec in ((t, tiers[t]) for t in TIERS if t in tiers):  # most precise first
                note, detail = quality_words(figures, tier, *fallback_words(rec.get("fallbacks") or 0))
                child = QTreeWidgetItem([TIER_WORDS.get(tier, tier.upper()), size_text(rec["bytes"]), note])
                child.setToolTip(2, detail)
                item.addChild(child)
            self.tree.addTopLevelItem(item)
            if m.name == selected:
                item.setSelected(True)
        self.tree.expandAll()
        have_demo = any(m.name == DEMO_NAME and m.complete for m in list_models(cache_root()))
        self.demo_button.setVisible(self.demo_shipped and not have_demo)
        self.discover.reload()  # its "installed" marks follow the cache
        self._update_buttons()

    def selected(self) -> str:
        items = self.tree.selectedItems()
        if not items:
            return ""
        item = items[0].parent() or items[0]
        return item.data(0, Qt.ItemDataRole.UserRole) or ""

    def _update_buttons(self) -> None:
        name = self.selected()
        busy = bool(self.converting)
        complete = any(m.name == name and m.complete for m in list_models(cache_root()))
        self.use_button.setEnabled(complete and not busy)
        self.repair_button.setEnabled(bool(name) and not busy)
        self.delete_button.setEnabled(bool(name) and not busy)
        for w in (self.add_button, self.demo_button, self.source, self.name, self.requant):
            w.setEnabled(not busy)
        self.discover.set_busy(busy)
        self.cancel_button.setEnabled(busy)

    # --- actions -----------------------------------------------------------------------------------
    def _use(self) -> None:
        if self.use_button.isEnabled():
            self.use_model.emit(self.selected())

    def setup_demo(self) -> None:
        self.start("demo", "", False)

    def _add(self) -> None:
        source = self.source.text().strip()
        if not source:
            self._say("Give a folder, a .gguf file or a Hugging Face repo id first.", error=True)
            return
        self.start(source, self.name.text().strip(), self.requant.isChecked())

    def _repair(self) -> None:
        name = self.selected()
        manifest = next((m.manifest for m in list_models(cache_root()) if m.name == name), None)
        ref = (manifest or {}).get("source", {}).get("ref")
        if not ref:
            self._say(f"{name} has no readable manifest: delete it and add it again from its source.", error=True)
            return
        self.release_engine()
        self.start(ref, name, bool(manifest.get("reconstructed")))

    def _delete(self) -> None:
        name = self.selected()
        answer = QMessageBox.question(self, "Delete model", f"Delete {name} and its three tiers from the cache?")
        if answer != QMessageBox.StandardButton.Yes:
            return
        self.release_engine()
        try:
            delete_model(cache_root(), name)
        except UserError as e:
            self._say(str(e), error=True)
            return
        self._say(f"Deleted {name}.")
        self.refresh()
        self.models_changed.emit()

    def _browse_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "A Hugging Face model folder")
        if path:
            self.source.setText(path)

    def _browse_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A GGUF file", "", "GGUF files (*.gguf)")
        if path:
            self.source.setText(path)

    # --- conversion --------------------------------------------------------------------------------
    def download(self, repo: str) -> None:
        """Discover's one button: download `repo` from Hugging Face with bytes and ETA, then convert it."""
        self.start(repo, "", False, download=True)

    def start(self, source: str, name: str, allow_requant: bool, download: bool = False) -> None:
        """Convert on the worker thread (started on first use); one conversion at a time."""
        if self.converting:
            return
        if self.thread is None:
            self.thread = start_thread(self.worker, "specquant-convert")
        self.converting = source
        self.last_error = ""
        self.download_started = 0.0
        self.bar.setRange(0, 0)  # busy until the first report
        self._say(f"Downloading {source}…" if download else f"Converting {source}…")
        self._update_buttons()
        self.convert_requested.emit(ConvertJob(source, name, allow_requant, download))

    def cancel(self) -> None:
        if self.converting:
            self.worker.cancel.set()
            self.cancel_button.setEnabled(False)
            self._say("Cancelling…")

    def _on_progress(self, p: ConvertProgress) -> None:
        stage = p.stage
        if stage in STAGE_NAMES:
            done, total = p.done, max(p.total, 1)
            self.bar.setRange(0, 1000)
            self.bar.setValue(min(1000, int(1000 * done / total)))
            note = f" ({p.message})" if p.message else ""
            self.stage.setText(f"{STAGE_NAMES[stage]}: {size_text(done)} of about {size_text(total)}{note}")
        elif stage == "download":
            now = time.monotonic()
            if not self.download_started:
                self.download_started = now
            if p.total > 0:
                self.bar.setRange(0, 1000)
                self.bar.setValue(min(1000, int(1000 * p.done / p.total)))
            eta = eta_text(p.done, p.total, now - self.download_started)
            self.stage.setText(f"Downloading {self.converting}: {eta}")
        elif stage == "hash":
            self.stage.setText("Checking the tiers…")
        elif stage == "quality":
            self.bar.setRange(0, max(p.total, 1))
            self.bar.setValue(p.done)
            self.stage.setText(f"Measuring what each tier keeps of the full model's words: {p.done} of {p.total}")
        self.progressed.emit(p)

    def _on_done(self, name: str) -> None:
        self.converting = ""
        self._show_idle()
        self.bar.setValue(self.bar.maximum())  # done: a full bar, not "0%" beside "ready" (#63)
        self._say(f"{name} is ready.")
        self.refresh()
        self.models_changed.emit()
        self.use_model.emit(name)
        self.conversion_ended.emit(name, "")

    def _on_failed(self, message: str) -> None:
        self.converting = ""
        self.last_error = message
        self._show_idle()
        self._say(message or "Conversion cancelled; nothing half-written was kept.", error=bool(message))
        self.refresh()
        self.models_changed.emit()
        self.conversion_ended.emit("", message)

    def _show_idle(self) -> None:
        self.bar.setRange(0, 1000)
        self.bar.setValue(0)
        self._update_buttons()

    def _say(self, text: str, error: bool = False) -> None:
        self.stage.setText(text)
        self.stage.setStyleSheet("color: #b3261e;" if error else "")

    # --- lifetime ----------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Cancel a running conversion (its partial tier is removed) and end the thread."""
        if self.thread is None:
            return
        self.worker.cancel.set()
        self.thread.quit()
        self.thread.wait()
        self.thread = None
