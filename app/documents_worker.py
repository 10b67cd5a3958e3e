"""The Documents panel's other side: the jobs it sends, the worker that runs them on its own thread with its own
Library (runtime.documents), and the watch on the added folders (watchdog), which reports that a folder changed.
No widgets here: app.documents_panel shows what these report."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from runtime.documents.library import DEFAULT_COLLECTION, AddResult, FileRecord, Library
from runtime.errors import UserError, readable

log = logging.getLogger("specquant.app")

# Changes that can alter what a sync finds. Not opened/closed/attrib: a sync reads the files it indexes, and
# those events would start the next sync, for ever. events_lost: inotify's queue overflowed, anything changed.
WATCHED_EVENTS = frozenset({"created", "modified", "deleted", "moved", "events_lost"})


@dataclass(frozen=True)
class DocumentsJob:
    verb: str  # add | sync | remove
    paths: tuple[str, ...] = ()
    collection: str | None = None  # sync: None for every collection; remove: with no path, the whole collection
    automatic: bool = False  # the start's sync or a watched folder's: it speaks only when something changed


@dataclass(frozen=True)
class IndexListing:
    """What the index holds: every file, and each collection's added folders and files (what is watched)."""

    files: tuple[FileRecord, ...] = ()
    roots: dict[str, tuple[str, ...]] = field(default_factory=dict)  # collection → added paths, in name order


SETTING_UP = "Setting up the embedding model for search (once; the first time it is converted)…"


def worth_a_sync(event: FileSystemEvent, ignore: str) -> bool:
    """Whether a watched folder's event can change what a sync finds: not the index's own files (a folder
    added with the data directory in it), not hidden files (the walk passes over them: editors' swap files),
    not a folder's own 'modified' (its files' events say what changed)."""
    if event.event_type not in WATCHED_EVENTS:
        return False
    if event.event_type == "events_lost":
        return True
    if event.is_directory and event.event_type == "modified":
        return False
    paths = [os.fsdecode(p) for p in (event.src_path, getattr(event, "dest_path", "")) if p]
    return any(not p.startswith(ignore) and not os.path.basename(p).startswith(".") for p in paths)


# --- the documents worker: its own thread, its own Library --------------------------------------------------


class DocumentsWorker(QObject):
    """Runs documents jobs one at a time on its thread. The Library is opened here, on first use (a missing
    index is not created just to list it), and only ever used here."""

    progress = Signal(object)  # runtime.documents.IndexProgress, before each file and at the end
    done = Signal(object, object)  # the DocumentsJob, its AddResult (add, sync) or files removed (remove)
    failed = Signal(object, str)  # the DocumentsJob (None: listing the index failed), one line saying why
    snapshot = Signal(object)  # Snapshot, after every job
    setting_up = Signal(str)  # the embedding model is being set up: the first file's wait says so (#51)

    def __init__(self, index: Path) -> None:
        super().__init__()
        self.index = index
        self.cancel = threading.Event()  # set when the window closes: an add or sync stops between two files
        self.stop = threading.Event()  # Stop: the job in flight stops between two files; queued ones still run
        self.library: Library | None = None

    @Slot(object)
    def run(self, job: DocumentsJob) -> None:
        if self.cancel.is_set():  # closing: jobs still queued behind the cancelled one are dropped
            return
        self.stop.clear()  # a Stop meant the job before this one
        try:
            result = self._run(job)
        except UserError as e:
            self.failed.emit(job, str(e))
        except Exception as e:  # a bug: a traceback in the log, one line in the panel
            log.warning("documents job %s failed", job.verb, exc_info=True)
            self.failed.emit(job, f"Indexing failed: {readable(e)}")
        else:
            self.done.emit(job, result)
        try:
            self.snapshot.emit(self._snapshot())
        except UserError as e:
            self.failed.emit(None, str(e))
        except Exception as e:
            log.warning("listing the documents index failed", exc_info=True)
            self.failed.emit(None, f"The documents index cannot be read: {readable(e)}")

    def _open(self, create: bool) -> Library | None:
        if self.library is None and (create or self.index.exists()):
            # The embedding model, converted here on first use (on this thread): hybrid search, as the CLI's;
            # without its package, words alone (logged).
            from converters.embedding import ensure_embedding_model, package_zip
            from runtime.engine.embedder import open_embedder

            def convert(path: Path) -> None:  # run once, at the first embedding: the wait that looked stuck
                self.setting_up.emit(SETTING_UP)
                ensure_embedding_model(path)

            embedder = open_embedder(None, convert, package_zip, log.info)
            self.library = Library(self.index, embedder=embedder)
        return self.library

    def _run(self, job: DocumentsJob) -> AddResult | int:
        if job.verb == "sync" and not self.index.exists():
            return AddResult()  # nothing added yet: no index to create
        lib = self._open(create=True)
        assert lib is not None
        if job.verb == "add":
            return lib.add(job.paths, job.collection or DEFAULT_COLLECTION, self.progress.emit, self._stopping())
        if job.verb == "sync":
            return lib.sync(job.collection, self.progress.emit, self._stopping())
        if job.verb == "remove":
            return lib.remove(job.paths[0] if job.paths else None, job.collection)
        raise ValueError(f"unknown documents job {job.verb!r}")

    def _stopping(self) -> threading.Event:
        """What the Library checks between two files: set by Stop or by closing the window, whichever comes."""
        return _Either(self.cancel, self.stop)

    def _snapshot(self) -> IndexListing:
        lib = self._open(create=False)
        if lib is None:
            return IndexListing()
        roots = {name: tuple(sorted(os.fsdecode(p) for p in lib.index.roots(cid)[0]))
                 for cid, name in lib.index.collections()}
        return IndexListing(tuple(lib.list_files()), roots)

    def close(self) -> None:
        """Once its thread has ended (nothing else uses the Library then)."""
        if self.library is not None:
            self.library.close()
            if self.library.embedder is not None:
                self.library.embedder.close()
            self.library = None


class _Either(threading.Event):
    """Set when either of two events is (the Library only asks `is_set`)."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        super().__init__()
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()


# --- watching the added folders ------------------------------------------------------------------------------


class _Changes(FileSystemEventHandler):
    """One collection's folders: on watchdog's observer thread, says that something changed, nothing more."""

    def __init__(self, collection: str, report: Callable[[str], None], ignore: str) -> None:
        self.collection = collection
        self.report = report
        self.ignore = ignore

    def on_any_event(self, event: FileSystemEvent) -> None:
        if worth_a_sync(event, self.ignore):
            self.report(self.collection)


class FolderWatch(QObject):
    """watchdog's observer over every added folder; `changed` (queued to the GUI thread) names a collection
    whose folders changed on disk."""

    changed = Signal(str)

    def __init__(self, index: Path) -> None:
        super().__init__()
        self.ignore = str(index)  # documents.sqlite3 and its -wal, -shm, -journal
        self.observer: Any = None
        self.watched: frozenset[tuple[str, str]] = frozenset()

    def watch(self, roots: dict[str, tuple[str, ...]]) -> str:
        """Watch these folders (collection → added paths; files are synced with their collection) and stop
        watching others. Returns "" or one line naming a folder that cannot be watched."""
        wanted = frozenset((c, p) for c, paths in roots.items() for p in paths if os.path.isdir(p))
        if wanted == self.watched:
            return ""
        if self.observer is None:
            self.observer = Observer()
            self.observer.daemon = True  # never keeps the process alive, should stop() be missed
            self.observer.start()
        self.observer.unschedule_all()
        self.watched = wanted
        problem = ""
        for collection, folder in sorted(wanted):
            try:
                self.observer.schedule(_Changes(collection, self.changed.emit, self.ignore), folder, recursive=True)
            except OSError as e:  # e.g. inotify's watch limit: the folder is still synced by hand
                problem = f"{folder} is not watched for changes ({e.strerror or e}); use Sync after changing it."
                log.warning("%s", problem)
        return problem

    def stop(self) -> None:
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(timeout=5)
            self.observer = None
        self.watched = frozenset()
