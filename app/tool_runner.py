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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.tool_switches import ToolSwitches
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
    ToolCall,
    ToolResult,
    run_tool_loop,
)
from runtime.engine.tools import Tool
from runtime.errors import Cancelled

if TYPE_CHECKING:  # the MCP SDK loads only once a chat uses tools
    from runtime.engine.mcp_toolbox import McpToolbox
    from runtime.mcp import CallRequest, Decision, McpHost

log = logging.getLogger("specquant.app")

BUILTIN = "built-in"  # runtime.engine.document_tool.SOURCE: where the documents search runs
STOPPED = "The call was stopped by the user before it finished."
TURNED_OFF = "This tool is turned off in the Tools panel."
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


class OfferedTools:
    """The toolbox less the tools switched off in the panel: those are neither offered nor run."""

    def __init__(self, box: McpToolbox, switches: ToolSwitches) -> None:
        self.box, self.switches = box, switches

    def where(self, name: str) -> tuple[str, str]:
        """The (server, tool) that an offered name stands for; ("built-in", name) for a built-in tool."""
        source = self.box.source(name)
        route = self.box.host.route(name) if self.box.host is not None and source != BUILTIN else None
        return route if route else (source, name)

    def tools(self) -> Sequence[Tool]:
        off = self.switches.off()
        offered = []
        for t in self.box.tools():
            server, tool = self.where(t.name)
            if tool not in off.get(server, ()):
                offered.append(t)
        return offered

    def source(self, name: str) -> str:
        return self.box.source(name)

    def call(self, name: str, arguments: dict[str, Any], cancel: threading.Event) -> ToolResult:
        if not self.switches.is_on(*self.where(name)):  # turned off while the turn ran
            return ToolResult(TURNED_OFF, True, 0.0, self.source(name))
        return self.box.call(name, arguments, cancel)

    def approve(self, call: ToolCall, source: str) -> bool | str:
        return self.box.approve(call, source)


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
        from runtime.documents.library import Library
        from runtime.engine.document_tool import DocumentSearch
        from runtime.engine.mcp_toolbox import McpToolbox
        from runtime.mcp import ApprovalPolicy

        library = None
        try:
            builtin = []
            if self.setup.documents is not None:  # opened here: the index is used by one thread at a time
                library = Library(self.setup.documents)
                builtin.append(DocumentSearch(library))
            box = OfferedTools(McpToolbox(self.setup.host, ApprovalPolicy(self.setup.mode, self._ask), builtin),
                               self.setup.switches)
            if self.setup.host is not None:
                self._post("Starting the tools…")
            r = self.request

            def stream(chat: list[Message], options: ChatOptions) -> Any:
                return self.runner.stream_chat(chat, options, self.cancel, model=r.model, settings=r.settings)

            for event in run_tool_loop(stream, r.messages, r.options, box, box.approve, self.setup.max_rounds,
                                       self.cancel, self.setup.first_choice):
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
            if library is not None:
                library.close()

    def _take(self, event: Any, box: OfferedTools) -> None:
        if isinstance(event, Chunk):
            self._post(event, urgent=False)
        elif isinstance(event, RoundStarted):
            self._post(event.n)
        elif isinstance(event, CallProposed):
            server, tool = box.where(event.call.name)
            c = event.call
            self._current = c.id
            self._records[c.id] = {
                "id": c.id, "name": c.name, "arguments": c.arguments, "server": server, "tool": tool,
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
