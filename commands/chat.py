"""`specquant chat`: one prompt (streamed, or `--json`), or an interactive session.

The answer is read as every front end reads one: an EngineThread runs the Engine, and the answer comes back
through its JobReader (runtime.engine.reader), so Ctrl-C here is a Stop like the window's: the job is
cancelled within a cycle and the model stays loaded for the next turn."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TextIO

from commands.chat_tools import add_tool_flags, calls_json, check_tool_flags, event_line, toolbox_from_flags
from commands.common import add_answer_flags, add_engine_flags, chat_options, engine_settings, model_name, read_prompt
from runtime.errors import UserError
from runtime.plan.policy import preset_words
from runtime.terminal_text import terminal_json, visible_lines

if TYPE_CHECKING:
    from runtime.chat.toolbox import McpToolbox
    from runtime.engine.answer import Chunk
    from runtime.engine.options import ChatOptions, EngineSettings
    from runtime.engine.system_presets import SystemPreset
    from runtime.engine.thread import EngineThread

NAME = "chat"
HELP = "chat: one prompt, or an interactive session"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--hide-thinking", action="store_true",
        help="leave a thinking model's thoughts out (shown dimmed above the answer on a terminal otherwise)",
    )
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
    p.add_argument(
        "--docs-top", type=int, metavar="N",
        help="passages to answer from (1-20, default 4); without it, documents that fit the context go in whole",
    )
    p.add_argument(
        "--system-preset",
        metavar="NAME",
        help="a system-prompt preset: its system prompt and sampling (Assistant, Concise, Coder, Teacher, Writer, "
        "or your own in presets.json)",
    )
    add_tool_flags(p)
    add_answer_flags(p)


def main(args: argparse.Namespace) -> int:
    from runtime.documents.grounding import DEFAULT_TOP, Grounding, cited_numbers
    from runtime.engine.system_presets import find_preset
    from runtime.engine.thread import EngineThread

    options = chat_options(args)  # bad values fail before any model loads
    if args.docs is not None:
        top = DEFAULT_TOP if args.docs_top is None else args.docs_top
        # Asking for a number of passages means passages; otherwise documents that fit go in whole.
        options = replace(options, documents=Grounding(args.docs or None, top, whole=args.docs_top is None))
    elif args.docs_top is not None:
        raise UserError("--docs-top needs --docs")
    check_tool_flags(args)
    prompt = read_prompt(args)
    preset = find_preset(args.system_preset) if args.system_preset else None
    session = Session(EngineThread(), model_name(args.model), engine_settings(args), options, preset)
    session.show_thinking = not args.hide_thinking
    try:
        session.toolbox = toolbox_from_flags(args)
        session.max_rounds = args.max_rounds or session.max_rounds
        session.first_choice = args.tool_choice or "auto"
        if prompt is None:
            return _repl(session)
        messages = [{"role": "user", "content": prompt}]
        if args.json:
            outcome = session.answer(messages, stream=None)
            text, last = outcome.text, outcome.last
            out = {
                "text": text,
                **({"thinking": outcome.thinking} if outcome.thinking and session.show_thinking else {}),
                "route": last.route.as_dict(),
                "parent": last.choice.parent,
                "draft": last.choice.draft,
                "ngram": last.choice.ngram,
                "why": last.choice.why,
                "preset": last.choice.preset,  # the speed preset that answered (None: pinned tiers, paper)
                "preset_words": preset_words(last.choice.preset, last.choice.vs_q4),
                "placement": last.placement.as_dict(),
                "stats": last.stats.as_dict(),
            }
            if options.documents is not None:  # each source, and whether the answer cites it
                cited = cited_numbers(text)
                out["citations"] = [c.as_dict() | {"cited": c.n in cited} for c in last.citations]
            if session.toolbox is not None:
                out["rounds"] = outcome.rounds
                out["calls"] = calls_json(outcome.calls, session.toolbox)
            print(terminal_json(out))  # a tool result's control characters escaped, as JSON
        else:
            last = session.answer(messages, stream=sys.stdout).last
            print(file=sys.stdout)
            _print_sources(last, options)
            print(_stats_line(last), file=sys.stderr)
            _after_the_demo(session)
    finally:
        session.runner.close()
        if session.toolbox is not None:
            session.toolbox.close()
    return 0


@dataclass
class Outcome:
    """One turn: the last answer's text and Chunk, the chat after it (with tools: every call and result in it),
    and the calls made (call, allowed, result)."""

    text: str
    last: Chunk
    messages: list[dict[str, Any]]
    rounds: int = 1
    calls: list[Any] = field(default_factory=list)
    thinking: str = ""  # a thinking model's thought in the last answer


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
        from runtime.engine.tool_loop import DEFAULT_ROUNDS

        self.toolbox: McpToolbox | None = None
        self.max_rounds = DEFAULT_ROUNDS
        self.first_choice = "auto"  # the first answer's tool_choice (--tool-choice)
        self.show_thinking = True  # a thinking model's thoughts above its answer (--hide-thinking: off)

    def answer(self, messages: list[dict[str, Any]], stream: TextIO | None) -> Outcome:
        """The turn's outcome; its text is written to `stream` as it comes, when one is given (with tools, each
        call on stderr). Leaving early (Ctrl-C) closes the reader, which cancels the job."""
        from runtime.chat.turn import TurnSpec, run_turn
        from runtime.engine.answer import Chunk
        from runtime.engine.tool_loop import LoopFinished

        def one(chat: list[dict[str, Any]], options: ChatOptions) -> Iterator[Chunk]:
            return self.runner.stream_chat(chat, options, model=self.model, settings=self.settings)

        spec = TurnSpec(messages, self.options, self.preset, self.toolbox, self.max_rounds, self.first_choice)
        thoughts = ThoughtPrinter(stream) if stream is not None and self.show_thinking else None
        for event in run_turn(one, spec):
            if isinstance(event, LoopFinished):
                said = event.messages[len(messages):]
                return Outcome(said[-1]["content"], event.last, [*messages, *said], event.rounds, event.calls,
                               said[-1].get("reasoning_content", ""))
            line = event_line(event)
            if line is not None:
                print(line, file=sys.stderr)
            elif isinstance(event, Chunk) and stream is not None:
                if thoughts is not None:
                    thoughts.add(event.thinking, answer_begins=bool(event.text or event.calls or event.done))
                if event.text:
                    # On a terminal, escape sequences the model copied from a tool result or a document are
                    # shown, not obeyed; piped, the text is as the model wrote it.
                    stream.write(visible_lines(event.text) if stream.isatty() else event.text)
                    stream.flush()
        raise AssertionError("a turn ends with LoopFinished")  # pragma: no cover

    def take_notice(self) -> str | None:
        """A notice from the engine (a worker lost, answers moved here), once; None before any answer."""
        engine = self.runner.engine
        return engine.take_notice() if engine is not None else None


class ThoughtPrinter:
    """A thinking model's thought above its answer: dimmed on a terminal (SGR 2), plain when piped, and a blank
    line between the thought and the answer."""

    DIM, RESET = "\x1b[2m", "\x1b[0m"

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.tty = stream, stream.isatty()
        self.open = False  # a thought is being printed

    def add(self, thought: str, answer_begins: bool) -> None:
        if thought:
            if not self.open and self.tty:
                self.stream.write(self.DIM)
            self.open = True
            self.stream.write(visible_lines(thought) if self.tty else thought)
        if self.open and answer_begins:
            self.stream.write((self.RESET if self.tty else "") + "\n\n")
            self.open = False
        self.stream.flush()


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


def _after_the_demo(session: Session) -> bool:
    """After the demo model's first answer: say it is a tiny demo, and which better model fits (#63)."""
    from runtime.models.cache import DEMO_NAME
    from runtime.plan.catalog import better_model, better_model_line

    if session.model != DEMO_NAME:
        return False
    print(f"specquant: {better_model_line(better_model())}", file=sys.stderr)
    return True


def _stats_line(chunk: Chunk) -> str:
    from runtime.engine.summary import answer_facts, stats_line

    return stats_line(answer_facts(chunk), detail=True)


def _repl(session: Session) -> int:
    """Interactive chat with streaming; /reset clears the conversation, /quit or Ctrl-D leaves."""
    from runtime.machine.rpc import WorkerError

    messages: list[dict[str, str]] = []
    told_demo = False
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
            outcome = session.answer(messages, stream=sys.stdout)
        except KeyboardInterrupt:
            print("\n[stopped]")
            messages.pop()
            continue
        except WorkerError as e:  # the chat goes on: the next turn reconnects (runtime.engine.process)
            print(f"\nspecquant: error: {e}", file=sys.stderr)
            messages.pop()
            continue
        messages[:] = outcome.messages  # with tools: the calls and their results stay in the conversation
        last = outcome.last
        print()
        _print_sources(last, session.options)
        notice = session.take_notice()
        if notice:
            print(f"specquant: {notice}", file=sys.stderr)
        print(_stats_line(last), file=sys.stderr)
        if not told_demo:
            told_demo = _after_the_demo(session)
