"""`specquant-app --self-test`: open the window, set up the demo model if needed, answer one prompt, check
the status bar, optionally save a screenshot. The installer and CI run it headless."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEventLoop
from PySide6.QtWidgets import QApplication

from app.window import MainWindow

PROMPT = "Name three primary colors."
TIMEOUT_S = 600.0


class SelfTestFailed(Exception):
    pass


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Run the event loop until `condition()` holds; the worker threads keep going meanwhile."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SelfTestFailed(f"timed out after {timeout:.0f} s waiting for {what}")
        QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.01)


def run_self_test(window: MainWindow, screenshot: Path | None = None, prompt: str = PROMPT) -> str:
    """Raise SelfTestFailed with the reason, or return a one-line summary."""
    if not window.model:
        window.setup_demo()
        wait_until(lambda: not window.models.converting, TIMEOUT_S, "the demo model to be set up")
        if not window.model:
            raise SelfTestFailed(f"could not set up the demo model: {window.models.last_error or 'unknown reason'}")
    answers: list[str] = []
    window.answer_finished.connect(answers.append)
    window.input.setPlainText(prompt)
    window.send()
    wait_until(lambda: answers, TIMEOUT_S, "the answer")
    if not answers[0]:
        raise SelfTestFailed(f"no answer: {window.banner.message or 'the answer was empty'}")
    checks = {
        "level": window.badge.level in ("low", "medium", "high"),
        # The default may answer with a tier alone and n-gram lookup (fast, #61): "Q4_K_M ← n-gram".
        "precision": re.fullmatch(r"(F16|Q8_0|Q4_K_M)( ← (Q8_0|Q4_K_M|n-gram))?", window.precision.text()) is not None,
        "tok/s": re.fullmatch(r"\d+\.\d tok/s", window.speed.text()) is not None,
    }
    missing = [name for name, ok in checks.items() if not ok]
    if missing:
        raise SelfTestFailed(f"the status bar lacks: {', '.join(missing)}")
    platform = QApplication.platformName()
    if platform != "offscreen":
        # A real platform (the installers' check runs one on each desktop): the pass must mean the window
        # opened there, not only that the widgets answered.
        handle = window.windowHandle()
        wait_until(lambda: handle is not None and handle.isExposed(), 60, f"the window to appear ({platform})")
    if screenshot is not None:
        window.transcript.verticalScrollBar().setValue(0)
        QApplication.processEvents()
        if not window.grab().save(str(screenshot)):
            raise SelfTestFailed(f"could not write the screenshot {screenshot}")
    return (
        f"self-test passed ({platform}): {window.model}, {window.badge.level} · {window.precision.text()} · "
        f"{window.speed.text()} · {window.acceptance.text()} · {window.placement.text()}"
    )
