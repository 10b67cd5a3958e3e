"""Does this llama.cpp build's CPU code run here? `setup.sh` asks before it keeps a build compiled for this CPU.

    python -m runtime.machine.build_check --check-build

A kernel the CPU advertises but cannot run (AMX on some KVM guests) kills the probe's child, not the user's
first answer; the exit status is 1 with the reason on stderr.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from runtime.errors import UserError
from runtime.machine import cpu_variant
from runtime.machine.hardware import ensure_backends


def _load_kernels() -> None:
    """In the probe's child: the build's own kernels, built in or (a portable build) the variant proven here."""
    ensure_backends()


def check_build(n_threads: int = 2) -> str | None:
    """None if this build's CPU kernels decode the probe model in a child; else why not."""
    try:  # a portable build proves its variant here first (in children of its own); the check's child reads it
        ensure_backends()
    except UserError as e:
        return str(e)
    with tempfile.TemporaryDirectory(prefix="specquant-cpu-probe-") as tmp:
        model = cpu_variant.write_probe_model(Path(tmp) / "probe.gguf")
        return cpu_variant.probe_variant(None, model, n_threads, prepare=_load_kernels)


def main(argv: list[str]) -> int:
    if argv != ["--check-build"]:
        print("usage: python -m runtime.machine.build_check --check-build", file=sys.stderr)
        return 1
    why = check_build()
    if why is not None:
        print(f"this build's CPU kernels do not run here: {why}", file=sys.stderr)
    return 0 if why is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
