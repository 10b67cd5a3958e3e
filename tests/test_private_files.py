"""Private by default (issue 59 item 3): the folders SpecQuant creates are 0700 and its files 0600 (a saved
prompt state holds a whole chat); an older version's 0755 default folder is narrowed on first use; only an
installer's artefacts stay readable by others. The prompt states say where they are and how much they use,
and `specquant cache clear` and the window's Settings remove them."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.atomic import replacing, write_text_atomic
from runtime.engine.prompt_cache import Identity
from runtime.engine.prompt_store import SUFFIX, PromptStore, store_usage
from tests.conftest import run_cli, run_cli_here

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Windows keeps the profile's ACLs")


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The usual umask, with which folders came out 0755 and files 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def identity() -> Identity:
    return Identity("m", "f16", ("/m/f16.gguf", 10, 1, "sha"), "b1", 1024, "")


def test_new_folders_and_files_are_the_owners_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # ~/.cache itself did not exist
    monkeypatch.delenv("SPECQUANT_PROMPT_STATES_DIR")
    store = PromptStore(max_bytes=1 << 20)
    store._write(identity(), tuple(range(300)), 280, b"the confidential system prompt" * 10)
    [state] = store.folder.glob(f"*{SUFFIX}")
    assert store.folder == tmp_path / "xdg-cache" / "specquant" / "prompt-states"
    assert [mode(p) for p in (tmp_path / "xdg-cache", store.folder.parent, store.folder)] == [0o700] * 3
    assert mode(state) == 0o600
    # written again over a file an older version left 0644: the owner's alone too
    old = tmp_path / "settings.json"
    old.write_text("{}")
    old.chmod(0o644)
    write_text_atomic(old, "{}")
    assert mode(old) == 0o600


def test_an_older_versions_wide_default_folder_is_narrowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("SPECQUANT_PROMPT_STATES_DIR")
    old = tmp_path / "xdg-cache" / "specquant" / "prompt-states"
    old.mkdir(parents=True)
    old.parent.chmod(0o755)
    PromptStore(max_bytes=1 << 20)._write(identity(), tuple(range(300)), 280, b"s" * 100)
    assert mode(old.parent) == 0o700  # the folder of ours; the cache folder above it is the user's own business


def test_databases_start_private_with_their_journals(tmp_path: Path) -> None:
    from app.store import Store
    from runtime.documents.index import Index

    store = Store()
    store.db.execute("CREATE TABLE IF NOT EXISTS t (x)")
    index = Index()
    data = Path(os.environ["SPECQUANT_DATA_DIR"])
    assert mode(data) == 0o700
    files = [p for p in data.iterdir() if not p.name.endswith(".lock")]
    assert {p.name for p in files} >= {"conversations.sqlite3", "documents.sqlite3", "conversations.sqlite3-wal"}
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    store.close()
    index.close()


def test_an_installers_artefact_stays_readable_by_others(tmp_path: Path) -> None:
    with replacing(tmp_path / "specquant.tar.gz", shared=True) as tmp:
        tmp.write_bytes(b"tarball")
    assert mode(tmp_path / "specquant.tar.gz") == 0o644
    with replacing(tmp_path / "private.json") as tmp:
        tmp.write_bytes(b"{}")
    assert mode(tmp_path / "private.json") == 0o600


def test_the_cache_command_says_where_and_clears(tmp_path: Path) -> None:
    store = PromptStore(max_bytes=1 << 20)
    for i in range(2):
        store._write(identity(), tuple(range(i, 300 + i)), 280, b"s" * 1000)
    shown = run_cli("cache", "--json")
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert out["folder"] == str(store.folder) and out["files"] == 2 and 2000 < out["bytes"] < 1 << 20
    assert out["max_bytes"] > 0
    # The rest in this process (run_cli_here): the same command and output, without three more interpreter starts.
    assert str(store.folder) in run_cli_here("cache").stdout
    cleared = run_cli_here("cache", "clear")
    assert cleared.returncode == 0 and "removed 2 prompt states" in cleared.stdout
    assert store_usage(store.folder) == (0, 0)
    assert "removed 0 prompt states" in run_cli_here("cache", "clear").stdout


def test_the_settings_clear_the_saved_prompts(qtbot) -> None:
    from app.settings import AppSettings
    from app.settings_dialog import SettingsDialog

    store = PromptStore(max_bytes=1 << 20)
    store._write(identity(), tuple(range(300)), 280, b"s" * 1000)
    dialog = SettingsDialog(AppSettings())
    qtbot.addWidget(dialog)
    assert dialog.saved_prompts.text().startswith("1 (") and str(store.folder) in dialog.saved_prompts.text()
    dialog.clear_prompts.click()
    assert store_usage(store.folder) == (0, 0)
    assert dialog.saved_prompts.text().startswith("0 (") and not dialog.clear_prompts.isEnabled()
