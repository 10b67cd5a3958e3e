"""The per-user folders, in one place: data (models, documents, conversations) and config (presets, MCP
servers, approvals). Environment variables move them (tests, portable installs)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "specquant"  # every folder of ours, with no author folder


def data_dir() -> Path:
    """$SPECQUANT_DATA_DIR, else the per-user data directory."""
    env = os.environ.get("SPECQUANT_DATA_DIR")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir(APP, appauthor=False))


def config_dir() -> Path:
    """$SPECQUANT_CONFIG_DIR, else the per-user config directory."""
    env = os.environ.get("SPECQUANT_CONFIG_DIR")
    return Path(env).expanduser() if env else Path(platformdirs.user_config_dir(APP, appauthor=False))
