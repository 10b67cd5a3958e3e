"""The converter's worker: `converters.convert` on a QThread, its progress and result as signals (turns run
on app.turn_runner's threads). The GUI thread never runs a conversion; *Cancel* is an Event it sets.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from PySide6.QtCore import QObject, QThread, Signal, Slot

from runtime.errors import Cancelled, readable

log = logging.getLogger("specquant.app")


@dataclass(frozen=True)
class ConvertJob:
    # One object, not (str, str, bool) arguments: PySide6 6.12 mis-counts references to a bool passed
    # through a queued connection, and the interpreter then aborts at exit ("bool_dealloc").
    source: str
    name: str = ""
    allow_requant: bool = False
    download: bool = False  # a Hugging Face repo id: download it first, reporting ConvertProgress("download", bytes)


class ConvertWorker(QObject):
    """Runs `converters.convert` (its quantizer in a child process) and reports progress."""

    progress = Signal(object)  # converters.convert.ConvertProgress
    done = Signal(str)  # model name
    failed = Signal(str)  # a readable one-line reason; "" when cancelled

    def __init__(self) -> None:
        super().__init__()
        self.cancel = threading.Event()

    @Slot(object)
    def run(self, job: ConvertJob) -> None:
        from converters.convert import ConvertProgress, convert
        from converters.sources import download

        self.cancel.clear()
        try:
            if job.download:
                # Its own phase, so its bytes and ETA show; convert() then finds the files in the HF cache.
                download(
                    job.source,
                    lambda done, total: self.progress.emit(ConvertProgress("download", done, total)),
                    self.cancel,
                )
            manifest = convert(
                job.source, name=job.name or None, allow_requant=job.allow_requant, on_progress=self.progress.emit,
                cancel=self.cancel,
            )
        except Cancelled:
            self.failed.emit("")
        except Exception as e:
            log.debug("conversion failed", exc_info=True)
            self.failed.emit("" if self.cancel.is_set() else readable(e))
        else:
            self._measure_quality(manifest["name"])
            self.done.emit(manifest["name"])

    def _measure_quality(self, name: str) -> None:
        """What each tier keeps of F16's words (runtime.plan.quality), for the model list; kept figures when the
        tiers did not change. The model is ready either way: a cancel or a failure here only leaves the figures
        for later (`specquant info` measures them when missing)."""
        from converters.convert import ConvertProgress
        from runtime.models.cache import ModelDir, cache_root
        from runtime.plan import quality

        try:
            quality.load_or_measure(
                ModelDir(cache_root(), name),
                progress=lambda done, total: self.progress.emit(ConvertProgress("quality", done, total)),
                cancel=self.cancel,
            )
        except Exception as e:  # the conversion succeeded: the figures are an extra
            log.warning("could not measure what each tier of %s keeps of F16's words: %s", name, readable(e))


def start_thread(worker: QObject, name: str) -> QThread:
    """Move `worker` onto a new running thread that deletes nothing on its own (the owner waits for it)."""
    thread = QThread()
    thread.setObjectName(name)
    worker.moveToThread(thread)
    thread.start()
    return thread
