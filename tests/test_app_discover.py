"""The model manager's Discover tab: the catalogue listed and checked against (faked) RAM, a bad catalogue,
and Download and convert: offline, from a local stand-in for the Hub with bytes shown, and cancelled midway."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import huggingface_hub
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from app.discover import COLUMNS, FIT, PARTLY, TOO_BIG, _size
from app.models_dialog import ModelsDialog
from runtime.plan import catalog
from tests.hf_export import export_to_hf
from tests.test_catalog import GOOD, FakeHub, go_offline, serve_hub

MICRO = "test-org/Micro-Instruct"


class Memory:
    def __init__(self, total: int) -> None:
        self.total = total


@pytest.fixture(scope="module")
def micro_hf(tmp_path_factory: pytest.TempPathFactory, micro_gguf: Path) -> Path:
    return export_to_hf(micro_gguf, tmp_path_factory.mktemp("micro-hf") / "micro")


@pytest.fixture
def micro_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A catalogue whose only model is the micro model, served by the fake Hub."""
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"schema": 1, "models": [{**GOOD, "repo": MICRO, "params": 14_000_000}]}))
    monkeypatch.setattr(catalog, "catalog_path", lambda: path)
    return path


def open_dialog(qtbot, confirmed: bool = True) -> ModelsDialog:
    """The model manager on Discover; `confirmed`: every download's question is answered Yes (its own test
    asks it for real)."""
    dialog = ModelsDialog(lambda: None)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.tabs.setCurrentWidget(dialog.discover)
    if confirmed:
        dialog.discover.confirm = lambda entry: True
    return dialog


def button_at(dialog: ModelsDialog) -> QPoint:
    QApplication.processEvents()
    dialog.layout().activate()
    return dialog.discover.download_button.mapTo(dialog, QPoint(0, 0))


def pick(dialog: ModelsDialog, repo: str) -> None:
    tree = dialog.discover.tree
    item = next(
        tree.topLevelItem(i)
        for i in range(tree.topLevelItemCount())
        if tree.topLevelItem(i).data(0, Qt.ItemDataRole.UserRole) == repo
    )
    tree.setCurrentItem(item)


def test_discover_lists_the_catalogue_and_marks_what_will_not_fit(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog.psutil, "virtual_memory", lambda: Memory(8 * 10**9))
    dialog = open_dialog(qtbot)
    tree = dialog.discover.tree
    rows = {tree.topLevelItem(i).text(0): tree.topLevelItem(i) for i in range(tree.topLevelItemCount())}
    entries = catalog.load_catalog()
    assert list(rows) == [e.name for e in entries]  # every entry, none hidden
    seven, tiny = rows["Qwen2.5-7B-Instruct"], rows["SmolLM2-360M-Instruct"]
    assert seven.text(FIT) == "only Q4_K_M" and seven.foreground(FIT).color() == PARTLY
    assert "this computer has 8.0 GB: only Q4_K_M would fit" in seven.toolTip(FIT)
    assert tiny.text(FIT) == "fits" and tiny.text(COLUMNS.index("Licence")) == "Apache-2.0"
    assert seven.text(COLUMNS.index("F16 / Q8_0 / Q4_K_M")) == "15.2 GB / 8.1 GB / 4.7 GB"
    pick(dialog, "Qwen/Qwen2.5-7B-Instruct")
    assert "only Q4_K_M would fit" in dialog.discover.note.text() and dialog.discover.download_button.isEnabled()

    monkeypatch.setattr(catalog.psutil, "virtual_memory", lambda: Memory(2 * 10**9))
    dialog.discover.reload()
    seven = tree.findItems("Qwen2.5-7B-Instruct", Qt.MatchFlag.MatchExactly)[0]
    assert seven.text(FIT) == "too big" and seven.foreground(FIT).color() == TOO_BIG
    assert tree.topLevelItemCount() == len(entries)
    dialog.shutdown()


def test_a_malformed_catalogue_is_one_line_in_discover(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "catalog.json"
    bad.write_text(json.dumps({"schema": 1, "models": [GOOD, {**GOOD, "repo": "org/b", "licence": ""}]}))
    monkeypatch.setattr(catalog, "catalog_path", lambda: bad)
    dialog = open_dialog(qtbot)
    text = dialog.discover.error.text()
    assert dialog.discover.error.isVisible() and text.startswith(f"{bad}: entry 2 (org/b): 'licence'")
    assert "\n" not in text and dialog.discover.tree.topLevelItemCount() == 0
    assert not dialog.discover.download_button.isEnabled()
    dialog.shutdown()


def test_offline_download_is_one_line_and_leaves_nothing(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path
) -> None:
    go_offline(tmp_path, monkeypatch)
    dialog = open_dialog(qtbot)
    pick(dialog, "Qwen/Qwen2.5-0.5B-Instruct")
    with qtbot.waitSignal(dialog.conversion_ended, timeout=30_000) as ended:
        qtbot.mouseClick(dialog.discover.download_button, Qt.MouseButton.LeftButton)
    line = dialog.stage.text()
    assert ended.args[1] == line and "\n" not in line
    assert line.startswith("Qwen/Qwen2.5-0.5B-Instruct is not in the Hugging Face cache and cannot be downloaded")
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())
    assert dialog.discover.download_button.isEnabled()  # ready to try again
    dialog.shutdown()


def test_the_fit_column_is_on_screen_at_the_default_size(qtbot) -> None:
    """#63: "This computer" was the last column, off-screen at the dialog's default size."""
    dialog = open_dialog(qtbot)
    QApplication.processEvents()
    tree = dialog.discover.tree
    right = tree.header().sectionViewportPosition(FIT) + tree.header().sectionSize(FIT)
    assert COLUMNS.index("Parameters") > FIT and right <= tree.viewport().width()
    dialog.shutdown()


def test_selecting_a_row_leaves_the_download_button_where_it_was(qtbot) -> None:
    """#63: the description grew under the list and moved Download and convert under the pointer."""
    dialog = open_dialog(qtbot)
    before = button_at(dialog)
    for entry in sorted(catalog.load_catalog(), key=lambda e: len(e.description), reverse=True)[:3]:
        pick(dialog, entry.repo)
        assert entry.description in dialog.discover.note.text()
        assert button_at(dialog) == before, entry.repo
    dialog.shutdown()


def test_a_download_asks_first_and_names_its_size(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    """#63: one click started a 1 GB download."""
    asked: list[str] = []
    answer = [QMessageBox.StandardButton.No]
    monkeypatch.setattr("app.discover.QMessageBox.question", lambda parent, title, text, *a: asked.append(text)
                        or answer[0])
    dialog = open_dialog(qtbot, confirmed=False)
    pick(dialog, "Qwen/Qwen2.5-0.5B-Instruct")
    entry = dialog.discover.selected()
    requested: list[str] = []
    dialog.discover.download_requested.connect(requested.append)
    qtbot.mouseClick(dialog.discover.download_button, Qt.MouseButton.LeftButton)
    assert not requested and not dialog.converting  # No: nothing starts
    assert len(asked) == 1 and entry.name in asked[0] and f"({_size(entry.download_bytes)})" in asked[0]
    dialog.discover.download_requested.disconnect()
    answer[0] = QMessageBox.StandardButton.Yes
    dialog.discover.download_requested.connect(requested.append)
    dialog.discover._download()
    assert requested == ["Qwen/Qwen2.5-0.5B-Instruct"]
    dialog.shutdown()


def test_a_download_with_the_hub_out_of_reach_fails_at_once_in_plain_words(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path
) -> None:
    """#63: offline (no HF_HUB_OFFLINE), "Downloading…" spun ~25 s and ended in "(offline or HF_HUB_OFFLINE=1)"."""
    go_offline(tmp_path, monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with socket.socket() as s:  # a port nobody listens on: the connection is refused, as without a network
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    dialog = open_dialog(qtbot)
    pick(dialog, "Qwen/Qwen2.5-0.5B-Instruct")
    with qtbot.waitSignal(dialog.conversion_ended, timeout=15_000) as ended:
        qtbot.mouseClick(dialog.discover.download_button, Qt.MouseButton.LeftButton)
    line = dialog.stage.text()
    assert ended.args[1] == line and "\n" not in line
    assert "cannot reach" in line and "connect to the internet" in line and "HF_HUB_OFFLINE" not in line, line
    dialog.shutdown()


@pytest.mark.slow
def test_download_shows_bytes_then_converts(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path, micro_hf: Path, micro_catalogue
) -> None:
    with serve_hub(monkeypatch, tmp_path / "hub", FakeHub(MICRO, micro_hf)) as hub:
        dialog = open_dialog(qtbot)
        pick(dialog, MICRO)
        shown: list[str] = []
        dialog.progressed.connect(lambda p: shown.append(dialog.stage.text()) if p.stage == "download" else None)
        # The download, the conversion, then its quality figures (runtime.plan.quality).
        with qtbot.waitSignal(dialog.conversion_ended, timeout=120_000) as ended:
            qtbot.mouseClick(dialog.discover.download_button, Qt.MouseButton.LeftButton)
            assert not dialog.discover.download_button.isEnabled()  # one at a time
        assert ended.args == ["micro-instruct", ""] and "micro-instruct is ready" in dialog.stage.text()
        assert dialog.discover.tree.topLevelItem(0).text(FIT) == "fits · installed"  # marked from the manifest
        assert "Already converted as micro-instruct." in dialog.discover.note.text()
        total_mb = f"of {hub.total / 1e6:.0f} MB"
        assert shown and all(s.startswith(f"Downloading {MICRO}: ") for s in shown)
        assert shown[-1].startswith(f"Downloading {MICRO}: {hub.total / 1e6:.0f} MB {total_mb}"), shown[-1]
        assert any(" s left" in s for s in shown[:-1])  # an ETA while bytes are still coming
    assert dialog.tree.findItems("micro-instruct", Qt.MatchFlag.MatchExactly)
    dialog.shutdown()


@pytest.mark.slow
def test_cancel_during_the_download_leaves_no_model(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path, micro_hf: Path, micro_catalogue
) -> None:
    slow = FakeHub(MICRO, micro_hf, piece=256 * 1024, delay=0.05)
    with serve_hub(monkeypatch, tmp_path / "hub", slow) as hub:
        dialog = open_dialog(qtbot)
        pick(dialog, MICRO)
        with qtbot.waitSignal(dialog.progressed, timeout=30_000, check_params_cb=lambda p: p.done > 0):
            qtbot.mouseClick(dialog.discover.download_button, Qt.MouseButton.LeftButton)
        assert dialog.stage.text().startswith(f"Downloading {MICRO}: ")
        with qtbot.waitSignal(dialog.conversion_ended, timeout=30_000) as ended:
            qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
        assert ended.args == ["", ""] and "cancelled" in dialog.stage.text()
        assert hub.served < hub.total
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())
    assert dialog.discover.download_button.isEnabled()
    dialog.shutdown()
