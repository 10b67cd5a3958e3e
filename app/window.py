"""The main window: conversations, transcript, input, status bar; inference on the worker thread. It wires the
panels (built in app.window_panels, which sets their widgets on it) to the chat flow (app.chat_controller).

It owns the MCP host of a chat with tools (#43): created when such a chat first answers (or a server is
started in the Tools panel), replaced when mcp.json changes, and closed with the window. Approval questions
open app.approval_dialog without a nested event loop; Stop and closing the window deny them."""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QInputDialog,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app import window_panels as panels
from app.chat_controller import AtHighestPrecision, ChatController, Live, Turn
from app.conversation_io import exported, read_file, write_file
from app.models_dialog import ModelsDialog
from app.presets_dialog import PresetsDialog
from app.settings import AppSettings, load_settings, save_settings
from app.settings_dialog import SettingsDialog
from app.store import Store
from app.theme import apply_look
from app.turn_runner import ToolSetup
from runtime.documents.grounding import Grounding
from runtime.engine.answer import Chunk
from runtime.engine.system_presets import SHIPPED, SystemPreset, load_presets
from runtime.engine.thread import EngineThread
from runtime.errors import UserError
from runtime.mcp.switches import ToolSwitches
from runtime.models.cache import DEMO_NAME, cache_root, list_models

if TYPE_CHECKING:  # the MCP SDK loads only once a chat uses tools
    from app.approval_dialog import ApprovalDialog

API_QUEUE = 32  # API requests that may wait for the engine (the window's own never wait on this bound)
NOTE_MS = 10_000  # how long a one-line note (an export, an import, a preset file's fault) stays in the status bar
EXPORT_FILTERS = "Markdown (*.md);;JSON (*.json)"
TOOL_JOIN_S = 5.0  # at close: how long the loop's thread may take to end (a Stop reaches it within ~0.05 s)


class MainWindow(QMainWindow):
    answer_finished = Signal(str)  # the answer's text ("" when it failed); tests and the self-test wait on it
    chunk_shown = Signal(object)  # the latest streamed Chunk, once the window has shown it (on the GUI thread)

    def __init__(
        self, store: Store | None = None, qsettings: QSettings | None = None, documents_index: Path | None = None
    ) -> None:
        super().__init__()
        self.qsettings = qsettings
        self.settings: AppSettings = load_settings(qsettings)
        self.store = store or Store()
        # Beside the history: the user's data directory, as runtime.documents' default; a test's own folder.
        self.documents_index = documents_index or self.store.path.with_name("documents.sqlite3")
        self.conversation: int | None = None
        self.unsent_documents: str | None = None  # what a new chat answers from, until its first message
        self.unsent_preset: str | None = None  # a new chat's system-prompt preset, until its first message
        self.presets: list[SystemPreset] = list(SHIPPED)  # what the Preset box offers (refresh_presets)
        self.unsent_tools = False  # a new chat's "Tools in this chat", until its first message
        self.tool_host: Any = None  # runtime.mcp.McpHost, once a chat with tools answered (ensure_tool_host)
        self.tool_switches = ToolSwitches()
        self.approval_dialog: ApprovalDialog | None = None  # the question open now
        self.has_documents = False  # a documents collection exists: the built-in search is a tool
        self._retiring: Any = None  # a host replaced while a turn still uses it: closed when the turn ends
        self._host_closers: list[threading.Thread] = []
        self._closing = False
        self.setWindowTitle("SpecQuant")
        self.resize(1100, 720)
        self.models = ModelsDialog(self.release_engine, self)
        self.presets_dialog = PresetsDialog(self)
        self._build()
        panels.menus(self)

        # The engine thread, shared with the local API server; its bound is for API clients only.
        self.runner = EngineThread(max_queue=API_QUEUE)
        self.chat = ChatController(self.store, self.runner)
        self.api: Any = None  # runtime.api.server.BackgroundServer while the local API server runs
        self.chat.status.connect(self._on_status)
        self.chat.chunks_taken.connect(self._on_chunks)
        self.chat.finished.connect(self._on_finished)
        self.chat.failed.connect(self._on_failed)
        self.chat.calls_changed.connect(self._render_live)
        self.chat.approval_needed.connect(self._ask_approval)

        self.models.models_changed.connect(self.refresh_models)
        self.models.use_model.connect(self.select_model)
        self.presets_dialog.presets_changed.connect(self.refresh_presets)

        apply_look(self.settings)
        self.transcript.highlight_draft = self.settings.highlight_draft
        self.refresh_models()
        self.refresh_presets()
        self.refresh_conversations()
        self.sync_api_server()
        if self.store.recovered_from:
            self.banner.show_error(
                f"The conversation history could not be read; it was kept as {self.store.recovered_from} "
                "and a new one was started."
            )
        self._set_busy(False)
        self.input.setFocus()

    @property
    def live(self) -> Live | None:
        """The answer in flight (the chat controller's)."""
        return self.chat.live

    # --- layout ------------------------------------------------------------------------------------
    def _build(self) -> None:
        """Lay out the panels that app.window_panels builds (in the order that makes the focus chain)."""
        side = panels.side_tabs(self, panels.sidebar(self), panels.documents(self), panels.tools(self))
        top = panels.model_bar(self)
        welcome = panels.welcome(self)
        transcript = panels.transcript(self)
        bottom = panels.input_row(self)

        main = QWidget()
        main_layout = QVBoxLayout(main)
        main_layout.setContentsMargins(4, 8, 8, 8)
        main_layout.addLayout(top)
        main_layout.addWidget(self.banner)
        main_layout.addWidget(welcome, 1)
        main_layout.addWidget(transcript, 1)
        main_layout.addLayout(bottom)

        splitter = QSplitter()
        splitter.addWidget(side)
        splitter.addWidget(main)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 840])
        self.setCentralWidget(splitter)

        panels.status_bar(self)
        self.setTabOrder(self.input, self.send_button)
        self.setTabOrder(self.send_button, self.stop_button)
        self.setTabOrder(self.stop_button, self.regenerate_button)

    # --- models ------------------------------------------------------------------------------------
    def complete_models(self) -> list[str]:
        return [m.name for m in list_models(cache_root()) if m.complete]

    def refresh_models(self) -> None:
        names = self.complete_models()
        current = self.settings.model if self.settings.model in names else ""
        if not current and names:
            current = DEMO_NAME if DEMO_NAME in names else names[0]
        self.model_box.clear()
        for name in names:
            self.model_box.addItem(name, name)
        self.model_box.setCurrentIndex(max(0, self.model_box.findData(current)))
        self.stats.show_model(current)
        if current != self.settings.model:
            self._save(replace(self.settings, model=current))
        self.welcome.setVisible(not names)
        self.transcript.setVisible(bool(names))
        self._set_busy(self.live is not None)

    @property
    def model(self) -> str:
        return self.settings.model

    def select_model(self, name: str) -> None:
        """Answer with `name` from now on, in this chat too (it is switched back to when the chat is opened)."""
        if name and name != self.settings.model:
            self._save(replace(self.settings, model=name))
            if self.conversation is not None:
                try:
                    self.store.set_model(self.conversation, name)
                except UserError as e:
                    self.banner.show_error(str(e))
        self.refresh_models()
        self.banner.hide()

    def _use_chat_model(self, conversation_id: int) -> None:
        """Switch to the model the chat answered with, while it is still among the complete models."""
        wanted = self.store.model(conversation_id)
        if not wanted or wanted == self.model:
            return
        if wanted not in self.complete_models():
            gone = f"This chat used {wanted}, which is no longer among the models; it goes on with {self.model}."
            self.statusBar().showMessage(gone, NOTE_MS)
            return
        self._save(replace(self.settings, model=wanted))
        self.refresh_models()

    def setup_demo(self) -> None:
        self.show_models()
        self.models.setup_demo()

    def show_models(self) -> None:
        self.models.refresh()
        self.models.show()
        self.models.raise_()

    def release_engine(self) -> None:
        """Stop any answer and unload the models (before a delete or repair touches their files)."""
        self.chat.stop()
        self.runner.release()

    # --- conversations -----------------------------------------------------------------------------
    def refresh_conversations(self) -> None:
        self.conversations.blockSignals(True)
        self.conversations.clear()
        for c in self.store.conversations(self.search.text()):
            item = QListWidgetItem(c.title)
            item.setToolTip(c.title)
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            self.conversations.addItem(item)
            if c.id == self.conversation:
                self.conversations.setCurrentItem(item)
        self.conversations.blockSignals(False)
        has = self.conversation is not None
        self.rename_button.setEnabled(has)
        self.delete_button.setEnabled(has)

    def _on_conversation_selected(self, item: QListWidgetItem | None) -> None:
        if item is not None:
            self.open_conversation(item.data(Qt.ItemDataRole.UserRole))

    def open_conversation(self, conversation_id: int | None) -> None:
        # Only a chat opened anew brings its model back: a redraw of this one (zoom, an answer's end) keeps the
        # model the user has just picked.
        if conversation_id is not None and conversation_id != self.conversation:
            self._use_chat_model(conversation_id)
        self.conversation = conversation_id
        messages = self.store.messages(conversation_id) if conversation_id is not None else []
        self.transcript.show_messages(messages)
        self._show_documents(
            self.store.documents(conversation_id) if conversation_id is not None else self.unsent_documents
        )
        self._show_preset(self.store.preset(conversation_id) if conversation_id is not None else self.unsent_preset)
        self.tools_panel.show_chat_tools(
            self.store.tools(conversation_id) if conversation_id is not None else self.unsent_tools
        )
        if self.live is not None and self.live.conversation == conversation_id:
            self.transcript.begin_live()
            self._render_live()
        self.refresh_conversations()
        self._set_busy(self.live is not None)

    def new_conversation(self) -> None:
        self.unsent_documents = None  # a new chat starts without documents or preset
        self.unsent_preset = None
        self.unsent_tools = False
        self.open_conversation(None)
        self.input.setFocus()

    def rename_conversation(self) -> None:
        if self.conversation is None:
            return
        title, ok = QInputDialog.getText(self, "Rename", "Title:", text=self.store.title(self.conversation))
        if ok:
            try:
                self.store.rename(self.conversation, title)
            except UserError as e:
                self.banner.show_error(str(e))
            self.refresh_conversations()

    def delete_conversation(self) -> None:
        if self.conversation is None:
            return
        if self.live is not None and self.live.conversation == self.conversation:
            self.banner.show_error("Stop the answer in this conversation before deleting it.")
            return
        title = self.store.title(self.conversation)
        answer = QMessageBox.question(self, "Delete", f"Delete the conversation “{title}”?")
        if answer != QMessageBox.StandardButton.Yes:
            return
        self.store.delete(self.conversation)
        self.open_conversation(None)

    # --- chatting ----------------------------------------------------------------------------------
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.live is not None:
            return
        if not self.model:
            self.banner.show_error("There is no model yet: set up the demo model or add one.", "Set up demo model")
            return
        # Stored before anything can fail.
        turn = self.chat.new_turn(
            self.conversation, text, self.unsent_documents, self.unsent_preset, self.model, self.unsent_tools
        )
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
        self.refresh_conversations()
        try:
            options = self.settings.chat_options(parent=turn.parent)
            documents = self.store.documents(turn.conversation)
            if documents is not None:
                options = replace(options, documents=Grounding(documents or None, index=str(self.documents_index)))
            preset, missing = self._chat_preset(turn.conversation)
            self.store.set_model(turn.conversation, self.model)
            tools = self._tool_setup() if self.store.tools(turn.conversation) else None
        except UserError as e:
            self.banner.show_error(str(e))
            self._set_busy(False)
            return
        self.chat.answer(turn, self.model, self.settings.engine_settings(), options, preset, tools)
        self.banner.hide()
        if missing:
            self.banner.show_error(f"The preset {missing} is gone: this answer has none. Pick another under Preset.")
        self.transcript.begin_live()
        self._render_live()
        self._set_busy(True)

    def stop(self) -> None:
        self._close_approval()  # denies: the turn ends (its cancel is set just below)
        if self.chat.stop():
            self.stop_button.setEnabled(False)
            self.statusBar().showMessage("Stopping…", 2000)

    def _on_status(self, message: str) -> None:
        if message:
            self.statusBar().showMessage(message)
        else:
            self.statusBar().clearMessage()

    def _on_chunks(self, chunks: list[Chunk]) -> None:
        """A batch of the answer (app.turn_runner paces them by what the GUI thread spends): one redraw for all."""
        for chunk in chunks:
            self.stats.chart.add_chunk(chunk)  # a point per cycle; the chart repaints on its own timer
        last = chunks[-1]
        if last.done:
            self.stats.show_answer(last, self.model)
            return
        self._render_live()  # the text and the status bar's words
        self.chunk_shown.emit(last)

    def _on_finished(self, live: Live, text: str) -> None:
        self._turn_ended(live)
        if self.conversation == live.conversation:
            self.open_conversation(live.conversation)
        self.statusBar().clearMessage()
        self._set_busy(False)
        self.answer_finished.emit(text)

    def _on_failed(self, live: Live, message: str, kind: str) -> None:
        self._turn_ended(live)
        if self.conversation == live.conversation:
            self.open_conversation(live.conversation)  # the user's message stays; only the answer is gone
        self.statusBar().clearMessage()
        if message:
            self.banner.show_error(message, "Open Models" if kind == "model" else "")
        self._set_busy(False)
        self.answer_finished.emit("")

    def _render_live(self) -> None:
        live = self.live
        if live is None or live.conversation != self.conversation:
            return
        self.transcript.update_live(live.text or "…", live.meta())
        if live.last is not None:
            self.stats.show_answer(live.last, self.model)

    def _set_busy(self, busy: bool) -> None:
        has_model = bool(self.model)
        self.send_button.setEnabled(not busy and has_model)
        self.stop_button.setEnabled(busy)
        can_regenerate, can_go_higher = self.chat.regenerate_choices(None if busy else self.conversation)
        self.regenerate_button.setEnabled(can_regenerate)
        self.higher_action.setEnabled(can_go_higher)

    def _on_banner_action(self, action: str) -> None:
        if action == "Set up demo model":
            self.setup_demo()
        else:
            self.show_models()

    # --- documents ---------------------------------------------------------------------------------
    def choose_documents(self, documents: str | None) -> None:
        """What this chat answers from: None no documents, "" every collection, else a collection's name;
        kept with the conversation (a new chat's, until its first message is stored with it)."""
        self._show_documents(documents)
        if self.conversation is None:
            self.unsent_documents = documents
            return
        try:
            self.store.set_documents(self.conversation, documents)
        except UserError as e:
            self.banner.show_error(str(e))

    def show_collections(self, names: list[str]) -> None:
        """The Answer-from choices after the collections changed; the chat's own choice stays."""
        current = self.answer_from.currentData()
        while self.answer_from.count() > 2:  # after No documents and All documents
            self.answer_from.removeItem(2)
        for name in names:
            self.answer_from.addItem(name, name)
        self._show_documents(current)
        self.has_documents = bool(names)
        self.tools_panel.show_documents(self.has_documents)

    def _show_documents(self, documents: str | None) -> None:
        box = self.answer_from
        index = next((i for i in range(box.count()) if box.itemData(i) == documents), -1)
        if index < 0:  # a collection since removed: still shown, and its answer says it is missing
            box.addItem(documents, documents)
            index = box.count() - 1
        box.setCurrentIndex(index)

    # --- tools (MCP servers and the built-in documents search) -----------------------------------------
    def choose_tools(self, on: bool) -> None:
        """Whether this chat's answers may call tools; kept with the conversation, as its preset is."""
        if self.conversation is None:
            self.unsent_tools = on
            return
        try:
            self.store.set_tools(self.conversation, on)
        except UserError as e:
            self.banner.show_error(str(e))

    def choose_tool_mode(self, mode: str) -> None:
        self._save(replace(self.settings, tool_approval=mode))

    def ensure_tool_host(self) -> Any:
        """The McpHost of mcp.json's servers, created on first use (None without servers); UserError for a
        file that cannot be read."""
        if self.tool_host is None:
            from runtime.mcp import McpHost, load_config

            config = load_config()
            self.tool_host = McpHost(config) if config.servers else None
        return self.tool_host

    def retire_tool_host(self) -> None:
        """mcp.json changed: the next use builds a new host; the old one closes (after the turn that uses it)."""
        host, self.tool_host = self.tool_host, None
        if host is None:
            return
        live = self.live
        if live is not None and live.request.tools is not None and live.request.tools.host is host:
            self._retiring = host
        else:
            self._close_host(host)

    def _close_host(self, host: Any) -> None:
        """Close a host off the GUI thread: a stubborn server takes seconds to end."""
        closer = threading.Thread(target=host.close, name="mcp-close", daemon=True)
        closer.start()
        self._host_closers.append(closer)

    def _tool_setup(self) -> ToolSetup:
        documents = self.documents_index if self.has_documents and self.documents_index.exists() else None
        s = self.settings
        return ToolSetup(self.ensure_tool_host(), s.tool_approval, self.tool_switches, documents,
                         s.tool_first_choice, s.tool_rounds)

    def _ask_approval(self, request: Any) -> None:
        """The turn asks whether a call may run: a window-modal question, answered through `decided`."""
        from app.approval_dialog import ApprovalDialog

        self._close_approval()
        dialog = self.approval_dialog = ApprovalDialog(request, self)
        dialog.decided.connect(lambda decision: self._on_approval(dialog, decision))
        dialog.open()

    def _on_approval(self, dialog: ApprovalDialog, decision: Any) -> None:
        if self.approval_dialog is dialog:
            self.approval_dialog = None
        self.chat.answer_approval(decision)
        dialog.deleteLater()

    def _close_approval(self) -> None:
        if self.approval_dialog is not None:
            self.approval_dialog.reject()  # Deny

    def _turn_ended(self, live: Live) -> None:
        if live.request.tools is None:
            return
        self._close_approval()
        if self._retiring is not None:
            self._close_host(self._retiring)
            self._retiring = None
        if self.tools_panel.loaded:
            self.tools_panel.refresh()  # a new "always", a server's new state

    # --- system-prompt presets ----------------------------------------------------------------------
    def refresh_presets(self) -> None:
        """Reload the presets into the Preset box; an unreadable presets.json is one status line, and the
        shipped presets are still offered."""
        try:
            self.presets = load_presets()
        except UserError as e:
            self.presets = list(SHIPPED)
            self.statusBar().showMessage(str(e), NOTE_MS)
        current = self.preset_box.currentData()
        self.preset_box.clear()
        self.preset_box.addItem("No preset", None)
        for p in self.presets:
            self.preset_box.addItem(p.name, p.name)
        self._show_preset(current)

    def choose_preset(self, name: str | None) -> None:
        """This chat's system-prompt preset (None: none); kept with the conversation, as its documents are."""
        self._show_preset(name)
        if self.conversation is None:
            self.unsent_preset = name
            return
        try:
            self.store.set_preset(self.conversation, name)
        except UserError as e:
            self.banner.show_error(str(e))

    def _show_preset(self, name: str | None) -> None:
        box = self.preset_box
        index = box.findData(name) if name is not None else 0
        if index < 0:  # a preset since deleted: still shown as the chat's, and its next answer says so
            box.addItem(f"{name} (gone)", name)
            index = box.count() - 1
        box.setCurrentIndex(index)

    def _chat_preset(self, conversation_id: int) -> tuple[SystemPreset | None, str]:
        """The chat's preset as its answer applies it, and the name of a chosen preset that no longer exists."""
        name = self.store.preset(conversation_id)
        if name is None:
            return None, ""
        preset = next((p for p in self.presets if p.name.casefold() == name.casefold()), None)
        if preset is None:
            return None, name
        return self.settings.under_own_sampling(preset), ""

    def show_presets(self) -> None:
        self.presets_dialog.refresh()
        self.presets_dialog.show()
        self.presets_dialog.raise_()

    # --- export and import -------------------------------------------------------------------------
    def export_conversation(self) -> None:
        """Save the open chat as Markdown or JSON (the suffix, or else the chosen filter, says which)."""
        if self.conversation is None:
            self.statusBar().showMessage("Open a chat to export it.", NOTE_MS)
            return
        title = self.store.title(self.conversation)
        stem = re.sub(r'[\\/:*?"<>|\x00-\x1f]+', " ", title).strip()[:80] or "chat"
        path, chosen = QFileDialog.getSaveFileName(self, "Export chat", str(Path.home() / f"{stem}.md"), EXPORT_FILTERS)
        if not path:
            return
        target = Path(path)
        if target.suffix.lower() not in (".md", ".markdown", ".json"):  # some platforms' dialogs add none
            target = target.with_name(target.name + (".json" if "json" in chosen.lower() else ".md"))
        try:
            conv = exported(title, self.store.messages(self.conversation), self.store.documents(self.conversation))
            write_file(target, conv)
        except UserError as e:
            self.statusBar().showMessage(str(e), NOTE_MS)
            return
        self.statusBar().showMessage(f"Exported to {target}", NOTE_MS)

    def import_conversation(self) -> None:
        """Read an exported JSON chat into a new conversation (all of it or, on any fault, none) and open it."""
        path, _ = QFileDialog.getOpenFileName(
            self, "Import chat", str(Path.home()), "SpecQuant chats (*.json);;All files (*)"
        )
        if not path:
            return
        try:
            conv = read_file(Path(path))
            new = self.store.import_conversation(conv.title, conv.messages, conv.documents)
        except UserError as e:
            self.statusBar().showMessage(str(e), NOTE_MS)
            return
        self.open_conversation(new)
        self.statusBar().showMessage(f"Imported “{conv.title}”", NOTE_MS)

    # --- settings and view -------------------------------------------------------------------------
    def show_settings(self) -> None:
        dialog = SettingsDialog(self.settings, self)
        if dialog.exec():
            self.apply_settings(dialog.value())

    def apply_settings(self, settings: AppSettings) -> None:
        self._save(settings.check())
        self.sync_api_server()
        apply_look(settings)
        self.highlight_toggle.setChecked(settings.highlight_draft)
        self.transcript.highlight_draft = settings.highlight_draft
        self.chart_toggle.setChecked(settings.speed_chart)
        self.speed_chart.setVisible(settings.speed_chart)
        self.open_conversation(self.conversation)

    def _toggle_highlight(self) -> None:
        self.apply_settings(replace(self.settings, highlight_draft=self.highlight_toggle.isChecked()))

    def _toggle_chart(self) -> None:
        self.apply_settings(replace(self.settings, speed_chart=self.chart_toggle.isChecked()))

    def zoom(self, step: int) -> None:
        zoom = 0 if step == 0 else max(-6, min(24, self.settings.zoom + step))
        self._save(replace(self.settings, zoom=zoom))
        apply_look(self.settings)
        self.open_conversation(self.conversation)

    def _save(self, settings: AppSettings) -> None:
        self.settings = settings
        save_settings(settings, self.qsettings)

    # --- the local API server ----------------------------------------------------------------------
    def sync_api_server(self) -> None:
        """Start, stop or move the API server to match the settings; a port in use is said in the banner."""
        want = self.settings.api_port if self.settings.api_server else None
        if self.api is not None and self.api.service.config.port != want:
            self.api.stop()
            self.api = None
        if want is not None and self.api is None:
            from runtime.api.server import BackgroundServer, Defaults, ServeConfig, Service

            def defaults() -> Defaults:  # read on the server's thread: the window's current choices
                s = self.settings
                return Defaults(self.model or DEMO_NAME, s.engine_settings(), s.chat_options())

            try:
                self.api = BackgroundServer(Service(self.runner, defaults, ServeConfig(port=want)))
            except UserError as e:
                self.banner.show_error(f"The local API server did not start: {e}")
        self.stats.show_api(self.api.url if self.api is not None else None)

    # --- lifetime ----------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        """Cancel an answer or conversion in flight, free the models on their thread, and wait for it."""
        if not self._closing:
            self._closing = True
            self._close_approval()
            self.chat.stop()
            self.models.shutdown()
            self.documents.shutdown()  # cancels indexing between two files; the rest stays pending
            if self.api is not None:
                self.api.stop()
            self.runner.close()
            # The turn ends at the Stop; what it last reported (the stopped answer) still waits in its inbox:
            # deliver it now, so the partial answer is saved before the history closes.
            live = self.chat.live
            if live is not None and live.runner is not None:
                live.runner.join(TOOL_JOIN_S)
                live.runner.flush()
            self.chat.live = None
            for host in (self.tool_host, self._retiring):
                if host is not None:
                    host.close()  # bounded: the SDK ends even a server that ignores it within ~8 s
            for closer in self._host_closers:
                closer.join(TOOL_JOIN_S)
            self.store.close()
        event.accept()
