"""What this machine offers: cores and memory (psutil)."""

from __future__ import annotations

import os

import psutil


def physical_cores() -> int:
    """Physical cores: llama.cpp runs best with one thread per core, not per hyper-thread."""
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1
