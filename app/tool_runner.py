"""A turn with tools in the window (#43): `run_tool_loop` on its own Python thread, never the GUI's.

Each answer of the loop goes through the engine thread (`EngineThread.stream_chat`, a blocking JobReader), so
the window's streaming display works as for any answer, and the engine keeps the turn's KV cache between
rounds. What the loop reports comes back to the GUI by Qt signals, in order: Chunks in batches paced as the
worker paces them (app.worker.Pace), everything else (a round, a call's progress, a question, the end) at once.

The approval question blocks the loop's thread, never the GUI's: `ask` is emitted and the thread waits for
`answer`, looking at the turn's cancel Event every 50 ms, so Stop or closing the window denies and ends. A
tool's result only ever travels as text in a call record: nothing here reads it to decide anything.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.worker import ChatRequest, Pace
from runtime.engine.answer import Chunk
from runtime.engine.options import ChatOptions, Message
from runtime.engine.reader import failure_of
from runtime.engine.thread import EngineThread
from runtime.engine.tool_loop import (
    DEFAULT_ROUNDS,
    DENIED,
    CallDecided,
    CallFinished,
    CallProposed,
    LoopFinished,
    RoundStarted,
)
from runtime.errors import Cancelled
from runtime.mcp.switches import ToolSwitches

if TYPE_CHECKING:  # the MCP SDK loads only once a chat uses tools
    from runtime.chat.toolbox import McpToolbox
    from runtime.mcp import CallRequest, Decision, McpHost

log = logging.getLogger("specquant.app")

STOPPED = "The call was stopped by the user before it finished."
_POLL_S = 0.05  # how often a thread waiting for the user's answer looks at Stop


@dataclass(frozen=True)
class ToolSetup:
    """What a turn with tools runs with: the window's host (None: no server configured), the approval mode,
    the Tools panel's switches, the documents index when a collection exists (search_documents is offered)."""

    host: McpHost | None
    mode: str = "ask"
    switches: ToolSwitches = field(default_factory=ToolSwitches)
    documents: Path | None = None
    first_choice: str = "auto"
    max_rounds: int = DEFAULT_ROUNDS


@dataclass(frozen=True)
class _Ask:
    request: CallRequest


@dataclass(frozen=True)
class _End:
    last: Chunk | None  # the last answer's last Chunk; None when the turn did not finish
    reason: str = ""
    kind: str = ""


class ToolTurn(QObject):
    """One turn with tools. `start()` runs it; `request.cancel` is its Stop. Signals, on the GUI thread:"""

    status = Signal(str)  # before the first token: the servers are starting
    chunks = Signal(object)  # a list of Chunks in order (each round's last one among them, done=True)
    round_started = Signal(int)  # 1-based
    call = Signal(object)  # a call record (app.store.CALL_FIELDS) whenever its outcome moves on
    ask = Signal(object)  # a runtime.mcp.CallRequest to put to the user; reply with `answer`
    finished = Signal(object)  # the last answer's last Chunk
    failed = Signal(str, str)  # a one-line reason ("" when stopped), its kind (Failure.kind; "cancelled")
    _wake = Signal(bool)  # loop thread → GUI: items wait in the inbox (True: deliver them at once)

    def __init__(self, runner: EngineThread, request: ChatRequest, setup: ToolSetup) -> None:
        super().__init__()
        self.runner, self.request, self.setup = runner, request, setup
        self.cancel = request.cancel
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._inbox: list[Any] = []
        self._woken = False
        self._answered = threading.Event()
        self._decision: Decision | None = None
        self._records: dict[str, dict[str, Any]] = {}  # call id → its record (the loop's thread only)
        self._finished: set[str] = set()  # the calls whose result the loop reported
        self._current = ""  # the call being decided
        self.pace = Pace()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.flush)
        self._wake.connect(self._on_wake)

    # --- the GUI's side ------------------------------------------------------------------------------
    def start(self) -> None:
        self.pace.restart()
        self.thread = threading.Thread(target=self._run, name="specquant-tools", daemon=True)
        self.thread.start()

    def answer(self, decision: Decision) -> None:
        """The user's answer to the question last asked (any thread)."""
        self._decision = decision
        self._answered.set()

    def join(self, timeout: float) -> bool:
        """Wait for the loop's thread to end; whether it did (a server still starting may hold it longer)."""
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
                self.pace.tick()
                self.chunks.emit(batch)
                batch = []
            self._dispatch(item)
        if batch:
            self.pace.tick()
            self.chunks.emit(batch)

    def _on_wake(self, urgent: bool) -> None:
        if urgent:
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

    # --- the loop's thread -----------------------------------------------------------------------------
    def _post(self, item: Any, urgent: bool = True) -> None:
        with self._lock:
            self._inbox.append(item)
            wake = urgent or not self._woken
            self._woken = True
        if wake:
            self._wake.emit(urgent)

    def _run(self) -> None:
        from runtime.chat.toolbox import open_toolbox
        from runtime.chat.turn import TurnSpec, run_turn

        box = None
        try:
            # Opened here: the documents index is used by one thread at a time. The host is the window's.
            box = open_toolbox(self.setup.host, self.setup.mode, self._ask, self.setup.documents,
                               switches=self.setup.switches, owns_host=False)
            if self.setup.host is not None:
                self._post("Starting the tools…")
            r = self.request

            def stream(chat: list[Message], options: ChatOptions) -> Any:
                return self.runner.stream_chat(chat, options, self.cancel, model=r.model, settings=r.settings)

            spec = TurnSpec(r.messages, r.options, None, box, self.setup.max_rounds, self.setup.first_choice)
            for event in run_turn(stream, spec, self.cancel):
                self._take(event, box)
        except Cancelled:
            self._stop_calls()
            self._post(_End(None, "", "cancelled"))
        except Exception as e:  # the loop's thread must say what happened, whatever it was
            failure = failure_of(e)
            if failure.kind == "internal":
                log.warning("a turn with tools failed", exc_info=True)
            self._stop_calls()
            self._post(_End(None, failure.reason, failure.kind))
        finally:
            if box is not None:
                box.close()

    def _take(self, event: Any, box: McpToolbox) -> None:
        if isinstance(event, Chunk):
            self._post(event, urgent=False)
        elif isinstance(event, RoundStarted):
            self._post(event.n)
        elif isinstance(event, CallProposed):
            site = box.where(event.call.name)
            c = event.call
            self._current = c.id
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

    def _ask(self, request: CallRequest) -> Decision:
        """The policy's question, put to the GUI; Deny when the turn is stopped meanwhile."""
        from runtime.mcp import Decision

        self._answered.clear()
        self._decision = None
        self._post(_Ask(request))
        while not self._answered.wait(_POLL_S):
            if self.cancel.is_set():
                return Decision.DENY
        return self._decision or Decision.DENY
