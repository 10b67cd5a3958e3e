"""The one small error hierarchy: the CLI and the app catch `UserError` at the edge."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable


class SpecQuantError(Exception):
    """Base of every error SpecQuant raises on purpose."""


class UserError(SpecQuantError):
    """Bad input or environment the user can fix: exit code 2 and one line, never a traceback."""


class ModelError(UserError):
    """A model is missing, incomplete or damaged: the fix is converting or repairing it (the window offers
    its model manager)."""


class ContextTooLong(UserError):
    """A prompt longer than the context leaves room for (the API answers 400 `context_length_exceeded`)."""


class Cancelled(SpecQuantError):
    """The user asked to stop; whatever was half-written has been removed."""


def readable(e: BaseException) -> str:
    """One line for a banner or an API error: our own errors as they are; anything else with its type, never
    a traceback."""
    if isinstance(e, SpecQuantError):
        return str(e)
    if isinstance(e, MemoryError):
        return "out of memory: close other programs, pick a smaller model or lower the context size"
    return f"unexpected {type(e).__name__}: {e}"


def run_command(prog: str, body: Callable[[], int]) -> int:
    """Run a command's body; our errors become one line on stderr and an exit code, never a traceback.

    UserError exits 2, a cancel or Ctrl-C 130, any other SpecQuantError 1, and a reader that went away
    (`specquant ... | head`) 141 without a word, as a Unix tool killed by SIGPIPE would.
    """
    try:
        code = body()
        sys.stdout.flush()  # a closed pipe must surface here, not in the interpreter's exit flush
        return code
    except BrokenPipeError:
        # Point stdout at /dev/null so the flush at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except UserError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except Cancelled:
        print(f"{prog}: cancelled", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted; nothing half-written was kept", file=sys.stderr)
        return 130
    except SpecQuantError as e:
        logging.getLogger("specquant").debug("failure", exc_info=True)
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
