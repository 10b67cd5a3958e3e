"""A long compile's progress, from ninja's "[done/total]" lines: one line every 10% with the time so far, the
whole output in a log file, and the log's last lines only if the build fails.

    python installer/progress.py --log FILE --label TEXT -- COMMAND [ARG...]

setup.sh runs it as a script, before anything is installed, so it uses the standard library alone; it
replaced `tee | sed -u | awk`, whose awk (mawk, Debian's default) buffered its input until the build ended.
build_installer.py calls `run` for the same job.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

STEP = re.compile(rb"^\s*\[(\d+)/(\d+)\]")


def took(seconds: float) -> str:
    """`42 s`, `3 min 05 s`."""
    seconds = int(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


def tail(log: Path, lines: int) -> str:
    return "\n".join(log.read_bytes().decode(errors="replace").splitlines()[-lines:])


def run_logged(
    cmd: Sequence[str],
    log: Path,
    label: str,
    *,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    tail_lines: int = 40,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run `cmd` with its output going to `log`; print "LABEL 40% (156 of 390), 2 min 21 s" to `out`
    (stderr) as each tenth is reached, and the log's last `tail_lines` lines if it fails. Its exit code."""
    out = out or sys.stderr
    started = clock()
    next_pct, last_done = 0, 0
    with open(log, "wb") as f, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as p:
        assert p.stdout is not None
        # Iterating a pipe yields each line as soon as it is complete: nothing waits for a buffer to fill.
        for line in p.stdout:
            f.write(line)
            step = STEP.match(line)
            if step is None or int(step[2]) == 0:
                continue
            done, total = int(step[1]), int(step[2])
            if done < last_done:  # a second ninja run (another target) counts from 1 again
                next_pct = 0
            last_done = done
            pct = 100 * done // total
            if pct >= next_pct:
                print(f"{label} {pct}% ({done} of {total}), {took(clock() - started)}", file=out, flush=True)
                next_pct = pct - pct % 10 + 10
    if p.returncode != 0 and tail_lines:
        print(tail(log, tail_lines), file=out, flush=True)
    return p.returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="progress.py", description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, required=True, help="where the command's whole output goes")
    parser.add_argument("--label", required=True, help='what each progress line starts with: "setup.sh: compiling"')
    parser.add_argument("--tail", type=int, default=40, help="log lines to print if the command fails (default 40)")
    parser.add_argument("cmd", nargs="+", help="the command, after --")
    args = parser.parse_args(argv)
    try:
        return run_logged(args.cmd, args.log, args.label, tail_lines=args.tail)
    except OSError as e:
        if e.filename is not None and Path(e.filename) == args.log:
            print(f"progress.py: error: --log {args.log}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"progress.py: error: cannot run {args.cmd[0]}: {e.strerror or e}", file=sys.stderr)
        return 127
    except KeyboardInterrupt:  # Ctrl-C reached the build too; its own message says enough
        return 130


if __name__ == "__main__":
    sys.exit(main())
