"""Every turn in the window (#48): `runtime.chat.turn.run_turn` on its own Python thread, never the GUI's.

A turn without tools is one round; a turn with tools is the tool loop. Either way each answer goes to the
engine thread through a blocking JobReader (shared with the local API server; the engine keeps the turn's KV
cache between rounds), and what the turn yields comes back to the GUI by Qt signals, in order: Chunks in
batches paced by `app.pace.Pace` (each round's first Chunk at once), everything else (a status before the
first token, a round, a call's progress, a question, the end) at once.

The approval question blocks the turn's thread, never the GUI's: `ask` is emitted and the thread waits for
`answer`, looking at the turn's cancel Event every 50 ms, so Stop or closing the window denies and ends. A
tool's result only ever travels as text in a call record: nothing here reads it to decide anything.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from PySide6.QtCore import QObject, QTimer, Signal

from app.pace import Pace
from runtime.chat.turn import run_turn
from runtime.engine.answer import Chunk
from runtime.engine.options import ChatOptions, EngineSettings, Message
from runtime.engine.reader import JobReader, failure_of
from runtime.engine.tool_loop import (
    DENIED,
    CallDecided,
    CallFinished,
    CallProposed,
    LoopFinished,
    RoundStarted,
    Stream,
)
from runtime.errors import Cancelled

if TYPE_CHECKING:
    from runtime.chat.conversation import Conversation
    from runtime.chat.toolbox import McpToolbox, ToolSetup
    from runtime.engine.thread import EngineThread
    from runtime.mcp import ApprovalAnswer, CallRequest

log = logging.getLogger("specquant.app")

STOPPED = "The call was stopped by the user before it finished."
_POLL_S = 0.05  # how often a thread waiting for the user's answer looks at Stop
_LATER, _NOW, _FIRST = 0, 1, 2  # how soon the GUI takes what waits: paced, at once, at once as a round's first


@dataclass
class TurnRequest:
    """One turn for the engine thread: its model and settings, the `conversation` it answers (which makes the
    turn, its toolbox opened on the turn's own thread) and its Stop."""

    id: int
    model: str
    settings: EngineSettings
    conversation: Conversation
    cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def tools(self) -> ToolSetup | None:
        """The conversation's tools (None: a turn without)."""
        return self.conversation.tools


class Sent(NamedTuple):
    """One answer of a turn as the engine was asked for it (the persona applied, earlier calls shown)."""

    messages: list[Message]
    options: ChatOptions


@dataclass(frozen=True)
class _Ask:
    request: CallRequest


@dataclass(frozen=True)
class _End:
    last: Chunk | None  # the last answer's last Chunk; None when the turn did not finish
    reason: str = ""
    kind: str = ""


class TurnRunner(QObject):
    """One turn. `start()` runs it; `request.cancel` is its Stop. `stream` replaces the engine thread's
    answers (tests). Signals, on the GUI thread:"""

    status = Signal(str)  # before the first token: loading, calibrating, the servers starting
    chunks = Signal(object)  # a list of Chunks in order (each round's last one among them, done=True)
    round_started = Signal(int)  # 1-based
    call = Signal(object)  # a call record (app.store.CALL_FIELDS) whenever its outcome moves on
    ask = Signal(object)  # a runtime.mcp.CallRequest to put to the user; reply with `answer`
    finished = Signal(object)  # the last answer's last Chunk
    failed = Signal(str, str)  # a one-line reason ("" when stopped), its kind (Failure.kind; "cancelled")
    _wake = Signal(int)  # turn thread → GUI: items wait in the inbox (_LATER, _NOW or _FIRST)

    def __init__(
        self, engine: EngineThread | None, request: TurnRequest, pace: Pace | None = None, stream: Stream | None = None
    ) -> None:
        super().__init__()
        self.engine, self.request = engine, request
        self.cancel = request.cancel
        self.pace = pace or Pace()  # the window's, across turns: how much drawing costs is learned once
        self.stream: Stream = stream or self._engine_stream
        self.sent: list[Sent] = []  # each answer as the engine was asked for it
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._inbox: list[Any] = []
        self._woken = False
        self._round_began = True  # the next Chunk is its round's first: shown at once
        self._answered = threading.Event()
        self._decision: ApprovalAnswer | None = None
        self._box: McpToolbox | None = None
        self._records: dict[str, dict[str, Any]] = {}  # call id → its record (the turn's thread only)
        self._finished: set[str] = set()  # the calls whose result the loop reported
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.flush)
        self._wake.connect(self._on_wake)

    # --- the GUI's side ------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="specquant-turn", daemon=True)
        self.thread.start()

    def answer(self, decision: ApprovalAnswer) -> None:
        """The user's answer to the question last asked (any thread)."""
        self._decision = decision
        self._answered.set()

    def join(self, timeout: float) -> bool:
        """Wait for the turn's thread to end; whether it did (a server still starting may hold it longer)."""
        if self.thread is not None:
            self.thread.join(timeout)
        return self.thread is None or not self.thread.is_alive()

    def flush(self) -> None:
        """Deliver what waits, in order: consecutive Chunks as one batch, every other item on its own."""
        with self._lock:
            inbox, self._inbox, self._woken = self._inbox, [], False
        self._timer.stop()
        batch: list[Chunk] = []
        for item in inbox:
            if isinstance(item, Chunk):
                batch.append(item)
                continue
            if batch:
                self._emit_chunks(batch)
                batch = []
            self._dispatch(item)
        if batch:
            self._emit_chunks(batch)

    def _emit_chunks(self, batch: list[Chunk]) -> None:
        self.pace.tick()
        self.chunks.emit(batch)

    def _on_wake(self, when: int) -> None:
        if when == _FIRST:
            self.pace.restart()  # the wait before an answer's first token was idle and says nothing
        if when != _LATER:
            self.flush()
        elif not self._timer.isActive():
            self._timer.start(round(self.pace.interval_ms))

    def _dispatch(self, item: Any) -> None:
        if isinstance(item, _Ask):
            self.ask.emit(item.request)
        elif isinstance(item, _End):
            if item.last is not None:
                self.finished.emit(item.last)
            else:
                self.failed.emit(item.reason, item.kind)
        elif isinstance(item, dict):
            self.call.emit(item)
        elif isinstance(item, int):
            self.round_started.emit(item)
        else:
            self.status.emit(str(item))

    # --- the turn's thread -----------------------------------------------------------------------------
    def _post(self, item: Any, when: int = _NOW) -> None:
        with self._lock:
            self._inbox.append(item)
            wake = when != _LATER or not self._woken
            self._woken = True
        if wake:
            self._wake.emit(when)

    def _engine_stream(self, chat: list[Message], options: ChatOptions) -> Iterator[Chunk]:
        """One answer on the engine thread, its status before the first token shown (the window's own
        messages are never refused for the API's queue bound)."""
        assert self.engine is not None
        r = self.request
        reader = JobReader(self.engine)
        reader.post(r.model, r.settings, list(chat), options, cancel=self.cancel, bounded=False)
        yield from reader.chunks(on_status=self._post)

    def _run(self) -> None:
        conversation = self.request.conversation
        try:
            if conversation.tools is not None and conversation.tools.host is not None:
                self._post("Starting the tools…")

            def stream(chat: list[Message], options: ChatOptions) -> Iterator[Chunk]:
                self.sent.append(Sent(list(chat), options))
                return self.stream(chat, options)

            # The conversation makes the turn; its toolbox opens here, on the turn's thread (the documents index
            # is used by one thread at a time), and closes when the turn ends.
            with conversation.turn(self._ask) as spec:
                self._box = spec.toolbox
                for event in run_turn(stream, spec, self.cancel):
                    self._take(event)
        except Cancelled:
            self._stop_calls()
            self._post(_End(None, "", "cancelled"))
        except Exception as e:  # the turn's thread must say what happened, whatever it was
            failure = failure_of(e)
            if failure.kind == "internal":
                log.warning("a turn failed", exc_info=True)
            self._stop_calls()
            self._post(_End(None, failure.reason, failure.kind))

    def _take(self, event: Any) -> None:
        """One event of the turn (runtime.chat.turn), handed on towards the GUI."""
        if isinstance(event, Chunk):
            first, self._round_began = self._round_began, False
            self._post(event, _FIRST if first else _LATER)
        elif isinstance(event, RoundStarted):
            self._round_began = True
            self._post(event.n, _LATER)  # goes with the round's first Chunk, which restarts the pace
        elif isinstance(event, CallProposed):
            assert self._box is not None
            site = self._box.where(event.call.name)
            c = event.call
            self._records[c.id] = {
                "id": c.id, "name": c.name, "arguments": c.arguments, "server": site.server, "tool": site.tool,
                "outcome": "proposed", "result": "", "is_error": False, "elapsed_s": 0.0, "started": 0.0,
            }
            self._post_record(c.id)
        elif isinstance(event, CallDecided):
            record = self._records[event.call.id]
            record.update(outcome="running" if event.allowed else "denied", started=time.monotonic())
            self._post_record(event.call.id)
        elif isinstance(event, CallFinished):
            self._finished.add(event.call.id)
            record = self._records[event.call.id]
            allowed = record["outcome"] == "running"
            record.update(outcome="allowed" if allowed else "denied", result=event.result.text,
                          is_error=event.result.is_error, elapsed_s=round(event.result.elapsed_s, 3))
            self._post_record(event.call.id)
        elif isinstance(event, LoopFinished):
            self._post(_End(event.last))

    def _post_record(self, call_id: str) -> None:
        self._post({k: v for k, v in self._records[call_id].items() if k != "started"})

    def _stop_calls(self) -> None:
        """The calls a Stop cut short: one running is stopped, one not yet decided is denied (the model reads
        so if the chat goes on)."""
        for call_id, record in self._records.items():
            if call_id in self._finished:
                continue
            if record["outcome"] == "running":
                record.update(outcome="stopped", result=STOPPED, is_error=True,
                              elapsed_s=round(time.monotonic() - record["started"], 3))
            else:  # not asked yet, or denied (a Stop during the question denies)
                record.update(outcome="denied", result=DENIED)
            self._post_record(call_id)

    def _ask(self, request: CallRequest) -> ApprovalAnswer:
        """The policy's question, put to the GUI; Deny when the turn is stopped meanwhile."""
        from runtime.mcp import ApprovalAnswer

        self._answered.clear()
        self._decision = None
        self._post(_Ask(request))
        while not self._answered.wait(_POLL_S):
            if self.cancel.is_set():
                return ApprovalAnswer.DENY
        return self._decision or ApprovalAnswer.DENY
