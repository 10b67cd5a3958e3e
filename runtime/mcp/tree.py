"""Every process an MCP server started ends with it, even one that left its process group.

The server runs in a session of its own and its group is ended as one (runtime.mcp.stdio), but a grandchild
that calls setsid() leaves that group, and once its parent exits it is init's child (PPID 1): it outlived
the chat. So each server's environment carries a mark of its own (MARK, inherited by whatever it starts),
and when the server ends the host ends its remaining descendants and every process of this user that carries
the mark: TERM, then KILL after GRACE_S.

Why not PR_SET_CHILD_SUBREAPER (Linux): it is process-wide, so the window would also adopt every orphan of
its other children (a browser a link opened through xdg-open) and keep each as a zombie nobody waits for.
The mark needs no privilege and works the same on macOS (psutil reads another process's environment where
it is the same user's). What it cannot end: a descendant that both left the tree and replaced its whole
environment before the server ended. Windows: the server's Job Object holds its tree (the SDK's), this is
not used there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets

import anyio.to_thread
import psutil

log = logging.getLogger(__name__)

MARK = "SPECQUANT_MCP_SERVER"
GRACE_S = 2.0


def new_mark() -> str:
    """A value of MARK for one server's life."""
    return secrets.token_hex(12)


def _descendants(pid: int) -> dict[int, psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return {p.pid: p for p in psutil.Process(pid).children(recursive=True)}
    return {}


def _marked(mark: str) -> dict[int, psutil.Process]:
    """This user's processes whose environment carries `mark` (not this one)."""
    found: dict[int, psutil.Process] = {}
    uid = os.getuid()
    for p in psutil.process_iter(["uids"]):
        if p.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            uids = p.info.get("uids")
            if uids is not None and uids.real != uid:
                continue
            if p.environ().get(MARK) == mark:
                found[p.pid] = p
    return found


def survivors(pid: int, mark: str) -> list[psutil.Process]:
    """What is left of server `pid`'s processes: its descendants and the processes carrying its mark."""
    return list((_descendants(pid) | _marked(mark)).values())


def _end(name: str, found: list[psutil.Process]) -> None:
    for p in found:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(found, timeout=GRACE_S)
    if alive:
        log.info("MCP server %s: %d of its processes ignored SIGTERM for %g s, killing them", name, len(alive),
                 GRACE_S)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=GRACE_S)


async def end_tree(name: str, pid: int, mark: str, before: list[psutil.Process]) -> None:
    """End what is left of server `pid`'s processes (`before`: its descendants seen while it ran)."""
    def work() -> None:
        found = {p.pid: p for p in before if _alive(p)} | {p.pid: p for p in survivors(pid, mark)}
        if found:
            log.debug("MCP server %s: ending %d processes it left (%s)", name, len(found), sorted(found))
            _end(name, list(found.values()))

    await anyio.to_thread.run_sync(work)


def _alive(p: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    return False
