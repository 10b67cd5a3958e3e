"""`specquant-app`: the desktop window; `--self-test` for installers and CI; the terminal chat without a display."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.platform_libs import check_display, show_box, uses_xcb, x_display_problem

if TYPE_CHECKING:
    from PySide6.QtCore import QtMsgType

    from app.window import MainWindow

log = logging.getLogger("specquant.app")


def has_display() -> bool:
    """Windows and macOS always have one; on Linux, X11, Wayland or an explicit Qt platform."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))


def assets_dir() -> Path:
    """`assets/` next to the packages, or inside a PyInstaller bundle."""
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[1]))
    return base / "assets"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specquant-app", description="The SpecQuant desktop chat window.")
    p.add_argument(
        "--prompt", help="send this prompt when the window opens (the terminal chat without a display; the self-test's)"
    )
    p.add_argument("--self-test", action="store_true", help="headless: answer one prompt, check, exit 0 or 1")
    p.add_argument("--screenshot", type=Path, help="with --self-test: save a PNG of the window here")
    p.add_argument("--check-display", action="store_true",
                   help="check the system libraries the window needs on Linux (X11), say what is missing, exit 0 or 1")
    p.add_argument("-v", "--verbose", action="store_true", help="detailed logs on stderr")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    # llama.cpp logs an aborted decode (Stop) as errors; the window reports real failures itself, as banners.
    logging.getLogger("llama.cpp").setLevel(logging.DEBUG if args.verbose else logging.CRITICAL)
    if args.screenshot and not args.self_test:
        print("specquant-app: error: --screenshot needs --self-test", file=sys.stderr)
        return 2
    if args.check_display:
        return check_display_command()
    if args.self_test:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    elif not has_display():
        print("specquant-app: no display found; chatting in the terminal instead", file=sys.stderr)
        return terminal_chat(args.prompt)
    elif problem := display_problem():
        # Qt would abort on it with its reason on a debug channel: say it, and how to mend it, first.
        print(problem, file=sys.stderr)
        show_box(problem)
        return 1
    elif sys.platform.startswith("linux") and (unreachable := x_display_problem()):
        # Qt would abort on it (exit 134): the terminal chat answers instead, as with no display at all (#63).
        print(f"{unreachable}; chatting in the terminal instead", file=sys.stderr)
        return terminal_chat(args.prompt)
    return run_window(args)


def display_problem() -> str:
    """On Linux, when Qt will use its X11 plugin: the one line saying which of its libraries are missing."""
    return check_display() if sys.platform.startswith("linux") and uses_xcb() else ""


def check_display_command() -> int:
    """`--check-display`, for the install script: the X11 plugin's libraries, whatever the session."""
    if not sys.platform.startswith("linux"):
        print("specquant-app: the window needs no extra system libraries here")
        return 0
    problem = check_display()
    print(problem or "specquant-app: the window's system libraries are all present")
    return 1 if problem else 0


def terminal_chat(prompt: str | None) -> int:
    """`specquant chat` (with `prompt`, if given) as its own program on this terminal, its exit status ours:
    the window hands over to the command line and never imports it (one turn layer, two front ends). In a
    bundle the command line is the `specquant` program beside this one."""
    argv = ["chat", *(["--prompt", prompt] if prompt else [])]
    if getattr(sys, "frozen", False):
        program = Path(sys.executable)
        command = [str(program.with_name("specquant" + program.suffix)), *argv]
    else:
        command = [sys.executable, "-m", "commands", *argv]
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:  # the child had the Ctrl-C too, and ends on its own
        return 130


def run_window(args: argparse.Namespace) -> int:
    from PySide6.QtCore import QSettings, qInstallMessageHandler
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.settings import APPLICATION, ORGANIZATION
    from app.store import Store
    from app.window import MainWindow
    from runtime.errors import SpecQuantError

    qInstallMessageHandler(_qt_message)
    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("SpecQuant")
    app.setDesktopFileName("specquant")
    icon = assets_dir() / "icon.png"
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))
    try:
        if args.self_test:
            # The user's models, but a throw-away history and default settings: a check leaves no trace.
            scratch = Path(tempfile.mkdtemp(prefix="specquant-selftest-"))
            window = MainWindow(Store(scratch / "conversations.sqlite3"), QSettings(str(scratch / "settings.ini"),
                                                                                      QSettings.Format.IniFormat))
        else:
            window = MainWindow()
    except SpecQuantError as e:
        print(f"specquant-app: error: {e}", file=sys.stderr)
        # Started from a desktop icon, nobody reads stderr: say it in a box too (not offscreen: no one to close it).
        if not args.self_test and app.platformName() != "offscreen":
            from PySide6.QtWidgets import QMessageBox

            QMessageBox.warning(None, "SpecQuant", str(e))
        return 2
    _install_excepthook(window)
    window.show()
    if args.self_test:
        return _self_test(window, args.screenshot, args.prompt)
    if args.prompt:
        window.input.setPlainText(args.prompt)
        if window.model:
            window.send()
    return app.exec()


def _self_test(window: MainWindow, screenshot: Path | None, prompt: str | None) -> int:
    from app.selftest import PROMPT, SelfTestFailed, run_self_test

    try:
        print(run_self_test(window, screenshot, prompt or PROMPT))
        code = 0
    except SelfTestFailed as e:
        print(f"specquant-app: self-test failed: {e}", file=sys.stderr)
        code = 1
    window.close()
    return code


def _install_excepthook(window: MainWindow) -> None:
    """A bug in a slot must not take the window (or the conversation) down: log it and show a banner."""
    from runtime.errors import readable

    def hook(kind: type[BaseException], value: BaseException, tb: object) -> None:
        log.error("unexpected error", exc_info=(kind, value, tb))  # type: ignore[arg-type]
        with contextlib.suppress(RuntimeError):  # the window may already be gone
            window.banner.show_error(f"Something went wrong: {readable(value)}")

    sys.excepthook = hook


def _qt_message(mode: QtMsgType, context: object, message: str) -> None:
    """Qt's messages at their level: a fatal one (Qt aborts right after) on stderr and in a native box, never
    silent; critical and warnings to the log, shown on stderr by default; the rest, and the offscreen plugin's
    notices about what it cannot do, only with -v."""
    from PySide6.QtCore import QtMsgType

    qt = logging.getLogger("qt")
    if mode == QtMsgType.QtFatalMsg:
        line = "specquant-app: Qt: " + " ".join(message.split())  # one line, however Qt wrapped it
        print(line, file=sys.stderr, flush=True)
        show_box(line)
    elif mode == QtMsgType.QtCriticalMsg:
        qt.error("%s", message)
    elif mode == QtMsgType.QtWarningMsg and os.environ.get("QT_QPA_PLATFORM") != "offscreen":
        qt.warning("%s", message)
    else:
        qt.debug("%s", message)
