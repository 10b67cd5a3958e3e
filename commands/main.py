"""`specquant`: the command line's dispatcher. Each command is a module of this package with `NAME`, `HELP`,
`add_arguments(parser)` and `main(args) -> int`; COMMANDS lists them in `specquant --help`'s order. Bad
input exits 2 with one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

# Imported by name, not found at run time: PyInstaller's analysis follows these imports into the bundle.
# A command module imports only what its flags need; its work's modules load inside its `main`.
from commands import bench, cache, chat, convert, docs, info, route, serve, worker
from commands import list as list_  # bound as `list`, the module would hide the builtin here
from commands.common import setup_logging
from runtime.errors import run_command

COMMANDS: tuple[ModuleType, ...] = (convert, list_, route, info, chat, serve, worker, bench, docs, cache)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but bad flags exit 2 with a single line (no usage block)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="specquant", description="Routed speculative decoding over GGUF precision tiers.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show detailed logs, llama.cpp's included")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in COMMANDS:
        p = sub.add_parser(command.NAME, help=command.HELP)
        command.add_arguments(p)
        p.set_defaults(func=command.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    return run_command("specquant", lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
