"""An upgrade keeps everything the user made (issue 64, point 7). Linux end to end: install version A, use it
through SpecQuant's own code (a conversation, a documents collection, a model file, the window's settings, a
preset file, a saved prompt state), install version B over it, and find all of it as it was; uninstalling keeps
it, and only `--delete-data` removes it. Windows' setup script and the macOS app are checked for what they
delete: only the program's own folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from installer import linux, macos, windows
from installer.metadata import Meta
from tests.conftest import REPO
from tests.test_installer import iss_sections, unpacked

ODD = "Données à garder"

# Run by SpecQuant's own code in a child whose HOME is the scratch home, as the installed program would:
# every path comes from runtime.paths, the prompt store and Qt, none is written here by hand.
USE = r"""
import json, sys
from pathlib import Path
from PySide6.QtCore import QSettings
from app.settings import APPLICATION, ORGANIZATION
from app.store import Store
from runtime.documents.index import Index
from runtime.engine import personas, prompt_store
from runtime.paths import config_dir, data_dir

if sys.argv[1] == "use":
    store = Store()
    store.add_message(store.create("kept across upgrades"), "user", "Remember me.")
    store.close()
    index = Index()
    index.collection_id("papers", create=True)
    index.close()
    (data_dir() / "models" / "demo").mkdir(parents=True, exist_ok=True)
    (data_dir() / "models" / "demo" / "tier.gguf").write_bytes(b"GGUF" * 1000)
    personas.persona_file().parent.mkdir(parents=True, exist_ok=True)
    personas.persona_file().write_text('{"mine": "Answer briefly."}')
    prompt_store.default_folder().mkdir(parents=True, exist_ok=True)
    (prompt_store.default_folder() / "state.bin").write_bytes(bytes(range(256)))
    settings = QSettings(ORGANIZATION, APPLICATION)
    settings.setValue("window/font_size", 15)
    settings.sync()
    print(json.dumps(sorted({str(p) for p in (data_dir(), config_dir(), prompt_store.default_folder(),
                                               Path(settings.fileName()))})))
else:
    store = Store()
    titles = [c.title for c in store.conversations()]
    index = Index()
    print(json.dumps({"titles": titles, "collections": [n for _, n in index.collections()],
                      "font": QSettings(ORGANIZATION, APPLICATION).value("window/font_size", type=int)}))
"""


def tarball(folder: Path, version: str) -> Path:
    """A real tarball (linux.write_tarball) of version `version`, whose program says which version it is."""
    meta = Meta("SpecQuant", version, "Desktop LLM runtime", with_demo=True)
    bundle = folder / "bundle"
    bundle.mkdir(parents=True)
    (bundle / "specquant-app").write_text(f'#!/bin/sh\necho "SpecQuant {version}"\n')
    (bundle / "specquant-app").chmod(0o755)
    (bundle / "specquant").symlink_to("specquant-app")
    path = folder / f"{meta.artefact_base('linux')}.tar.gz"
    linux.write_tarball(bundle, REPO / "assets" / "icon.png", meta, path)
    return path


def home_env(home: Path) -> dict[str, str]:
    """A fresh login's environment: this home, no XDG overrides, no SpecQuant folder variables."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "SPECQUANT_")) and k != "HOME"}
    return {**keep, "HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}


def sh(script: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["sh", str(script), *args], env=home_env(home), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def snapshot(folders: list[Path]) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for f in folders for p in sorted(f.rglob("*") if f.is_dir() else [f])
            if p.is_file()}


def test_upgrading_the_linux_install_keeps_everything_the_user_made(tmp_path: Path) -> None:
    home = tmp_path / ODD / "home"
    home.mkdir(parents=True)
    first = unpacked(tarball(tmp_path / "a", "1.0.0"), tmp_path / ODD / "a")
    sh(first / "install.sh", home)
    program = home / ".local/share/specquant-app"
    assert subprocess.run([home / ".local/bin/specquant-app"], capture_output=True, text=True).stdout == \
        "SpecQuant 1.0.0\n"

    used = subprocess.run([sys.executable, "-c", USE, "use"], cwd=REPO, env=home_env(home), capture_output=True,
                          text=True, timeout=120)
    assert used.returncode == 0, used.stderr
    folders = [Path(p) for p in json.loads(used.stdout)]
    assert all(str(f).startswith(str(home)) for f in folders)  # the child really used the scratch home
    assert not any(str(f).startswith(str(program)) for f in folders)  # nothing of the user's inside the program
    before = snapshot(folders)
    assert len(before) >= 6  # conversations, documents, the model, the preset, the prompt state, the settings

    second = unpacked(tarball(tmp_path / "b", "1.1.0"), tmp_path / ODD / "b")
    sh(second / "install.sh", home)
    assert subprocess.run([home / ".local/bin/specquant-app"], capture_output=True, text=True).stdout == \
        "SpecQuant 1.1.0\n"  # B replaced A
    assert snapshot(folders) == before
    read = subprocess.run([sys.executable, "-c", USE, "read"], cwd=REPO, env=home_env(home), capture_output=True,
                          text=True, timeout=120)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == {"titles": ["kept across upgrades"], "collections": ["papers"], "font": 15}

    sh(program / "uninstall.sh", home)
    assert not program.exists() and snapshot(folders) == before
    sh(second / "install.sh", home)
    sh(program / "uninstall.sh", home, "--delete-data")
    assert snapshot(folders) == {}  # on purpose, everything of the user's is gone


def test_the_windows_setup_deletes_only_its_own_folder() -> None:
    """Inno Setup removes on uninstall only what it installed (into {app}); the user's data lives in
    %LOCALAPPDATA%\\specquant and Qt's settings in the registry, which no section of the script names."""
    meta = Meta("SpecQuant", "1.2.3", "x", with_demo=True)
    sections = iss_sections(windows.inno_script(meta, "b", "b-setup", arch="x86_64"))
    assert not {"InstallDelete", "UninstallDelete", "Registry", "UninstallRun"} & set(sections)
    files = sections["Files"]
    assert files and all('DestDir: "{app}"' in line for line in files)
    assert not any(re.search(r"uninsdelete|deleteafterinstall|\{(local)?appdata\}|\{userappdata\}", line, re.I)
                   for lines in sections.values() for line in lines)
    # A newer version upgrades the same installation (one AppId), into the folder the user chose then.
    assert windows.app_id(meta) == windows.app_id(Meta("SpecQuant", "9.0.0", "x"))
    assert "UsePreviousAppDir=no" not in "\n".join(sections["Setup"])


def test_the_mac_app_keeps_nothing_of_the_users_inside_itself() -> None:
    """On macOS the app is replaced or dragged to the Bin whole: nothing of the user's may live inside it. The
    folders SpecQuant writes there (platformdirs' macOS rules) are all in ~/Library."""
    from platformdirs.macos import MacOS

    dirs = MacOS("specquant", appauthor=False)
    home = str(Path.home())
    for folder in (dirs.user_data_dir, dirs.user_config_dir, dirs.user_cache_dir):
        assert folder.startswith(f"{home}/Library/") and ".app/" not in folder
    text = macos.dmg_readme(Meta("SpecQuant", "1.2.3", "x"))
    assert "~/Library/Application Support/specquant" in text and "keeps" in text


def test_the_disk_image_says_how_to_open_an_unnotarised_app_on_each_macos() -> None:
    text = macos.dmg_readme(Meta("SpecQuant", "1.2.3", "x"))
    assert text.startswith("SpecQuant 1.2.3 for macOS 14.0 or later")
    sequoia = text[text.index("- macOS 15 (Sequoia) and later"):text.index("- macOS 14")]
    assert "Privacy & Security" in sequoia and "Open Anyway" in sequoia and "no longer" in sequoia
    assert "- macOS 14 (Sonoma): Control-click @" not in text and "Control-click SpecQuant" in text
    assert "xattr -dr com.apple.quarantine /Applications/SpecQuant.app" in text
