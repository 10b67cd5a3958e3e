"""Commands that fail now and then for a reason of the moment, run again: `hdiutil create` and `attach` on
macOS runners say "Resource busy" while Spotlight or another mount still holds the image."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from runtime.errors import SpecQuantError

BUSY = "Resource busy"


def run_retrying(
    cmd: Sequence[str | Path],
    what: str,
    transient: str = BUSY,
    tries: int = 5,
    wait_s: float = 5.0,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """`cmd`'s stdout; run again (waiting longer each time) while it fails saying `transient`, and an error
    naming `what` with its last words when it fails otherwise or `tries` times."""
    for attempt in range(1, tries + 1):
        done = run([str(c) for c in cmd], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout
        said = (done.stdout + done.stderr).strip()
        if transient not in said or attempt == tries:
            tail = " | ".join(said.splitlines()[-3:]) or "no output"
            again = f" (tried {attempt} times)" if attempt > 1 else ""
            raise SpecQuantError(f"{what} failed with exit code {done.returncode}{again}: {tail}")
        sleep(wait_s * attempt)
    raise AssertionError("unreachable")
