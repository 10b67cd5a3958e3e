"""Commands that fail now and then for a reason of the moment, run again: `hdiutil create` and `attach` on
macOS runners say "Resource busy" while Spotlight or another mount still holds the image. And every command
the release runs, under a time limit that, when it runs out, names the step and the command that hung."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from runtime.errors import SpecQuantError

BUSY = "Resource busy"


def timed_run(cmd: Sequence[str | Path], what: str, timeout: float, secret: bool = False,
              **kwargs: object) -> subprocess.CompletedProcess:
    """subprocess.run under `timeout` seconds; when it runs out (the child is killed), an error naming the step
    `what` and the command, with what it had printed, rather than a bare TimeoutExpired. `secret`: the
    arguments hold a password, so only the program is named."""
    args = [str(c) for c in cmd]
    shown = f"{Path(args[0]).name} …" if secret else " ".join(args)
    try:
        return subprocess.run(args, timeout=timeout, **kwargs)  # type: ignore[call-overload]
    except subprocess.TimeoutExpired as e:
        said = e.output or b""
        said = said.decode(errors="replace") if isinstance(said, bytes) else said
        tail = "" if secret else " | ".join(said.strip().splitlines()[-3:])
        raise SpecQuantError(f"{what} hung: `{shown}` did not finish within {timeout:.0f} s"
                             + (f" (its last words: {tail})" if tail else "")) from None


def run_retrying(
    cmd: Sequence[str | Path],
    what: str,
    transient: str = BUSY,
    tries: int = 5,
    wait_s: float = 5.0,
    run: Callable[..., subprocess.CompletedProcess[str]] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    timeout: float = 600,
) -> str:
    """`cmd`'s stdout; run again (waiting longer each time) while it fails saying `transient`, and an error
    naming `what` with its last words when it fails otherwise or `tries` times."""
    for attempt in range(1, tries + 1):
        if run is None:
            done = timed_run(cmd, what, timeout, capture_output=True, text=True)
        else:
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
