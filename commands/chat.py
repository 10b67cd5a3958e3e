"""`specquant chat`: one prompt (streamed, or `--json`), or an interactive session."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from commands.common import add_answer_flags, add_engine_flags, chat_options, load_engine, read_prompt

NAME = "chat"
HELP = "chat: one prompt, or an interactive session"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="the prompt (without it: an interactive chat)")
    src.add_argument("--prompt-file", help="read the prompt from FILE (- for stdin)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json-schema", metavar="FILE", help="answer in JSON that follows this JSON schema")
    fmt.add_argument("--json-object", action="store_true", help="answer with a JSON object")
    add_answer_flags(p)


def main(args: argparse.Namespace) -> int:
    options = chat_options(args)  # bad values fail before any model loads
    prompt = read_prompt(args)
    engine = load_engine(args)
    try:
        if prompt is None:
            return _repl(engine, options)
        messages = [{"role": "user", "content": prompt}]
        if args.json:
            text, last = _collect(engine, messages, options, stream=None)
            out = {
                "text": text,
                "route": last.route.as_dict(),
                "parent": last.choice.parent,
                "draft": last.choice.draft,
                "ngram": last.choice.ngram,
                "why": last.choice.why,
                "placement": last.placement.as_dict(),
                "stats": last.stats.as_dict(),
            }
            print(json.dumps(out, indent=2, ensure_ascii=False))
        else:
            _, last = _collect(engine, messages, options, stream=sys.stdout)
            print(file=sys.stdout)
            print(_stats_line(last), file=sys.stderr)
    finally:
        engine.close()
    return 0


def _collect(engine: Any, messages: list[dict[str, str]], options: Any, stream: TextIO | None) -> tuple[str, Any]:
    """The answer's text and last Chunk; its text is written to `stream` as it comes, when one is given."""

    def write(text: str) -> None:
        assert stream is not None
        stream.write(text)
        stream.flush()

    answer = engine.chat(messages, options, on_text=write if stream is not None else None)
    return answer.text, answer.last


def _stats_line(chunk: Any) -> str:
    from runtime.engine.chat import answer_facts, stats_line

    return stats_line(answer_facts(chunk), detail=True)


def _repl(engine: Any, options: Any) -> int:
    """Interactive chat with streaming; /reset clears the conversation, /quit or Ctrl-D leaves."""
    from runtime.machine.rpc import WorkerError

    messages: list[dict[str, str]] = []
    print(f"SpecQuant chat with {engine.model.name}. /reset clears the conversation; /quit or Ctrl-D leaves.")
    while True:
        try:
            line = input("> ")
        except EOFError:
            print()
            return 0
        if not line.strip():
            continue
        if line.strip() in ("/quit", "/exit"):
            return 0
        if line.strip() == "/reset":
            messages.clear()
            continue
        messages.append({"role": "user", "content": line})
        try:
            text, last = _collect(engine, messages, options, stream=sys.stdout)
        except KeyboardInterrupt:
            print("\n[stopped]")
            messages.pop()
            continue
        except WorkerError as e:  # the chat goes on: the next turn reconnects (runtime.engine.process)
            print(f"\nspecquant: error: {e}", file=sys.stderr)
            messages.pop()
            continue
        messages.append({"role": "assistant", "content": text})
        print()
        notice = engine.take_notice()
        if notice:
            print(f"specquant: {notice}", file=sys.stderr)
        print(_stats_line(last), file=sys.stderr)
