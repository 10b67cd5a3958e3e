"""`specquant chat`: one prompt (streamed, or `--json`), or an interactive session.

The answer is read as every front end reads one: an EngineThread runs the Engine, and the answer comes back
through its JobReader (runtime.engine.reader), so Ctrl-C here is a Stop like the window's: the job is
cancelled within a cycle and the model stays loaded for the next turn."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from commands.chat_tools import add_tool_flags, calls_json, check_tool_flags, event_line, tool_setup
from commands.common import add_answer_flags, add_engine_flags, chat_options, engine_settings, model_name, read_prompt
from runtime.errors import UserError
from runtime.plan.policy import preset_words
from runtime.terminal_text import terminal_json, visible_lines

if TYPE_CHECKING:
    from runtime.chat.conversation import Conversation
    from runtime.chat.toolbox import McpToolbox
    from runtime.engine.answer import Chunk
    from runtime.engine.options import ChatOptions, EngineSettings
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
        "--persona",
        metavar="NAME",
        help="a persona: its system prompt and sampling (Assistant, Concise, Coder, Teacher, Writer, or your own "
        "in presets.json); not the speed preset, --preset",
    )
    # The flag's old name: scripts that use it keep working, and --help shows only --persona.
    p.add_argument("--system-preset", dest="persona", metavar="NAME", help=argparse.SUPPRESS)
    add_tool_flags(p)
    add_answer_flags(p)


def main(args: argparse.Namespace) -> int:
    from runtime.documents.grounding import cited_numbers
    from runtime.engine.thread import EngineThread

    conversation = conversation_of(args)  # bad values fail before any model loads
    prompt = read_prompt(args)
    session = Session(EngineThread(), model_name(args.model), engine_settings(args), conversation)
    session.show_thinking = not args.hide_thinking
    try:
        conversation.tools = tool_setup(args)
        if prompt is None:
            return _repl(session)
        conversation.messages.append({"role": "user", "content": prompt})
        if args.json:
            outcome = session.answer(stream=None)
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
            if conversation.documents.chosen:  # each source, and whether the answer cites it
                cited = cited_numbers(text)
                out["citations"] = [c.as_dict() | {"cited": c.n in cited} for c in last.citations]
            if outcome.toolbox is not None:
                out["rounds"] = outcome.rounds
                out["calls"] = calls_json(outcome.calls, outcome.toolbox)
            print(terminal_json(out))  # a tool result's control characters escaped, as JSON
        else:
            last = session.answer(stream=sys.stdout).last
            print(file=sys.stdout)
            _print_sources(last, conversation.documents.chosen)
            print(_stats_line(last), file=sys.stderr)
            _after_the_demo(session)
    finally:
        session.runner.close()
        conversation.close()
    return 0


def conversation_of(args: argparse.Namespace) -> Conversation:
    """The chat's conversation from the flags (runtime.chat.conversation): its documents, speed preset, persona
    and thinking; its tools are set up once it is checked (`tool_setup`)."""
    from runtime.chat.conversation import Conversation
    from runtime.chat.documents import DocumentChoice
    from runtime.documents.grounding import DEFAULT_TOP

    options = chat_options(args)
    if args.docs is not None:
        top = DEFAULT_TOP if args.docs_top is None else args.docs_top
        # Asking for a number of passages means passages; otherwise documents that fit go in whole.
        documents = DocumentChoice(args.docs, top, whole=args.docs_top is None)
        documents.grounding()  # a bad --docs-top fails here
    elif args.docs_top is not None:
        raise UserError("--docs-top needs --docs")
    else:
        documents = DocumentChoice()
    check_tool_flags(args)
    conversation = Conversation(
        options=options, documents=documents, speed=args.preset, persona=args.persona,
        thinking=False if getattr(args, "no_thinking", False) else None,
        thinking_budget=getattr(args, "thinking_budget", None),
    )
    conversation.check()
    return conversation


@dataclass
class Outcome:
    """One turn: the last answer's text and Chunk, the chat after it (with tools: every call and result in it),
    the calls made (call, allowed, result) and the toolbox that offered them (None: no tools)."""

    text: str
    last: Chunk
    messages: list[dict[str, Any]]
    rounds: int = 1
    calls: list[Any] = field(default_factory=list)
    thinking: str = ""  # a thinking model's thought in the last answer
    toolbox: McpToolbox | None = None


class Session:
    """One model's answers to this command's conversation, through the engine thread and a JobReader per answer."""

    def __init__(
        self, runner: EngineThread, model: str, settings: EngineSettings, conversation: Conversation
    ) -> None:
        self.runner, self.model, self.settings, self.conversation = runner, model, settings, conversation
        self.show_thinking = True  # a thinking model's thoughts above its answer (--hide-thinking: off)

    def answer(self, stream: TextIO | None) -> Outcome:
        """The next turn of the conversation, asked of it (runtime.chat.conversation), and its outcome, which
        the conversation records; its text is written to `stream` as it comes, when one is given (with tools,
        each call on stderr). Leaving early (Ctrl-C) closes the reader, which cancels the job."""
        from runtime.chat.turn import run_turn
        from runtime.engine.answer import Chunk
        from runtime.engine.tool_loop import LoopFinished

        def one(chat: list[dict[str, Any]], options: ChatOptions) -> Iterator[Chunk]:
            return self.runner.stream_chat(chat, options, model=self.model, settings=self.settings)

        thoughts = ThoughtPrinter(stream) if stream is not None and self.show_thinking else None
        with self.conversation.turn() as spec:
            for event in run_turn(one, spec):
                if isinstance(event, LoopFinished):
                    said = event.messages[len(spec.messages):]
                    self.conversation.record(event.messages)
                    return Outcome(said[-1]["content"], event.last, list(event.messages), event.rounds,
                                   event.calls, said[-1].get("reasoning_content", ""), spec.toolbox)
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


def _print_sources(last: Chunk, grounded: bool) -> None:
    """A grounded answer's numbered sources, after its text."""
    if not grounded:
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

    messages = session.conversation.messages
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
            outcome = session.answer(stream=sys.stdout)  # the conversation keeps the calls and their results
        except KeyboardInterrupt:
            print("\n[stopped]")
            messages.pop()
            continue
        except WorkerError as e:  # the chat goes on: the next turn reconnects (runtime.engine.process)
            print(f"\nspecquant: error: {e}", file=sys.stderr)
            messages.pop()
            continue
        last = outcome.last
        print()
        _print_sources(last, session.conversation.documents.chosen)
        notice = session.take_notice()
        if notice:
            print(f"specquant: {notice}", file=sys.stderr)
        print(_stats_line(last), file=sys.stderr)
        if not told_demo:
            told_demo = _after_the_demo(session)
