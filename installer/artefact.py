"""Writing artefacts safely, and describing them: a half-written file never carries the final name."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

TEMPLATES = Path(__file__).with_name("templates")


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
