"""The Documents panel: collections and their files, Add folder / Add files / Sync / Remove, a progress line,
and the folders watched so that a change on disk is indexed a moment later (#42).

The index (runtime.documents.Library) is used on one thread only, the documents worker's (app.documents_worker):
it opens the Library there and runs one job at a time, in order. The GUI thread sends it jobs and receives
IndexProgress, a one-line result and an IndexListing of the index through signals. watchdog's observer thread only
reports that a watched folder changed; the panel waits DEBOUNCE_MS after the last change, then asks the worker to sync.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, QThread, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QDragEnterEvent, QDragMoveEvent, QDropEvent, QShowEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.documents_words import count_of, progress_line, relative_name, result_line, state_words, unreadable_line
from app.documents_worker import DocumentsJob, DocumentsWorker, FolderWatch, IndexListing
from app.widgets import title_width
from app.worker import start_thread
from runtime.documents.library import DEFAULT_COLLECTION, AddResult, IndexProgress

DEBOUNCE_MS = 2000  # a folder is synced this long after its last change: a copy of many files is one sync
ERROR_COLOUR = "#b3261e"  # the banner's red: 4.5:1 on white


class CollectionDialog(QInputDialog):
    """Which collection new documents join (a new name may be typed). Wide enough for its whole title: Qt's
    own item dialog is as narrow as its box, and the window manager cut the title (#51)."""

    TITLE = "Add documents to a collection"

    def __init__(self, parent: QWidget | None, items: list[str], index: int) -> None:
        super().__init__(parent)
        self.setWindowTitle(self.TITLE)
        self.setLabelText("Collection:")
        self.setComboBoxItems(items)
        self.setComboBoxEditable(True)
        self.setTextValue(items[index])

    def title_width(self) -> int:
        return title_width(self)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)  # QInputDialog sizes itself to its box here: widen it afterwards
        self.setMinimumWidth(self.title_width())

    @classmethod
    def ask(cls, parent: QWidget | None, items: list[str], index: int) -> tuple[str, bool]:
        dialog = cls(parent, items, index)
        ok = dialog.exec() == QInputDialog.DialogCode.Accepted
        return dialog.textValue(), ok




def dropped_paths(mime: QMimeData) -> list[str]:
    """The local files and folders a drag carries (a link to a web page or dragged text carries none)."""
    if not mime.hasUrls():
        return []
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile() and url.toLocalFile()]


# --- the panel ------------------------------------------------------------------------------------------------


class DocumentsPanel(QWidget):
    """The collections and their files with their state, the buttons, and one line of progress or result."""

    job_requested = Signal(object)  # DocumentsJob, queued to the worker's thread
    collections_changed = Signal(list)  # the collections' names, after every change to the index
    # On the GUI thread, once the panel has shown them (tests wait on these):
    progressed = Signal(object)  # runtime.documents.IndexProgress
    job_ended = Signal(object, str)  # the DocumentsJob, "" or the one-line reason it failed (None: listing)
    refreshed = Signal()  # the tree shows the index as it is now

    def __init__(self, index: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.index = index
        self.snapshot = IndexListing()
        self.jobs = 0  # sent to the worker and not yet ended
        self.watch_problem = ""

        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Documents", "State"])
        self.tree.setAccessibleName("Document collections")
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a cut name keeps its end: "report…2024.pdf"
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.header().setStretchLastSection(False)
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        self.tree.itemSelectionChanged.connect(self._show_selected)
        self.add_folder_button = QPushButton("Add f&older…")
        self.add_folder_button.setToolTip("Add a folder to a collection; it is watched and kept in sync")
        self.add_folder_button.clicked.connect(self._add_folder)
        self.add_files_button = QPushButton("Add f&iles…")
        self.add_files_button.clicked.connect(self._add_files)
        self.sync_button = QPushButton("S&ync")
        self.sync_button.setToolTip("Read the selected collection (or all) again: new, changed and deleted files")
        self.sync_button.clicked.connect(lambda: self.sync(self.selected()[0]))
        self.remove_button = QPushButton("&Remove…")
        self.remove_button.setToolTip("Forget the selected file or collection (the files on disk stay)")
        self.remove_button.clicked.connect(self.remove_selected)
        self.stop_button = QPushButton("S&top")
        self.stop_button.setToolTip("Stop indexing after the file at hand; the rest stays pending for the next sync")
        self.stop_button.clicked.connect(self.stop_indexing)
        self.stop_button.setVisible(False)
        self.bar = QProgressBar()  # the share of the bytes to read, while a job runs
        self.bar.setAccessibleName("Indexing progress")
        self.bar.setTextVisible(True)
        self.bar.setVisible(False)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setAccessibleName("Documents status")
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QGridLayout()
        buttons.addWidget(self.add_folder_button, 0, 0)
        buttons.addWidget(self.add_files_button, 0, 1)
        buttons.addWidget(self.sync_button, 1, 0)
        buttons.addWidget(self.remove_button, 1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        layout.addWidget(self.tree, 1)
        layout.addLayout(buttons)
        indexing = QHBoxLayout()
        indexing.addWidget(self.bar, 1)
        indexing.addWidget(self.stop_button)
        layout.addLayout(indexing)
        layout.addWidget(self.status)

        self.worker = DocumentsWorker(index)
        self.worker.progress.connect(self._on_progress)
        self.worker.setting_up.connect(self._say)
        self.worker.done.connect(self._on_done)
        self.worker.failed.connect(self._on_failed)
        self.worker.snapshot.connect(self._on_snapshot)
        self.job_requested.connect(self.worker.run)
        self.worker_thread: QThread | None = start_thread(self.worker, "specquant-documents")
        self.watch = FolderWatch(index)
        self.watch.changed.connect(self._on_folder_changed)
        self._debounce: dict[str, QTimer] = {}
        self._update_buttons()
        self.setAcceptDrops(True)  # files and folders dropped from a file manager are added, as by the buttons
        # Changes made while the window was closed, and files a killed run left pending, are caught up now.
        self.request(DocumentsJob("sync", automatic=True))

    # --- what the user (and the tests) do --------------------------------------------------------------
    def request(self, job: DocumentsJob) -> None:
        if self.worker_thread is None:  # shut down
            return
        self.jobs += 1
        if not job.automatic and job.verb in ("add", "sync"):
            self._say("Reading the folders…")
        self.job_requested.emit(job)

    def add(self, paths: list[str], collection: str) -> None:
        """Add files and folders to `collection` (created if new), on the worker."""
        self.request(DocumentsJob("add", tuple(paths), collection))

    def sync(self, collection: str | None = None, automatic: bool = False) -> None:
        self.request(DocumentsJob("sync", (), collection, automatic))

    def stop_indexing(self) -> None:
        """Stop the add or sync in flight between two files (what is done stays; the rest is pending)."""
        self.worker.stop.set()
        self.stop_button.setEnabled(False)
        self._say("Stopping after the file at hand…")

    def collections(self) -> list[str]:
        return list(self.snapshot.roots)

    def selected(self) -> tuple[str | None, str | None]:
        """(collection, file path) of the selected row; (None, None) when nothing is."""
        item = self.tree.currentItem()
        if item is None or not item.isSelected():
            return None, None
        data = item.data(0, Qt.ItemDataRole.UserRole) or (None, None)
        return data[0], data[1]

    def remove_selected(self) -> None:
        collection, path = self.selected()
        if collection is None:
            return
        if path is None:
            n = sum(1 for f in self.snapshot.files if f.collection == collection)
            question = f"Remove the collection “{collection}” and its {count_of(n, 'file')} from the index?"
        else:
            question = f"Remove {path} from the collection “{collection}”?"
        question += " The files on disk stay as they are."
        if QMessageBox.question(self, "Remove", question) != QMessageBox.StandardButton.Yes:
            return
        self.request(DocumentsJob("remove", (path,) if path else (), collection))

    def _ask_collection(self, suggestion: str) -> str | None:
        names = self.collections()
        chosen = self.selected()[0] or suggestion
        items = names if chosen in names else [chosen, *names]
        name, ok = CollectionDialog.ask(self, items, items.index(chosen))
        return name.strip() if ok and name.strip() else None

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of documents")
        if folder:
            collection = self._ask_collection(os.path.basename(folder.rstrip("/\\")) or DEFAULT_COLLECTION)
            if collection:
                self.add([folder], collection)

    def _add_files(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Add documents")
        if files:
            collection = self._ask_collection(DEFAULT_COLLECTION)
            if collection:
                self.add(files, collection)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if dropped_paths(event.mimeData()):
            event.acceptProposedAction()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if dropped_paths(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = dropped_paths(event.mimeData())
        if not paths:
            return
        event.acceptProposedAction()
        one_folder = len(paths) == 1 and os.path.isdir(paths[0])
        suggestion = os.path.basename(paths[0].rstrip("/\\")) if one_folder else DEFAULT_COLLECTION
        collection = self._ask_collection(suggestion or DEFAULT_COLLECTION)
        if collection:
            self.add(paths, collection)

    # --- what the worker and the watcher report -------------------------------------------------------
    def _on_progress(self, p: IndexProgress) -> None:
        if p.files_total:
            if not self.worker.stop.is_set():
                self._say(progress_line(p))
            self.bar.setRange(0, 1000)  # per mille of the stage: bytes read, or chunks given their vectors
            self.bar.setValue(round(p.share * 1000))
            self.bar.setVisible(not p.finished)
            self.stop_button.setVisible(not p.finished)
            self.stop_button.setEnabled(not self.worker.stop.is_set())
        self.progressed.emit(p)

    def _idle(self) -> None:
        """No job is running: the bar and Stop go."""
        if self.jobs == 0:
            self.bar.setVisible(False)
            self.stop_button.setVisible(False)

    def _on_done(self, job: DocumentsJob, result: AddResult | int) -> None:
        self.jobs -= 1
        self._idle()
        line = result_line(job, result)
        if line:
            self._say(line)
        elif self.jobs == 0 and self.status.text().startswith(("Indexing", "Reading")):
            self._say("")  # an automatic sync's progress, done: nothing to say
        self.job_ended.emit(job, "")

    def _on_failed(self, job: DocumentsJob | None, message: str) -> None:
        if job is not None:
            self.jobs -= 1
            self._idle()
        self._say(message, error=True)
        self.job_ended.emit(job, message)

    def _on_snapshot(self, snapshot: IndexListing) -> None:
        if self.worker_thread is None:  # queued before the window closed: the folders stay unwatched
            return
        changed = list(snapshot.roots) != list(self.snapshot.roots)
        self.snapshot = snapshot
        self._fill_tree()
        problem = self.watch.watch(snapshot.roots)
        if problem and problem != self.watch_problem:
            self._say(problem, error=True)
        self.watch_problem = problem
        if changed:
            self.collections_changed.emit(list(snapshot.roots))
        self.refreshed.emit()

    def _on_folder_changed(self, collection: str) -> None:
        """On the GUI thread: sync `collection` once its folders have been quiet for DEBOUNCE_MS."""
        if self.worker_thread is None:
            return
        timer = self._debounce.get(collection)
        if timer is None:
            timer = self._debounce[collection] = QTimer(self)
            timer.setSingleShot(True)
            timer.timeout.connect(lambda: self._sync_changed(collection))
        timer.start(DEBOUNCE_MS)

    def _sync_changed(self, collection: str) -> None:
        if collection in self.snapshot.roots:  # not one removed meanwhile
            self.sync(collection, automatic=True)

    # --- showing --------------------------------------------------------------------------------------
    def _fill_tree(self) -> None:
        keep = self.selected()
        folded = {self.tree.topLevelItem(i).text(0) for i in range(self.tree.topLevelItemCount())
                  if not self.tree.topLevelItem(i).isExpanded()}
        self.tree.clear()
        red = QBrush(QColor(ERROR_COLOUR))
        for collection, roots in self.snapshot.roots.items():
            files = [f for f in self.snapshot.files if f.collection == collection]
            top = QTreeWidgetItem([collection, count_of(len(files), "file")])
            top.setData(0, Qt.ItemDataRole.UserRole, (collection, None))
            top.setToolTip(0, "\n".join(roots) or collection)
            self.tree.addTopLevelItem(top)
            for f in files:
                state = state_words(f)  # a file that could not be read says why, not only on hover (#63)
                item = QTreeWidgetItem([relative_name(f.path, roots), state])
                item.setData(0, Qt.ItemDataRole.UserRole, (collection, os.fsdecode(f.raw_path)))
                item.setToolTip(0, f.path)
                item.setToolTip(1, f.error or state)
                if f.state == "error":
                    item.setForeground(1, red)
                top.addChild(item)
                if (collection, os.fsdecode(f.raw_path)) == keep:
                    self.tree.setCurrentItem(item)
            top.setExpanded(collection not in folded)
            if keep == (collection, None):
                self.tree.setCurrentItem(top)
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.remove_button.setEnabled(self.selected()[0] is not None)

    def _show_selected(self) -> None:
        """A file that could not be read, selected: why, in the line under the list."""
        collection, path = self.selected()
        f = next((f for f in self.snapshot.files if f.collection == collection and os.fsdecode(f.raw_path) == path),
                 None)
        if f is not None and f.state == "error":
            self._say(unreadable_line(f), error=True)

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {ERROR_COLOUR};" if error else "")

    # --- lifetime -------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop watching, cancel the job in flight (it stops between two files, leaving them done or pending),
        drop the queued ones, end the thread and close the index."""
        for timer in self._debounce.values():
            timer.stop()
        self.watch.stop()
        if self.worker_thread is None:
            return
        self.worker.cancel.set()
        self.worker_thread.quit()
        self.worker_thread.wait()
        self.worker_thread = None
        self.worker.close()
