"""The main window: it lays out the panels (app.window_panels, the Documents and Tools tabs, the status bar),
shows what the chat flow reports and hands the user's choices on. The deciding lives elsewhere: the chat flow
in app.chat_controller, the MCP host in app.tool_host_control, the API server in app.api_server_control, the
presets in app.preset_control, export and import in app.chat_files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QMainWindow, QSplitter, QTabWidget, QVBoxLayout, QWidget

from app.api_server_control import ApiServerControl
from app.approval_dialog import ApprovalPrompt
from app.chat_controller import AtHighestPrecision, ChatController, Choices, Live, Turn
from app.chat_files import export_chat, import_chat
from app.documents_panel import DocumentsPanel
from app.models_dialog import ModelsDialog
from app.preset_control import PresetControl
from app.presets_dialog import PresetsDialog
from app.settings import AppSettings, load_settings, save_settings
from app.settings_dialog import SettingsDialog
from app.stats_bar import StatsBar
from app.store import Store
from app.theme import apply_look
from app.tool_host_control import ToolHostControl
from app.tools_panel import ToolsPanel
from app.transcript import TranscriptView
from app.widgets import ErrorBanner
from app.window_panels import ChatList, Composer, Menus, ModelBar, Welcome, complete_models
from runtime.engine.answer import Chunk
from runtime.engine.thread import EngineThread
from runtime.errors import UserError

API_QUEUE = 32  # API requests that may wait for the engine (the window's own never wait on this bound)
NOTE_MS = 10_000  # how long a one-line note (an export, an import, a preset file's fault) stays in the status bar
TURN_JOIN_S = 5.0  # at close: how long the turn's thread may take to end (a Stop reaches it within ~0.05 s)


class MainWindow(QMainWindow):
    answer_finished = Signal(str)  # the answer's text ("" when it failed); tests and the self-test wait on it
    chunk_shown = Signal(object)  # the latest streamed Chunk, once the window has shown it (on the GUI thread)

    def __init__(
        self, store: Store | None = None, qsettings: QSettings | None = None, documents_index: Path | None = None
    ) -> None:
        super().__init__()
        self.qsettings, self.settings = qsettings, load_settings(qsettings)
        self.store = store or Store()
        # Beside the history: the user's data directory, as runtime.documents' default; a test's own folder.
        self.documents_index = documents_index or self.store.path.with_name("documents.sqlite3")
        self.conversation: int | None = None
        self._closing = False
        self.setWindowTitle("SpecQuant")
        self.resize(1100, 720)
        self.runner = EngineThread(max_queue=API_QUEUE)  # shared with the local API server
        self.chat = ChatController(self.store, self.runner)
        self.tools, self.presets = ToolHostControl(), PresetControl()
        self.api = ApiServerControl(self.runner, lambda: self.settings)
        self.approval = ApprovalPrompt(self, self.chat.answer_approval)
        self.models, self.presets_dialog = ModelsDialog(self.release_engine, self), PresetsDialog(self)
        self._build()
        self.menus = Menus(self, self.settings.highlight_draft, self.settings.speed_chart)
        self._connect()
        self.refresh_models()
        self.refresh_presets()
        self._show_settings()
        if self.store.recovered_from:
            self.banner.show_error(f"The conversation history could not be read; it was kept as "
                                   f"{self.store.recovered_from} and a new one was started.")
        self.input.setFocus()

    @property
    def live(self) -> Live | None:
        """The answer in flight (the chat controller's)."""
        return self.chat.live

    @property
    def model(self) -> str:
        return self.settings.model

    def _build(self) -> None:
        """The panels, laid out in the order that makes the focus chain."""
        self.chats, self.documents = ChatList(self.store), DocumentsPanel(self.documents_index)
        self.tools_panel = ToolsPanel(lambda: self.tools.host, self.tools.ensure, self.tools.switches)
        self.side_tabs = QTabWidget()
        self.side_tabs.setDocumentMode(True)
        for panel, name in ((self.chats, "C&hats"), (self.documents, "&Documents"), (self.tools_panel, "T&ools")):
            self.side_tabs.addTab(panel, name)
        self.model_bar, self.banner, self.welcome = ModelBar(), ErrorBanner(), Welcome(self.models.demo_shipped)
        self.transcript, self.composer = TranscriptView(), Composer()
        main = QWidget()
        layout = QVBoxLayout(main)
        layout.setContentsMargins(4, 8, 8, 8)
        for widget in (self.model_bar, self.banner, self.welcome, self.transcript, self.composer):
            layout.addWidget(widget, 1 if widget in (self.welcome, self.transcript) else 0)
        splitter = QSplitter()
        splitter.addWidget(self.side_tabs)
        splitter.addWidget(main)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 840])
        self.setCentralWidget(splitter)
        self.stats = StatsBar(self.statusBar())
        # What the self-test and scripts/measure_window.py read of the window, by these names.
        self.input, st = self.composer.input, self.stats
        self.badge, self.precision, self.speed = st.badge, st.precision, st.speed
        self.acceptance, self.placement, self.speed_chart = st.acceptance, st.placement, st.chart

    def _connect(self) -> None:
        """What the user does in each panel, to what decides it; what the chat flow reports, to what shows it."""
        c, p, s, t, m = self.chats, self.composer, self.statusBar(), self.tools_panel, self.model_bar
        choose = self.chat.choose
        t.show_mode(self.settings.tool_approval)
        for signal, slot in (
            (c.selected, self.open_conversation), (c.new_button.clicked, self.new_conversation),
            (c.delete, self.delete_conversation), (c.failed, self.banner.show_error),
            (self.documents.collections_changed, self.show_collections),
            (t.chat_tools_changed, lambda on: self._store_call(choose, self.conversation, "tools", on)),
            (t.mode_changed, lambda mode: self._save(replace(self.settings, tool_approval=mode))),
            (t.servers_changed, lambda: self.tools.retire(self.chat.tool_host_in_use())),
            (m.model_chosen, self.select_model), (m.models_button.clicked, self.show_models),
            (m.settings_button.clicked, self.show_settings),
            (self.banner.action, lambda act: self.setup_demo() if act == "Set up demo model" else self.show_models()),
            (self.welcome.demo_button.clicked, self.setup_demo if self.welcome.demo_shipped else self.show_models),
            (self.transcript.copied, lambda _: s.showMessage("Code copied", 2000)),
            (self.transcript.open_failed, lambda path: s.showMessage(f"No application opens {path}", 6000)),
            (p.documents_chosen, self.choose_documents), (p.presets_button.clicked, self.show_presets),
            (p.preset_chosen, lambda name: self._store_call(choose, self.conversation, "preset", name)),
            (p.input.submitted, self.send), (p.send_button.clicked, self.send),
            (p.stop_button.clicked, self.stop), (p.regenerate, self.regenerate),
            (self.chat.status, lambda text: s.showMessage(text) if text else s.clearMessage()),
            (self.chat.chunks_taken, self._on_chunks), (self.chat.calls_changed, self._render_live),
            (self.chat.finished, lambda live, text: self._turn_ended(live, text, "", "")),
            (self.chat.failed, lambda live, message, kind: self._turn_ended(live, "", message, kind)),
            (self.chat.approval_needed, self.approval.ask),
            (self.models.models_changed, self.refresh_models), (self.models.use_model, self.select_model),
            (self.presets_dialog.presets_changed, self.refresh_presets),
        ):
            signal.connect(slot)

    # --- models ------------------------------------------------------------------------------------
    complete_models = staticmethod(complete_models)

    def refresh_models(self) -> None:
        current = self.model_bar.refresh(self.model)
        self.stats.show_model(current)
        if current != self.model:
            self._save(replace(self.settings, model=current))
        self.welcome.setVisible(not current)
        self.transcript.setVisible(bool(current))
        self._show_busy()

    def select_model(self, name: str) -> None:
        """Answer with `name` from now on, in this chat too (it is switched back to when the chat is opened)."""
        if name and name != self.model:
            self._save(replace(self.settings, model=name))
            if self.conversation is not None:
                self._store_call(self.store.set_model, self.conversation, name)
        self.refresh_models()
        self.banner.hide()

    def setup_demo(self) -> None:
        self.show_models()
        self.models.setup_demo()

    def show_models(self) -> None:
        self.models.refresh()
        _raise(self.models)

    def release_engine(self) -> None:
        """Stop any answer and unload the models (before a delete or repair touches their files)."""
        self.chat.stop()
        self.runner.release()

    # --- conversations and what each answers with ---------------------------------------------------------
    def open_conversation(self, conversation_id: int | None) -> None:
        c = conversation_id
        # Only a chat opened anew brings its model back: a redraw of this one (zoom, an answer's end) keeps the
        # model the user has just picked. One no longer in the cache is said, and the chat goes on.
        if c is not None and c != self.conversation and (wanted := self.store.model(c)) and wanted != self.model:
            if wanted in self.complete_models():
                self._save(replace(self.settings, model=wanted))
                self.refresh_models()
            else:
                self.statusBar().showMessage(f"This chat used {wanted}, which is no longer among the models; "
                                             f"it goes on with {self.model}.", NOTE_MS)
        self.conversation, choices = c, self.chat.choices(c)
        self.transcript.show_messages(self.store.messages(c) if c is not None else [])
        self.composer.show_documents(choices.documents)
        self.composer.show_preset(choices.preset)
        self.tools_panel.show_chat_tools(choices.tools)
        if self.live is not None and self.live.conversation == c:
            self.transcript.begin_live()
            self._render_live()
        self.chats.refresh(c)
        self._show_busy()

    def new_conversation(self) -> None:
        self.chat.unsent = Choices()  # a new chat starts without documents, preset or tools
        self.open_conversation(None)
        self.input.setFocus()

    def delete_conversation(self, conversation: int) -> None:
        if self.live is not None and self.live.conversation == conversation:
            self.banner.show_error("Stop the answer in this conversation before deleting it.")
        elif self.chats.confirm_delete(conversation):
            self.store.delete(conversation)
            self.open_conversation(None)

    def choose_documents(self, documents: str | None) -> None:
        """What this chat answers from, as the Answer-from box says: None no documents, "" all, else one."""
        self.composer.show_documents(documents)
        self._store_call(self.chat.choose, self.conversation, "documents", documents)

    def _store_call(self, change: Any, *args: Any) -> None:
        """A change to the history; one it refuses (locked, full, read-only) is said in the banner."""
        try:
            change(*args)
        except UserError as e:
            self.banner.show_error(str(e))

    def show_collections(self, names: list[str]) -> None:
        self.composer.show_collections(names)
        self.tools_panel.show_documents(bool(names))

    # --- chatting ----------------------------------------------------------------------------------
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.live is not None:
            return
        if not self.model:
            self.banner.show_error("There is no model yet: set up the demo model or add one.", "Set up demo model")
            return
        turn = self.chat.new_turn(self.conversation, text, self.model)  # stored before anything can fail
        self.conversation = turn.conversation
        self.input.clear()
        self._start(turn)

    def regenerate(self, higher: bool) -> None:
        """Answer the last user message again; the old answer is replaced only when the new one is done."""
        if self.live is not None or self.conversation is None:
            return
        try:
            turn = self.chat.regenerate_turn(self.conversation, higher)
        except AtHighestPrecision as e:
            self.statusBar().showMessage(str(e), 4000)
            return
        if turn is not None:
            self._start(turn)

    def _start(self, turn: Turn) -> None:
        """Show the turn's messages and answer them with the current settings."""
        self.transcript.show_messages(turn.messages)
        self.chats.refresh(turn.conversation)
        search = self.tools_panel.has_documents and self.documents_index.exists()
        try:
            missing = self.chat.answer(turn, self.model, self.settings, self.presets, self.tools,
                                       self.documents_index, search)
        except UserError as e:
            self.banner.show_error(str(e))
            self._show_busy()
            return
        self.banner.hide()
        if missing:
            self.banner.show_error(f"The preset {missing} is gone: this answer has none. Pick another under Preset.")
        self.transcript.begin_live()
        self._render_live()
        self._show_busy()

    def stop(self) -> None:
        self.approval.close()  # denies: the turn ends (its cancel is set just below)
        if self.chat.stop():
            self.composer.stop_button.setEnabled(False)
            self.statusBar().showMessage("Stopping…", 2000)

    def _on_chunks(self, chunks: list[Chunk]) -> None:
        """A batch of the answer (app.turn_runner paces them by what the GUI thread spends): one redraw for all."""
        for chunk in chunks:
            self.stats.chart.add_chunk(chunk)  # a point per cycle; the chart repaints on its own timer
        if chunks[-1].done:
            self.stats.show_answer(chunks[-1], self.model)
            return
        self._render_live()  # the text and the status bar's words
        self.chunk_shown.emit(chunks[-1])

    def _turn_ended(self, live: Live, text: str, message: str, kind: str) -> None:
        """The answer was stored (`text`), or failed (`message`, its `kind`; "" when stopped)."""
        if live.request.tools is not None:
            self.approval.close()
            self.tools.turn_ended()
            if self.tools_panel.loaded:
                self.tools_panel.refresh()  # a new "always", a server's new state
        if self.conversation == live.conversation:
            self.open_conversation(live.conversation)  # a failed answer is gone; the user's message stays
        self.statusBar().clearMessage()
        if message:
            self.banner.show_error(message, "Open Models" if kind == "model" else "")
        self._show_busy()
        self.answer_finished.emit(text)

    def _render_live(self) -> None:
        live = self.live
        if live is not None and live.conversation == self.conversation:
            self.transcript.update_live(live.text or "…", live.meta())
            if live.last is not None:
                self.stats.show_answer(live.last, self.model)

    def _show_busy(self) -> None:
        busy = self.live is not None
        choices = self.chat.regenerate_choices(None if busy else self.conversation)
        self.composer.show_busy(busy, bool(self.model), *choices)

    # --- presets, export and import -------------------------------------------------------------------
    def refresh_presets(self) -> None:
        """Offer the presets again; an unreadable presets.json is one status line (the shipped ones stay)."""
        if fault := self.presets.reload():
            self.statusBar().showMessage(fault, NOTE_MS)
        self.composer.show_presets(self.presets.names)

    def show_presets(self) -> None:
        self.presets_dialog.refresh()
        _raise(self.presets_dialog)

    def export_conversation(self) -> None:
        c = self.conversation
        self._note(export_chat(self, self.store, c) if c is not None else "Open a chat to export it.")

    def import_conversation(self) -> None:
        new, note = import_chat(self, self.store)
        if new is not None:
            self.open_conversation(new)
        self._note(note)

    def _note(self, text: str) -> None:
        if text:
            self.statusBar().showMessage(text, NOTE_MS)

    # --- settings and view -------------------------------------------------------------------------
    def show_settings(self) -> None:
        dialog = SettingsDialog(self.settings, self)
        if dialog.exec():
            self.apply_settings(dialog.value())

    def apply_settings(self, settings: AppSettings) -> None:
        self._save(settings.check())
        self._show_settings()

    def _show_settings(self) -> None:
        """The API server, the look and the view as the settings say."""
        s = self.settings
        if fault := self.api.sync(s.api_port if s.api_server else None):
            self.banner.show_error(fault)
        self.stats.show_api(self.api.url)
        apply_look(s)
        self.menus.show_view(s.highlight_draft, s.speed_chart)
        self.transcript.highlight_draft = s.highlight_draft
        self.stats.chart.setVisible(s.speed_chart)
        self.open_conversation(self.conversation)

    def toggle_view(self) -> None:
        m = self.menus
        self.apply_settings(replace(self.settings, highlight_draft=m.highlight_toggle.isChecked(),
                                    speed_chart=m.chart_toggle.isChecked()))

    def zoom(self, step: int) -> None:
        self._save(replace(self.settings, zoom=0 if step == 0 else max(-6, min(24, self.settings.zoom + step))))
        apply_look(self.settings)
        self.open_conversation(self.conversation)

    def _save(self, settings: AppSettings) -> None:
        self.settings = settings
        save_settings(settings, self.qsettings)

    # --- lifetime ----------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        """Cancel an answer or conversion in flight, free the models on their thread, and wait for it."""
        if not self._closing:
            self._closing = True
            self.approval.close()
            self.chat.stop()
            self.models.shutdown()
            self.documents.shutdown()  # cancels indexing between two files; the rest stays pending
            self.api.stop()
            self.runner.close()
            # The turn ends at the Stop; what it last reported (the stopped answer) still waits in its inbox:
            # deliver it now, so the partial answer is saved before the history closes.
            self.chat.finish_now(TURN_JOIN_S)
            self.tools.close()
            self.store.close()
        event.accept()


def _raise(dialog: QWidget) -> None:
    dialog.show()
    dialog.raise_()
