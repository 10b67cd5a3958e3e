"""What installers say about the app: its name, version and summary, read from pyproject.toml."""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import UserError

PUBLISHER = "SpecQuant contributors"
BUNDLE_ID = "org.specquant.SpecQuant"


def this_arch() -> str:
    """This machine's architecture as file names spell it: `x86_64` (Windows says AMD64), `arm64`."""
    return platform.machine().lower().replace("amd64", "x86_64") or "unknown"


@dataclass(frozen=True)
class Meta:
    name: str  # shown in menus and used in file names: "SpecQuant"
    version: str
    summary: str
    with_demo: bool = False

    @property
    def slug(self) -> str:
        """The name as a file and folder name: "specquant"."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-") or "specquant"

    def artefact_base(self, os_name: str, arch: str | None = None) -> str:
        """`SpecQuant-0.1.0-linux-x86_64`, with `-demo` when the demo model is inside; `arch` defaults to
        this machine's."""
        arch = arch or this_arch()
        base = f"{re.sub(r'[^A-Za-z0-9._-]+', '-', self.name)}-{self.version}-{os_name}-{arch}"
        return base + ("-demo" if self.with_demo else "")


def _project(text: str) -> dict[str, str]:
    """pyproject.toml's [project] table (its two plain keys used here, on Python 3.10 without tomllib)."""
    try:
        import tomllib
    except ModuleNotFoundError:
        table = text.split("[project]", 1)[-1].split("\n[", 1)[0]
        return dict(re.findall(r'^(version|description)\s*=\s*"([^"]*)"', table, re.M))
    return tomllib.loads(text).get("project", {})


def read_meta(repo: Path, name: str, with_demo: bool) -> Meta:
    project = _project((repo / "pyproject.toml").read_text())
    if not project.get("version"):
        raise UserError(f"{repo / 'pyproject.toml'} has no [project] version")
    if not re.search(r"[A-Za-z0-9]", name):
        raise UserError(f"--name {name!r} needs at least one letter or digit")
    return Meta(name, project["version"], project.get("description", ""), with_demo)
