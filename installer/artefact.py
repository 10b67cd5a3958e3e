"""Writing artefacts safely, and describing them: a half-written file never carries the final name."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

TEMPLATES = Path(__file__).with_name("templates")


@contextlib.contextmanager
def atomic(path: Path) -> Iterator[Path]:
    """Yield a `.partial` name to write; it becomes `path` only when the block finishes without error."""
    partial = path.with_name(path.name + ".partial")
    try:
        yield partial
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def fill(template: str, **values: str) -> str:
    """The template file's text with each @KEY@ replaced; a placeholder left over is a bug here."""
    text = (TEMPLATES / template).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key.upper()}@", value)
    left = set(re.findall(r"@([A-Z_]+)@", text)) - {"APPDIR"}  # @APPDIR@ is the install script's to fill
    if left:
        raise AssertionError(f"{template}: no value for {sorted(left)}")
    return text


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def human(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
