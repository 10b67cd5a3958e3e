"""The open chat: its transcript and input row, and the answer in flight as app.chat_controller reports it
(streamed, stopped, stored or failed), with the approval questions of its tools. It knows which conversation
is open; the chat controller decides what is stored and answered, and the window gives the pane the status
bar, the banner, the conversation list, the Tools tab and the settings to answer with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QStatusBar, QVBoxLayout, QWidget

from app.approval_dialog import ApprovalPrompt
from app.chat_controller import AtHighestPrecision, ChatController, Choices, Live, Turn
from app.message_area import MessageArea
from app.model_facts import can_think
from app.settings import AppSettings
from app.source_viewer import SourceViewer, passages_of
from app.stats_bar import StatsBar
from app.tools_panel import ToolsPanel
from app.transcript import TranscriptView
from app.widgets import ErrorBanner
from app.window_panels import ChatList, Composer, StartPanel
from runtime.engine.answer import Chunk
from runtime.errors import UserError


class ChatPane(QWidget):
    """The open conversation (`conversation`; None: a new chat) and its answer in flight."""

    answer_finished = Signal(str)  # the answer's text ("" when it failed); tests and the self-test wait on it
    chunk_shown = Signal(object)  # the latest streamed Chunk, once it is shown (on the GUI thread)
    model_wanted = Signal(str)  # a chat opened anew answered with this model: the window switches back to it

    def __init__(
        self,
        chat: ChatController,
        stats: StatsBar,
        status: QStatusBar,
        banner: ErrorBanner,
        chats: ChatList,
        tools_panel: ToolsPanel,
        settings: Callable[[], AppSettings],
        notes: MessageArea | None = None,
    ) -> None:
        super().__init__()
        self.notes = notes or MessageArea()  # messages that stay until read (#51)
        self.wait = ""  # what the answer in flight waits for, before its first words (#51)
        self.chat, self.store, self.stats, self.status, self.banner = chat, chat.store, stats, status, banner
        self.chats, self.tools_panel, self.settings = chats, tools_panel, settings
        self.conversation: int | None = None
        self.told_unused: set[int] = set()  # chats told they answer without the documents there are
        self.think_switch: QAction | None = None  # the Chat menu's "Let the model think": this chat's switch
        self.transcript, self.composer = TranscriptView(), Composer()
        self.approval = ApprovalPrompt(self, chat.answer_approval, self.stop_at_question)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.start = StartPanel()  # an empty chat's first screen (#51)
        self.start.prompt_chosen.connect(self.ask)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.start, 1)
        layout.addWidget(self.composer)
        p = self.composer
        for signal, slot in (
            (self.transcript.copied, lambda _: status.showMessage("Code copied", 2000)),
            (self.transcript.open_failed, self.show_source),
            (p.documents_chosen, self.choose_documents),
            (p.persona_chosen, lambda name: self.store_call(chat.choose, self.conversation, "persona", name)),
            (p.exact_chosen, self.choose_exact),
            (tools_panel.chat_tools_changed, lambda on: self.store_call(chat.choose, self.conversation, "tools", on)),
            (p.input.submitted, self.send), (p.send_button.clicked, self.send),
            (p.stop_button.clicked, self.stop), (p.regenerate, self.regenerate),
            (chats.selected, self.open_conversation), (chats.new_button.clicked, self.new_conversation),
            (chats.delete, self.delete_conversation),
            (chat.status, self._on_status),
            (chat.chunks_taken, self._on_chunks), (chat.calls_changed, self._render_live),
            (chat.finished, lambda live, text: self._ended(live, text, "", "")),
            (chat.failed, lambda live, message, kind: self._ended(live, "", message, kind)),
            (chat.approval_needed, self.approval.ask),
        ):
            signal.connect(slot)

    @property
    def model(self) -> str:
        return self.settings().model

    # --- which chat is open, and what it answers with -----------------------------------------------------
    def open_conversation(self, conversation_id: int | None) -> None:
        c = conversation_id
        if c is None or c != self.conversation:  # another chat: the previous one's figures must not stay
            live = self.chat.live
            if live is None or live.conversation != c:
                self.stats.clear()
        # Only a chat opened anew brings its model back: a redraw of this one (zoom, an answer's end) keeps the
        # model the user has just picked.
        if c is not None and c != self.conversation and (wanted := self.store.model(c)) and wanted != self.model:
            self.model_wanted.emit(wanted)
        self.conversation, choices = c, self.chat.choices(c)
        self.transcript.show_messages(self.store.messages(c) if c is not None else [])
        self.composer.show_documents(choices.documents)
        self.composer.show_persona(choices.persona)
        self.composer.exact_box.setChecked(choices.speed == "exact")
        self.tools_panel.show_chat_tools(choices.tools)
        self.show_thinking()
        live = self.chat.live
        if live is not None and live.conversation == c:
            self.transcript.begin_live()
            self._render_live()
        self.chats.refresh(c)
        self.show_busy()

    def new_conversation(self) -> None:
        # A new chat answers from the documents last chosen (#63: added documents are used), without persona or tools.
        self.chat.unsent = Choices(documents=self.chat.last_documents)
        self.open_conversation(None)
        self.composer.input.setFocus()

    def delete_conversation(self, conversation: int) -> None:
        live = self.chat.live
        if live is not None and live.conversation == conversation:
            self.banner.show_error("Stop the answer in this conversation before deleting it.")
        elif self.chats.confirm_delete(conversation):
            self.store.delete(conversation)
            self.open_conversation(None)

    def show_thinking(self) -> None:
        """The Chat menu's switch as this chat has it (a chat never switched: as Settings say)."""
        if self.think_switch is not None:
            thinks = can_think(self.model)  # a model that does not think has nothing to switch (#63)
            chosen = self.chat.choices(self.conversation).thinking
            self.think_switch.setEnabled(thinks)
            self.think_switch.setChecked(thinks and (self.settings().thinking if chosen is None else chosen))

    def choose_exact(self, on: bool) -> None:
        """This chat with the full model's own words (the `exact` speed preset), or as Settings say."""
        self.store_call(self.chat.choose, self.conversation, "speed", "exact" if on else None)

    def choose_thinking(self, on: bool) -> None:
        """This chat's thinking on or off (a thinking model's: others have nothing to switch)."""
        self.store_call(self.chat.choose, self.conversation, "thinking", on)

    def choose_documents(self, documents: str | None) -> None:
        """What this chat answers from, as the Answer-from box says: None no documents, "" all, else one."""
        self.composer.show_documents(documents)
        self.chat.last_documents = documents
        self.store_call(self.chat.choose, self.conversation, "documents", documents)

    def store_call(self, change: Any, *args: Any) -> None:
        """A change to the history; one it refuses (locked, full, read-only) is said in the banner."""
        try:
            change(*args)
        except UserError as e:
            self.banner.show_error(str(e))

    # --- the answer ------------------------------------------------------------------------------------
    def send(self) -> None:
        text = self.composer.input.toPlainText().strip()
        if not text or self.chat.live is not None:
            return
        if not self.model:
            self.banner.show_error("There is no model yet: set up the demo model or add one.", "Set up demo model")
            return
        turn = self.chat.new_turn(self.conversation, text, self.model)  # stored before anything can fail
        self.conversation = turn.conversation
        self.composer.input.clear()
        self._start(turn)

    def ask(self, text: str) -> None:
        """Put `text` in the input and send it (an example prompt of the first screen)."""
        self.composer.input.setPlainText(text)
        self.send()

    def regenerate(self, higher: bool) -> None:
        """Answer the last user message again; the old answer is replaced only when the new one is done."""
        if self.chat.live is not None or self.conversation is None:
            return
        try:
            turn = self.chat.regenerate_turn(self.conversation, higher)
        except AtHighestPrecision as e:
            self.notes.show_note(str(e))
            return
        if turn is not None:
            self._start(turn)

    def _start(self, turn: Turn) -> None:
        """Show the turn's messages and answer them with the current settings."""
        self.transcript.show_messages(turn.messages)
        self.chats.refresh(turn.conversation)
        try:
            missing = self.chat.answer(turn, self.model, self.settings())
        except UserError as e:
            self.banner.show_error(str(e))
            self.show_busy()
            return
        self.banner.hide()
        self._say_documents_unused(turn.conversation)
        if missing:
            self.banner.show_error(f"The persona {missing} is gone: this answer has none. Pick another under "
                                   "Persona.")
        self.transcript.begin_live()
        self._render_live()
        self.show_busy()

    def _say_documents_unused(self, conversation: int) -> None:
        """An answer without the documents there are: said once a chat, in one line (#63: nothing said so)."""
        choices = self.chat.choices(conversation)
        if choices.documents is not None or not self.tools_panel.has_documents or conversation in self.told_unused:
            return
        live = self.chat.live
        if live is not None and live.request.conversation.search() is None:  # nor offered to search them
            self.told_unused.add(conversation)
            self.notes.show_note("This chat answers without your documents: pick them under Answer from "
                                 "to have them used.")

    def stop(self) -> None:
        self.approval.close()  # denies: the turn ends (its cancel is set just below)
        if self.chat.stop():
            self.composer.stop_button.setEnabled(False)
            self.stats.show_wait("Stopping…")  # in the status line until the stopped answer's figures replace it

    def stop_at_question(self, request: Any) -> None:
        """Esc, Stop answer or the close box in the approval question: the call was denied (already answered) and
        the answer stops, said in one line (#63: Esc denied one call and the model went on)."""
        if self.chat.live is not None:
            self.stop()
            self.notes.show_note(f"Stopped: {request.server} › {request.tool} did not run, and the answer ended "
                                 "there. (Deny refuses one call and lets the model go on.)")

    def _on_chunks(self, chunks: list[Chunk]) -> None:
        """A batch of the answer (app.turn_runner paces them by what the GUI thread spends): one redraw for all."""
        live = self.chat.live
        shown = live is None or live.conversation == self.conversation  # another chat's figures stay off
        for chunk in chunks if shown else ():
            self.stats.chart.add_chunk(chunk)  # a point per cycle; the chart repaints on its own timer
        if chunks[-1].done:
            if shown:
                self.stats.show_answer(chunks[-1], self.model, live.text if live is not None else "")
            return
        self._render_live()  # the text and the status bar's words
        self.chunk_shown.emit(chunks[-1])

    def _ended(self, live: Live, text: str, message: str, kind: str) -> None:
        """The answer was stored (`text`), or failed (`message`, its `kind`; "" when stopped)."""
        if live.request.tools is not None:
            self.approval.close()
            if self.tools_panel.loaded:
                self.tools_panel.refresh()  # a new "always", a server's new state
        if self.conversation == live.conversation:
            self.open_conversation(live.conversation)  # a failed answer is gone; the user's message stays
        self.status.clearMessage()
        self.wait = ""
        if live.last is None:  # no answer came: its wait is over, and says nothing now
            self.stats.show_wait("")
        if message:
            self.banner.show_error(message, "Open Models" if kind == "model" else "")
        self.show_busy()
        self.answer_finished.emit(text)

    def _render_live(self) -> None:
        live = self.chat.live
        if live is not None and live.conversation == self.conversation:
            wait = self._tool_wait(live) or self.wait
            self.transcript.update_live(live.text or wait or "…", live.meta())
            if live.last is not None:
                self.stats.show_answer(live.last, self.model, live.text)
            if wait:
                self.stats.show_wait(wait)

    def _on_status(self, text: str) -> None:
        """What the answer waits for before its first words ("" once they come), in the status line and where
        the answer will appear."""
        self.wait = text
        live = self.chat.live
        if live is None or live.conversation == self.conversation:
            self.stats.show_wait(text)
        self._render_live()

    @staticmethod
    def _tool_wait(live: Live) -> str:
        """While a call of this turn waits for the user's approval or runs: which, in words."""
        calls = [c for r in live.rounds for c in r.get("calls", [])]
        for c in reversed(calls):
            if c.get("outcome") == "proposed":
                return f"Waiting for your approval to run {c.get('tool') or c.get('name')}…"
            if c.get("outcome") == "running":
                return f"Waiting for the tool {c.get('tool') or c.get('name')} to finish…"
        return ""

    def show_source(self, path: str) -> None:
        """A source no application opens: its path and the passages this chat's answers were given from it."""
        messages = self.store.messages(self.conversation) if self.conversation is not None else []
        self.source_viewer = SourceViewer(path, passages_of(messages, path), self)
        self.source_viewer.show()

    def show_busy(self) -> None:
        busy = self.chat.live is not None
        choices = self.chat.regenerate_choices(None if busy else self.conversation)
        self.composer.show_busy(busy, bool(self.model), *choices)
        # A new chat, nothing asked yet: the first screen instead of an empty transcript (no model: the window's
        # Welcome instead of both).
        start = self.conversation is None and not busy and bool(self.model)
        self.start.setVisible(start)
        self.transcript.setVisible(bool(self.model) and not start)
