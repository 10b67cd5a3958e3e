"""The chat flow without widgets: what a chat answers with (documents, persona, tools; a new chat's until its
first message), a new turn (the conversation and the user's message), regenerate and answer at higher
precision, the answer in flight, its turn on the engine thread, and what is stored when it ends. app.chat_pane
shows what this reports (as gpt4all-chat keeps its `Chat` apart from the view).

One answer at a time, and one path for all: `answer` makes the chat's `runtime.chat.conversation.Conversation`
from its stored records and choices, which makes the turn as it does for the CLI and the API (its documents,
the documents search's policy, persona, speed preset, thinking, toolbox), and an app.turn_runner.TurnRunner
runs it, with tools or without (the MCP host of app.tool_host_control). A message
is stored before anything can fail; the answer when it completes (a regenerated one replaces the old only
then); a stopped answer keeps the part written so far. A turn's rounds of calls are stored with its answer
(app.store's `tool_turn`), stopped or not, as soon as a call has run: what a tool did is never forgotten.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.pace import Pace
from app.persona_control import PersonaControl
from app.settings import AppSettings
from app.store import Store
from app.stored_messages import CALL_FIELDS, THINKING, TOOL_TURN, TOOLS_UNUSED, StoredMessage, chat_history
from app.tool_host_control import ToolHostControl
from app.transcript_text import draft_mask
from app.turn_runner import TurnRequest, TurnRunner
from runtime.chat.conversation import Conversation
from runtime.chat.documents import DocumentChoice
from runtime.engine.answer import Chunk
from runtime.engine.summary import answer_facts
from runtime.engine.thread import EngineThread
from runtime.plan.policy import more_precise

TITLE_CHARS = 60  # a new conversation's title: the first message's words, cut here


class AtHighestPrecision(Exception):
    """An answer at higher precision was asked for one that already came from the top tier (F16)."""


@dataclass
class Choices:
    """What a chat answers with: its documents (None: none, "": every collection, else one), its persona
    (None: none), whether it may call tools, whether a thinking model thinks (None: as Settings say), and
    its speed preset (runtime.plan.policy; None: as Settings say, "exact": the composer's Exact words switch)."""

    documents: str | None = None
    persona: str | None = None
    tools: bool = False
    thinking: bool | None = None
    speed: str | None = None


@dataclass(frozen=True)
class Turn:
    """What to answer: the conversation's messages up to the question, and the answer a regenerate replaces."""

    conversation: int
    messages: list[StoredMessage]
    replaces: int | None = None  # the old answer, deleted once the new one is complete
    parent: str | None = None  # the tier an answer at higher precision is pinned to


@dataclass
class Live:
    """The answer in flight."""

    request: TurnRequest
    conversation: int
    replaces: int | None  # the answer a regenerate replaces once the new one is complete
    text: str = ""
    flags: list[bool] = field(default_factory=list)  # per character: from an accepted draft token
    last: Chunk | None = None  # the latest Chunk
    runner: TurnRunner | None = None  # what answers it
    rounds: list[dict[str, Any]] = field(default_factory=list)  # its rounds of calls so far (app.store.tool_rounds)
    round_open: bool = False  # the answer being written has called: its next words start a new round
    thinking: str = ""  # a thinking model's thought so far (app.thinking_block shows it above the answer)
    waiting: bool = False  # a wait is shown ("Loading…", "Reading 55 tokens…"): the next words end it
    ended: bool = False  # the turn is over: what it did not do can be said

    @property
    def tools_offered(self) -> bool:
        """Whether any answer of this turn was offered a tool to call."""
        sent = self.runner.sent if self.runner is not None else []
        return any(s.options.tools is not None and s.options.tools.callable for s in sent)

    def meta(self) -> dict[str, object]:
        """What the answer stores (and shows while it streams): its facts, and its calls when it made any."""
        meta = answer_meta(self.last, self.flags, self.text) if self.last is not None else {}
        if self.thinking:
            meta[THINKING] = self.thinking
        if self.ended and not self.rounds and self.tools_offered:  # not before: a call may still come (#63)
            meta[TOOLS_UNUSED] = True  # the record says so: the model was offered tools and called none (#51)
        if self.rounds:
            meta[TOOL_TURN] = [
                {"content": r["content"], "calls": [{k: c.get(k) for k in CALL_FIELDS} for c in r["calls"]]}
                for r in self.rounds
            ]
        return meta


def answer_meta(chunk: Chunk, flags: list[bool], text: str) -> dict[str, object]:
    """What a finished answer stores with it: the stats line's facts and the draft highlight runs."""
    return answer_facts(chunk) | {"draft_mask": draft_mask(flags[: len(text)])}


class ChatController(QObject):
    status = Signal(str)  # what happens before the first token ("Loading…"); "" clears it
    chunks_taken = Signal(object)  # a list of Chunks in order, once they are part of `live` (the last alone)
    finished = Signal(object, str)  # the Live that ended, its text ("" when nothing was stored)
    failed = Signal(object, str, str)  # the Live that failed, a one-line reason ("" when stopped), its kind
    calls_changed = Signal()  # a turn with tools: a call was proposed, decided or finished
    approval_needed = Signal(object)  # a runtime.mcp.CallRequest for the user; reply with `answer_approval`

    def __init__(
        self,
        store: Store,
        engine: EngineThread,
        personas: PersonaControl,
        tools: ToolHostControl,
        documents_index: Path,
    ) -> None:
        super().__init__()
        self.store, self.engine, self.personas, self.tools = store, engine, personas, tools
        self.documents_index = documents_index  # the documents' index, beside the history
        self.pace = Pace()  # one for every turn: what drawing costs this window is learned once
        self.live: Live | None = None
        self.unsent = Choices()  # a new chat's, until its first message stores them with it
        # The documents last chosen or added (None: none): a new chat starts with them (#63); at start, the
        # latest chat's.
        latest = store.conversations()[:1]
        self.last_documents: str | None = store.documents(latest[0].id) if latest else None
        self.unsent.documents = self.last_documents
        self._ids = itertools.count(1)

    # --- what a chat answers with ----------------------------------------------------------------------
    def choices(self, conversation: int | None) -> Choices:
        """The chat's choices (a new chat's when `conversation` is None)."""
        if conversation is None:
            return self.unsent
        s = self.store
        return Choices(s.documents(conversation), s.persona(conversation), s.tools(conversation),
                       s.thinking(conversation), s.speed(conversation))

    def choose(self, conversation: int | None, what: str, value: Any) -> None:
        """Keep a chat's `what` ("documents", "persona", "tools", "thinking" or "speed") with the conversation (a new
        chat's until its first message); UserError when the history refuses it (locked, full, read-only)."""
        if conversation is None:
            setattr(self.unsent, what, value)
        else:
            getattr(self.store, f"set_{what}")(conversation, value)

    # --- turns: what to answer (the window checks first that no answer is in flight) ------------------
    def new_turn(self, conversation: int | None, text: str, model: str | None = None) -> Turn:
        """Store the user's `text` (when `conversation` is None, in a new conversation titled by it, with the
        new chat's choices and `model`) before anything can fail, and return the turn that answers it."""
        if conversation is None:
            title = " ".join(text.split())
            ellipsis = "…" if len(title) > TITLE_CHARS else ""
            u = self.unsent
            conversation = self.store.create(title[:TITLE_CHARS] + ellipsis, u.documents, u.persona, model)
            if u.tools:
                self.store.set_tools(conversation, True)
            if u.thinking is not None:
                self.store.set_thinking(conversation, u.thinking)
            if u.speed is not None:
                self.store.set_speed(conversation, u.speed)
        self.store.add_message(conversation, "user", text)
        return Turn(conversation, self.store.messages(conversation))

    def regenerate_turn(self, conversation: int, higher: bool = False) -> Turn | None:
        """The turn that answers the last user message again, replacing the last answer (None when the
        conversation does not end in one); `higher` pins the next more precise tier than the old answer's
        (AtHighestPrecision when it came from F16)."""
        messages = self.store.messages(conversation)
        if not messages or messages[-1].role != "assistant":
            return None
        old = messages[-1]
        parent = more_precise(old.meta.get("parent", "f16")) if higher else None
        if higher and parent is None:
            raise AtHighestPrecision("That answer already came from F16, the highest precision.")
        return Turn(conversation, messages[:-1], replaces=old.id, parent=parent)

    def regenerate_choices(self, conversation: int | None) -> tuple[bool, bool]:
        """Whether the conversation's last answer can be regenerated, and whether at higher precision."""
        last = self.store.last_message(conversation) if conversation is not None else None
        if last is None or last.role != "assistant":
            return False, False
        return True, more_precise(last.meta.get("parent", "f16")) is not None

    def conversation(self, turn: Turn, settings: AppSettings) -> Conversation:
        """`turn` as a conversation (runtime.chat.conversation), which makes the turn: the stored messages up to
        the question, the Settings' options, and the chat's choices: its documents, persona,
        speed preset, thinking switch and tools. UserError when mcp.json cannot be read."""
        choices = self.choices(turn.conversation)
        return Conversation(
            chat_history(turn.messages), settings.chat_options(parent=turn.parent),
            DocumentChoice(choices.documents, index=self.documents_index),
            speed=choices.speed, persona=choices.persona, personas=self.personas.personas,
            own_sampling=settings.own_sampling(), thinking=choices.thinking,
            tools=self.tools.setup(settings) if choices.tools else None,
        )

    def answer(self, turn: Turn, model: str, settings: AppSettings) -> str:
        """Start answering `turn` with the chat's choices and the current settings; the name of its chosen
        persona when it has since been deleted (this answer has none), else "". UserError when the
        history or mcp.json refuses."""
        self.store.set_model(turn.conversation, model)
        conversation = self.conversation(turn, settings)
        request = TurnRequest(next(self._ids), model, settings.engine_settings(), conversation)
        self.start(turn.conversation, request, turn.replaces)
        return conversation.missing_persona()

    # --- the answer in flight ------------------------------------------------------------------------
    def start(self, conversation: int, request: TurnRequest, replaces: int | None = None) -> Live:
        """Run `request` for `conversation` (`replaces`: the answer a regenerate replaces once it is done)."""
        assert self.live is None, "one answer at a time"
        runner = TurnRunner(self.engine, request, self.pace)
        self.live = Live(request, conversation, replaces, runner=runner)
        runner.status.connect(functools.partial(self._on_status, runner))
        runner.chunks.connect(functools.partial(self._on_chunks, runner))
        runner.round_started.connect(functools.partial(self._on_round, runner))
        runner.call.connect(functools.partial(self._on_call, runner))
        runner.ask.connect(functools.partial(self._on_ask, runner))
        runner.finished.connect(functools.partial(self._on_finished, runner))
        runner.failed.connect(functools.partial(self._on_failed, runner))
        runner.start()
        return self.live

    def answer_approval(self, decision: Any) -> None:
        """The user's answer (a runtime.mcp.ApprovalAnswer) to the turn's open question."""
        if self.live is not None and self.live.runner is not None:
            self.live.runner.answer(decision)

    def stop(self) -> bool:
        """Ask the answer in flight to stop (within one verify cycle); False when there is none."""
        if self.live is None:
            return False
        self.live.request.cancel.set()
        return True

    def retire_tool_host(self) -> None:
        """mcp.json changed: a new host next time; the turn in flight keeps its own until it ends."""
        setup = self.live.request.tools if self.live is not None else None
        self.tools.retire(setup.host if setup is not None else None)

    def finish_now(self, timeout: float) -> None:
        """At close, after a Stop: wait for the turn's thread, take what it last reported (the stopped answer is
        stored), and forget the turn."""
        live = self.live
        if live is not None and live.runner is not None:
            live.runner.join(timeout)
            live.runner.flush()
        self.live = None

    # --- what the turn reports (app.turn_runner.TurnRunner), on the GUI thread ---------------------------
    def _live(self, runner: TurnRunner) -> Live | None:
        live = self.live
        return live if live is not None and live.runner is runner else None

    def _on_status(self, runner: TurnRunner, message: str) -> None:
        live = self._live(runner)
        if live is not None:
            live.waiting = bool(message)
            self.status.emit(message)

    def _on_chunks(self, runner: TurnRunner, chunks: list[Chunk]) -> None:
        live = self._live(runner)
        if live is None:
            return
        if live.waiting:  # "Loading…", or a later round's "Reading 55 tokens…" (#63), ends with its first words
            live.waiting = False
            self.status.emit("")
        live.text += "".join(c.text for c in chunks)
        live.thinking += "".join(c.thinking for c in chunks)
        for c in chunks:
            live.flags.extend(c.draft_chars)
        live.last = chunks[-1]
        self.chunks_taken.emit(chunks)

    def _on_round(self, runner: TurnRunner, n: int) -> None:
        live = self._live(runner)
        if live is not None and live.round_open:  # the last round's words went into its record
            live.text, live.flags, live.round_open = "", [], False

    def _on_call(self, runner: TurnRunner, record: dict[str, Any]) -> None:
        live = self._live(runner)
        if live is None:
            return
        if not live.round_open:  # the first call of this answer: its words so far belong to the round
            live.rounds.append({"content": live.text, "calls": []})
            live.round_open = True
        calls = live.rounds[-1]["calls"]
        for i, c in enumerate(calls):
            if c["id"] == record["id"]:
                calls[i] = record
                break
        else:
            calls.append(record)
        self.calls_changed.emit()

    def _on_ask(self, runner: TurnRunner, request: Any) -> None:
        if self._live(runner) is not None:
            self.approval_needed.emit(request)

    def _on_finished(self, runner: TurnRunner, chunk: Chunk) -> None:
        live = self._live(runner)
        if live is None:
            return
        live.last = chunk  # its text came with the stream already (the turn yields every Chunk)
        self._ended(live)
        text = self._store(live)
        self.finished.emit(live, text)

    def _on_failed(self, runner: TurnRunner, message: str, kind: str) -> None:
        live = self._live(runner)
        if live is None:
            return
        self._ended(live)
        if live.round_open:  # stopped after a call: no words of a next answer yet
            live.text, live.flags = "", []
        if kind == "cancelled" and live.last is not None:  # the answer shows how it ended, as any stopped one
            live.last = replace(live.last, stats=replace(live.last.stats, stop_reason="cancelled"))
        stopped = kind == "cancelled"
        text = self._store(live, keep_words=stopped)
        if stopped and (text or live.rounds):
            self.finished.emit(live, text)
        else:
            self.failed.emit(live, message, kind)

    def _ended(self, live: Live) -> None:
        self.live = None
        live.ended = True
        if live.request.tools is not None:
            self.tools.turn_ended()  # a host replaced while this turn used it closes now

    def _store(self, live: Live, keep_words: bool = True) -> str:
        """Store the turn's answer with its calls: once a call ran, whatever ended the turn (what a tool did is
        never forgotten); without calls, when there are words to keep (a finished or stopped answer)."""
        text = live.text.strip() if keep_words or live.rounds else ""
        if text or live.rounds:
            self.store.add_message(live.conversation, "assistant", live.text, live.meta())
            if live.replaces is not None:
                self.store.delete_message(live.replaces)
        return text
