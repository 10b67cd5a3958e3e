"""`specquant route`: a prompt's complexity level, as the router sees it."""

from __future__ import annotations

import argparse
import json

from commands.common import read_prompt
from runtime.errors import UserError

NAME = "route"
HELP = "show a prompt's complexity level"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", nargs="?", help="the prompt")
    p.add_argument("--prompt-file", help="read the prompt from FILE (- for stdin)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def main(args: argparse.Namespace) -> int:
    from runtime.plan.router import route

    text = args.text if args.text is not None else read_prompt(args)
    if text is None:
        raise UserError("give the text to route, or --prompt-file FILE")
    r = route(text)
    if args.json:
        print(json.dumps(r.as_dict(), indent=2))
    else:
        print(f"{r.level} (score {r.score:.3f}): {r.reason}")
    return 0
