"""The main window: conversations, transcript, input, status bar; inference on the worker thread. It wires the
panels (built in app.window_panels, which sets their widgets on it) to the chat flow (app.chat_controller)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QSettings, Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QInputDialog,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app import window_panels as panels
from app.chat_controller import AtHighestPrecision, ChatController, Live, Turn, answer_meta
from app.models_dialog import ModelsDialog
from app.settings import AppSettings, load_settings, save_settings
from app.settings_dialog import SettingsDialog
from app.store import Store
from app.theme import apply_look
from app.worker import EngineWorker
from runtime.documents.grounding import Grounding
from runtime.engine.answer import Chunk
from runtime.engine.thread import EngineThread
from runtime.errors import UserError
from runtime.models.cache import DEMO_NAME, cache_root, list_models

API_QUEUE = 32  # API requests that may wait for the engine (the window's own never wait on this bound)


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
        self._closing = False
        self.setWindowTitle("SpecQuant")
        self.resize(1100, 720)
        self.models = ModelsDialog(self.release_engine, self)
        self._build()
        panels.menus(self)

        # The engine thread, shared with the local API server; its bound is for API clients only.
        self.runner = EngineThread(max_queue=API_QUEUE)
        self.worker = EngineWorker(self.runner)
        self.chat = ChatController(self.store, self.worker)
        self.api: Any = None  # runtime.api.server.BackgroundServer while the local API server runs
        self.chat.status.connect(self._on_status)
        self.chat.chunks_taken.connect(self._on_chunks)
        self.chat.finished.connect(self._on_finished)
        self.chat.failed.connect(self._on_failed)

        self.models.models_changed.connect(self.refresh_models)
        self.models.use_model.connect(self.select_model)

        apply_look(self.settings)
        self.transcript.highlight_draft = self.settings.highlight_draft
        self.refresh_models()
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
        side = panels.side_tabs(self, panels.sidebar(self), panels.documents(self))
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
        if name and name != self.settings.model:
            self._save(replace(self.settings, model=name))
        self.refresh_models()
        self.banner.hide()

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
        self.conversation = conversation_id
        messages = self.store.messages(conversation_id) if conversation_id is not None else []
        self.transcript.show_messages(messages)
        self._show_documents(self.store.documents(conversation_id) if conversation_id is not None
                             else self.unsent_documents)
        if self.live is not None and self.live.conversation == conversation_id:
            self.transcript.begin_live()
            self._render_live()
        self.refresh_conversations()
        self._set_busy(self.live is not None)

    def new_conversation(self) -> None:
        self.unsent_documents = None  # a new chat starts without documents
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
        turn = self.chat.new_turn(self.conversation, text, self.unsent_documents)  # stored before anything can fail
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
        except UserError as e:
            self.banner.show_error(str(e))
            self._set_busy(False)
            return
        self.chat.answer(turn, self.model, self.settings.engine_settings(), options)
        self.banner.hide()
        self.transcript.begin_live()
        self._render_live()
        self._set_busy(True)

    def stop(self) -> None:
        if self.chat.stop():
            self.stop_button.setEnabled(False)
            self.statusBar().showMessage("Stopping…", 2000)

    def _on_status(self, message: str) -> None:
        if message:
            self.statusBar().showMessage(message)
        else:
            self.statusBar().clearMessage()

    def _on_chunks(self, chunks: list[Chunk]) -> None:
        """A batch of the answer (app.worker paces them by what the GUI thread spends): one redraw for all."""
        for chunk in chunks:
            self.stats.chart.add_chunk(chunk)  # a point per cycle; the chart repaints on its own timer
        last = chunks[-1]
        if last.done:
            self.stats.show_answer(last, self.model)
            return
        self._render_live()  # the text and the status bar's words
        self.chunk_shown.emit(last)

    def _on_finished(self, live: Live, text: str) -> None:
        if self.conversation == live.conversation:
            self.open_conversation(live.conversation)
        self.statusBar().clearMessage()
        self._set_busy(False)
        self.answer_finished.emit(text)

    def _on_failed(self, live: Live, message: str, kind: str) -> None:
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
        meta = answer_meta(live.last, live.flags, live.text) if live.last is not None else {}
        self.transcript.update_live(live.text or "…", meta)
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

    def _show_documents(self, documents: str | None) -> None:
        box = self.answer_from
        index = next((i for i in range(box.count()) if box.itemData(i) == documents), -1)
        if index < 0:  # a collection since removed: still shown, and its answer says it is missing
            box.addItem(documents, documents)
            index = box.count() - 1
        box.setCurrentIndex(index)

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
            self.chat.stop()
            self.models.shutdown()
            self.documents.shutdown()  # cancels indexing between two files; the rest stays pending
            if self.api is not None:
                self.api.stop()
            self.runner.close()
            # The engine thread's last signals (the stopped answer) are still queued for the window's worker:
            # deliver them now (it passes them on to the chat controller), so the partial answer is saved
            # before the history closes.
            QCoreApplication.sendPostedEvents(self.worker, QEvent.Type.MetaCall)
            self.chat.live = None
            self.store.close()
        event.accept()
