"""`specquant chat`: one prompt (streamed, or `--json`), or an interactive session.

The answer is read as every front end reads one: an EngineThread runs the Engine, and the answer comes back
through its JobReader (runtime.engine.reader), so Ctrl-C here is a Stop like the window's: the job is
cancelled within a cycle and the model stays loaded for the next turn."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, TextIO

from commands.common import add_answer_flags, add_engine_flags, chat_options, engine_settings, model_name, read_prompt
from runtime.errors import UserError

if TYPE_CHECKING:
    from runtime.engine.answer import Chunk
    from runtime.engine.options import ChatOptions, EngineSettings
    from runtime.engine.system_presets import SystemPreset
    from runtime.engine.thread import EngineThread

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
    p.add_argument(
        "--docs",
        nargs="?",
        const="",
        metavar="COLLECTION",
        help="answer from your documents (`specquant docs add`), citing them; a collection's name, or none for all",
    )
    p.add_argument("--docs-top", type=int, metavar="N", help="passages to answer from (1-20, default 4)")
    p.add_argument(
        "--system-preset",
        metavar="NAME",
        help="a system-prompt preset: its system prompt and sampling (Assistant, Concise, Coder, Teacher, Writer, "
        "or your own in presets.json)",
    )
    add_answer_flags(p)


def main(args: argparse.Namespace) -> int:
    from runtime.documents.grounding import DEFAULT_TOP, Grounding
    from runtime.engine.system_presets import find_preset
    from runtime.engine.thread import EngineThread

    options = chat_options(args)  # bad values fail before any model loads
    if args.docs is not None:
        top = DEFAULT_TOP if args.docs_top is None else args.docs_top
        options = replace(options, documents=Grounding(args.docs or None, top))
    elif args.docs_top is not None:
        raise UserError("--docs-top needs --docs")
    prompt = read_prompt(args)
    preset = find_preset(args.system_preset) if args.system_preset else None
    session = Session(EngineThread(), model_name(args.model), engine_settings(args), options, preset)
    try:
        if prompt is None:
            return _repl(session)
        messages = [{"role": "user", "content": prompt}]
        if args.json:
            text, last = session.answer(messages, stream=None)
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
            if options.documents is not None:
                out["citations"] = [c.as_dict() for c in last.citations]
            print(json.dumps(out, indent=2, ensure_ascii=False))
        else:
            _, last = session.answer(messages, stream=sys.stdout)
            print(file=sys.stdout)
            _print_sources(last, options)
            print(_stats_line(last), file=sys.stderr)
    finally:
        session.runner.close()
    return 0


class Session:
    """One model's answers for this command, through the engine thread and a JobReader per answer."""

    def __init__(
        self,
        runner: EngineThread,
        model: str,
        settings: EngineSettings,
        options: ChatOptions,
        preset: SystemPreset | None = None,
    ) -> None:
        self.runner, self.model, self.settings, self.options, self.preset = runner, model, settings, options, preset

    def answer(self, messages: list[dict[str, str]], stream: TextIO | None) -> tuple[str, Chunk]:
        """The answer's text and last Chunk; its text is written to `stream` as it comes, when one is given.
        Leaving early (Ctrl-C) closes the reader, which cancels the job."""
        from runtime.engine.answer import collect
        from runtime.engine.system_presets import apply_preset

        def write(text: str) -> None:
            assert stream is not None
            stream.write(text)
            stream.flush()

        options = self.options
        if self.preset is not None:  # applied per answer: the chat itself keeps only what was said
            messages, options = apply_preset(self.preset, messages, options)
        chunks = self.runner.stream_chat(messages, options, model=self.model, settings=self.settings)
        answer = collect(chunks, on_text=write if stream is not None else None)
        return answer.text, answer.last

    def take_notice(self) -> str | None:
        """A notice from the engine (a worker lost, answers moved here), once; None before any answer."""
        engine = self.runner.engine
        return engine.take_notice() if engine is not None else None


def _print_sources(last: Chunk, options: ChatOptions) -> None:
    """A grounded answer's numbered sources, after its text."""
    if options.documents is None:
        return
    if not last.citations:
        print("Sources: no passage of your documents matched.")
        return
    print("Sources:")
    for c in last.citations:
        print(f"  [{c.n}] {c.where()}")


def _stats_line(chunk: Chunk) -> str:
    from runtime.engine.summary import answer_facts, stats_line

    return stats_line(answer_facts(chunk), detail=True)


def _repl(session: Session) -> int:
    """Interactive chat with streaming; /reset clears the conversation, /quit or Ctrl-D leaves."""
    from runtime.machine.rpc import WorkerError

    messages: list[dict[str, str]] = []
    print(f"SpecQuant chat with {session.model}. /reset clears the conversation; /quit or Ctrl-D leaves.")
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
            text, last = session.answer(messages, stream=sys.stdout)
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
        _print_sources(last, session.options)
        notice = session.take_notice()
        if notice:
            print(f"specquant: {notice}", file=sys.stderr)
        print(_stats_line(last), file=sys.stderr)
