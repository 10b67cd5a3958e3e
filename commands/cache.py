"""`specquant cache`: where the saved prompt states are (runtime.engine.prompt_store: each holds a whole
chat's prompt and answer) and how much of their bound they use; `specquant cache clear` removes them."""

from __future__ import annotations

import argparse
import json

from commands.common import gb

NAME = "cache"
HELP = "show or clear the prompt states saved on disk (they hold whole chats)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=("show", "clear"), default="show",
                   help="show (default): where and how much; clear: remove them all")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def main(args: argparse.Namespace) -> int:
    import filelock

    from runtime.engine.prompt_store import DEFAULT_MAX_BYTES, clear, default_disk_budget, default_folder, store_usage
    from runtime.errors import UserError

    folder = default_folder()
    if args.action == "clear":
        try:
            files, size = clear(folder)
        except (OSError, filelock.Timeout) as e:
            raise UserError(f"cannot clear the prompt states in {folder}: {e}") from None
        out = {"folder": str(folder), "removed_files": files, "removed_bytes": size}
        text = f"removed {files} prompt state{'s' * (files != 1)} ({gb(size)}) from {folder}"
    else:
        files, size = store_usage(folder)
        bound = default_disk_budget(folder)
        out = {"folder": str(folder), "files": files, "bytes": size, "max_bytes": bound}
        text = (f"prompt states: {folder}\n  {files} file{'s' * (files != 1)}, {gb(size)} of at most {gb(bound)} "
                f"(min({gb(DEFAULT_MAX_BYTES)}, 10% of the free disk); least recently used out)\n"
                "  they hold whole chats (owner-only files); `specquant cache clear` removes them")
    print(json.dumps(out, indent=2) if args.json else text)
    return 0
