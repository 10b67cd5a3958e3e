"""The window under a real X server (Xvfb) with real fonts (#51): its main screens render, and no text is cut
off (scripts/window_screenshots.py's check); the check itself finds a cut-off label and column."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from scripts.window_screenshots import SIZE, cut_off
from tests.conftest import REPO

SCREENS = ("first", "answer", "tools", "addserver", "approval", "models", "about")


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the IHDR chunk
    return width, height


@pytest.mark.skipif(not shutil.which("xvfb-run"), reason="needs xvfb-run (Xvfb)")
def test_main_screens_under_xvfb_cut_off_no_text(demo_cache: Path, tmp_path: Path) -> None:
    command = ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24", "env", "QT_QPA_PLATFORM=xcb", sys.executable,
               str(REPO / "scripts/window_screenshots.py"), "--out", str(tmp_path), "--max-tokens", "8",
               "--screens", *SCREENS]
    run = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    for screen in SCREENS:
        path = tmp_path / f"window-{screen}.png"
        assert f"{path}: no text cut off" in run.stdout
        if screen not in ("models", "about", "addserver", "approval"):  # dialogs have their own size
            assert png_size(path) == SIZE, screen


def test_the_check_finds_a_cut_off_label_and_column(qtbot) -> None:
    root = QWidget()
    qtbot.addWidget(root)
    layout = QVBoxLayout(root)
    label = QLabel("A label whose text is much wider than the room it was given")
    label.setMinimumWidth(1)
    label.setFixedWidth(60)
    tree = QTreeWidget()
    tree.setHeaderLabels(["Name", "Notes"])
    tree.addTopLevelItem(QTreeWidgetItem(["short", "a note far longer than its column's forty pixels"]))
    tree.header().setStretchLastSection(False)
    tree.setColumnWidth(1, 40)
    layout.addWidget(label)
    layout.addWidget(tree)
    root.resize(500, 300)
    root.show()
    found = cut_off(root)
    assert any(f.startswith("label 'A label whose") for f in found), found
    assert any(f.startswith("column 1 (Notes)") for f in found), found
    assert not any(f.startswith("column 0") for f in found), found
    label.setFixedWidth(label.sizeHint().width())
    tree.setColumnWidth(1, tree.sizeHintForColumn(1))
    assert cut_off(root) == []
