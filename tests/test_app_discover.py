"""The model manager's Discover tab: the catalogue listed and checked against (faked) RAM, a bad catalogue,
and Download and convert: offline, from a local stand-in for the Hub with bytes shown, and cancelled midway."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.discover import PARTLY, TOO_BIG
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


def open_dialog(qtbot) -> ModelsDialog:
    dialog = ModelsDialog(lambda: None)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.tabs.setCurrentWidget(dialog.discover)
    return dialog


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
    assert seven.text(6) == "only Q4_K_M" and seven.foreground(6).color() == PARTLY
    assert "this computer has 8.0 GB: only Q4_K_M would fit" in seven.toolTip(6)
    assert tiny.text(6) == "fits" and tiny.text(5) == "Apache-2.0"
    assert seven.text(3) == "15.2 GB / 8.1 GB / 4.7 GB"
    pick(dialog, "Qwen/Qwen2.5-7B-Instruct")
    assert "only Q4_K_M would fit" in dialog.discover.note.text() and dialog.discover.download_button.isEnabled()

    monkeypatch.setattr(catalog.psutil, "virtual_memory", lambda: Memory(2 * 10**9))
    dialog.discover.reload()
    seven = tree.findItems("Qwen2.5-7B-Instruct", Qt.MatchFlag.MatchExactly)[0]
    assert seven.text(6) == "too big" and seven.foreground(6).color() == TOO_BIG
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
        assert dialog.discover.tree.topLevelItem(0).text(6) == "fits · installed"  # marked from the manifest
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
