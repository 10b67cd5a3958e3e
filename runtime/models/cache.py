"""The model cache: the one module that knows its layout and its manifest.

    <root>/<name>/{f16,q8_0,q4_k_m}.gguf
    <root>/<name>/manifest.json
    <root>/<name>/.lock

The root is ``models`` in the data folder (runtime.paths: ``$SPECQUANT_DATA_DIR`` or the per-user one) or
``$SPECQUANT_CACHE_DIR``. Models are expensive to rebuild, so they live in the data directory, not where OS
cleaners purge caches.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from runtime.atomic import write_text_atomic
from runtime.errors import Cancelled, UserError
from runtime.paths import data_dir, private_dir

TIERS = ("f16", "q8_0", "q4_k_m")
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1
DEMO_NAME = "smollm2-135m-instruct"
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# Windows opens the device, not a folder, for these names, with any extension (`con.txt` too).
_WINDOWS_DEVICES = frozenset(
    ["con", "prn", "aux", "nul", "conin$", "conout$"] + [f"{d}{i}" for d in ("com", "lpt") for i in "123456789"]
)


def size_text(n: float) -> str:
    """A file or download size as the model manager shows it: "3.09 GB", or "900 MB" under a gigabyte."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def cache_root() -> Path:
    """Where models live: $SPECQUANT_CACHE_DIR, else `models` in the data folder (runtime.paths)."""
    env = os.environ.get("SPECQUANT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return data_dir() / "models"


def default_wheel_dir(flavour: str) -> Path:
    """setup.sh's build folder for one llama-cpp-python flavour: $SPECQUANT_WHEELS or
    ~/.cache/specquant/wheels, then the flavour; it holds the wheel and, after `./setup.sh bench`, llama.cpp's
    own tools."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("SPECQUANT_WHEELS") or cache / "specquant" / "wheels") / flavour


def check_name(name: str) -> str:
    """A model name is a folder name on every OS: lower-case letters, digits, '.', '_' and '-', starting with a
    letter or digit, not ending in '.' (Windows drops it), and none of Windows' device names."""
    # fullmatch: `$` in `match` would let a trailing newline through.
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name.endswith("."):
        raise UserError(
            f"invalid model name {name!r}: use 1-64 lower-case letters, digits, '.', '_' or '-', "
            "starting with a letter or digit and not ending in '.'"
        )
    if name.split(".", 1)[0] in _WINDOWS_DEVICES:
        raise UserError(f"invalid model name {name!r}: {name.split('.', 1)[0]} is a reserved device name on Windows")
    return name


def ensure_dir(path: Path) -> Path:
    """Create a directory, turning OS failures into one clear line."""
    try:
        private_dir(path)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"cannot create cache directory {path}: a file is in the way") from None
    except OSError as e:
        raise UserError(f"cannot create cache directory {path}: {e.strerror}") from None
    return path


@dataclass(frozen=True)
class ModelDir:
    """Paths of one model in the cache. Nobody else builds paths into it."""

    root: Path
    name: str

    @property
    def path(self) -> Path:
        return self.root / self.name

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def tier_path(self, tier: str) -> Path:
        return self.path / f"{tier}.gguf"

    def partial_path(self, tier: str) -> Path:
        return self.path / f"{tier}.gguf.partial"

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when it is missing or unreadable (the model then counts as incomplete)."""
        try:
            data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
            return None
        return data

    def write_manifest(self, data: dict[str, Any]) -> None:
        atomic_write_text(self.manifest_path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def tier_rows(self, manifest: dict[str, Any]) -> list[dict[str, Any]]:
        """The `tiers` list that `convert --json` and `list --json` print."""
        rows = []
        for tier in TIERS:
            rec = manifest.get("tiers", {}).get(tier)
            if rec:
                rows.append(
                    {"tier": tier, "path": str(self.tier_path(tier))}
                    | {k: rec[k] for k in ("sha256", "bytes", "tensor_types", "fallbacks")}
                )
        return rows

    def remove_partials(self) -> None:
        """Leftovers of a killed run are never valid; remove them before writing anew."""
        for p in self.path.glob("*.partial"):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the model's lock file; a second converter of the same model gets a clear error.

        An OS lock (filelock: flock, or msvcrt on Windows), so a killed process never leaves a stale lock.
        """
        ensure_dir(self.path)
        lock_path = self.path / ".lock"
        try:
            with filelock.FileLock(lock_path, timeout=0):
                yield
        except filelock.Timeout:
            raise UserError(f"model {self.name!r} is being converted by another process ({lock_path})") from None


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a uniquely named sibling, fsync, rename (runtime.atomic): readers see the old file or the new
    one, and two processes writing at once cannot take each other's temporary file."""
    try:
        write_text_atomic(path, text)
    except OSError as e:
        raise disk_error(path, e) from None


def disk_error(path: Path, e: OSError) -> UserError:
    """One line for an OS failure while writing `path`; a full disk says so."""
    if e.errno == errno.ENOSPC:
        return UserError(f"disk full while writing {path}")
    return UserError(f"cannot write {path}: {e.strerror or e}")


def sha256_file(path: Path, cancel: Callable[[], bool] | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
            if cancel is not None and cancel():
                raise Cancelled("cancelled")
    return h.hexdigest()


def tier_is_intact(model: ModelDir, tier: str, record: dict[str, Any] | None) -> bool:
    """True when the tier file exists and matches the manifest's size and sha256."""
    path = model.tier_path(tier)
    if not record or not path.is_file():
        return False
    if path.stat().st_size != record.get("bytes"):
        return False
    return sha256_file(path) == record.get("sha256")


@dataclass(frozen=True)
class CachedModel:
    """What `specquant list` shows of one model folder."""

    name: str
    path: Path
    manifest: dict[str, Any] | None
    tiers_present: tuple[str, ...]

    @property
    def complete(self) -> bool:
        m = self.manifest
        return m is not None and all(t in m.get("tiers", {}) for t in TIERS) and self.tiers_present == TIERS


def list_models(root: Path | None = None) -> list[CachedModel]:
    root = cache_root() if root is None else root
    if not root.is_dir():
        return []
    models = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and _NAME_RE.fullmatch(p.name)):
        md = ModelDir(root, d.name)
        present = tuple(t for t in TIERS if md.tier_path(t).is_file())
        models.append(CachedModel(d.name, d, md.read_manifest(), present))
    return models


def complete_models(root: Path | None = None) -> list[CachedModel]:
    """The cached models with every tier in place: those a chat or the API can answer with."""
    return [m for m in list_models(root) if m.complete]


def delete_model(root: Path, name: str) -> None:
    """Remove a model folder, refusing while another process converts it. A model folder that is a symbolic
    link (or a Windows junction) loses the link only: what it points at is never touched."""
    model = ModelDir(root, check_name(name))
    if _is_link(model.path):
        try:
            model.path.unlink()
        except OSError as e:
            raise UserError(f"cannot remove the link {model.path}: {e.strerror or e}") from None
        return
    if not model.path.is_dir():
        raise UserError(f"no model {name!r} in {root}")
    with model.lock():
        # Remove the manifest first: an interrupted delete then reads as incomplete, never as valid.
        model.manifest_path.unlink(missing_ok=True)
        remove_contents(model.path)
    shutil.rmtree(model.path, ignore_errors=True)
    if model.path.exists():
        raise UserError(f"could not remove every file of {model.path}; delete the folder by hand")


def _is_link(path: Path) -> bool:
    return path.is_symlink() or bool(getattr(path, "is_junction", lambda: False)())


def remove_contents(folder: Path) -> None:
    """Delete everything in `folder` but its held `.lock` (open, which Windows would refuse to delete). Links
    inside are removed as links; their targets are left alone."""
    for p in folder.iterdir():
        if p.name == ".lock":
            continue
        if p.is_dir() and not _is_link(p):
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


def fsync_file(path: Path) -> None:
    """Flush a finished file to disk before it is renamed into place: after a crash the new name then holds the
    whole file, never a hole (the rename is journalled before the data otherwise)."""
    try:
        fd = os.open(path, os.O_RDONLY if sys.platform != "win32" else os.O_RDWR)
    except OSError as e:
        raise disk_error(path, e) from None
    try:
        os.fsync(fd)
    except OSError as e:
        raise disk_error(path, e) from None
    finally:
        os.close(fd)


# --- the model catalogue's file and downloads: what the converter needs of them without runtime.plan.catalog ---
DOWNLOAD_MARGIN = 64 * 1024 * 1024  # what a download leaves free at least (the converter keeps the same margin)
_COMMIT = re.compile(r"[0-9a-f]{40}")


def catalog_path() -> Path:
    """assets/catalog.json next to the packages, or inside a PyInstaller bundle (which carries assets/)."""
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[2]))
    return base / "assets" / "catalog.json"


def pinned_revision(repo: str, path: Path | None = None) -> str | None:
    """The commit the catalogue pins `repo` to, or None for a repo it does not list (the Hub's main then).
    A damaged catalogue pins nothing here: Discover reports it (runtime.plan.catalog), and a repo id typed by hand
    still downloads."""
    try:
        data = json.loads((path or catalog_path()).read_text(encoding="utf-8"))
        entry = next(m for m in data["models"] if isinstance(m, dict) and m.get("repo") == repo)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None
    revision = entry.get("revision")
    return revision if isinstance(revision, str) and _COMMIT.fullmatch(revision) else None


def check_download_space(sizes: Mapping[str, int], folder: Path, repo: str) -> None:
    """Refuse a download whose files (name -> bytes still to fetch) would not fit in `folder`'s free space,
    before the first byte: a download that fills the disk fails late and leaves the disk full."""
    need = sum(sizes.values())
    if not need:
        return
    probe = folder
    while not probe.exists() and probe != probe.parent:  # the HF cache may not exist yet: ask its volume
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need + DOWNLOAD_MARGIN:
        raise UserError(
            f"not enough disk space to download {repo}: its {len(sizes)} files need "
            f"{size_text(need + DOWNLOAD_MARGIN)} in {folder}, {size_text(free)} free"
        )
