"""The main window: conversations, transcript, input, status bar; inference on the worker thread."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QSettings, Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPushButton,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat_controller import ChatController, Live, answer_meta
from app.models_dialog import ModelsDialog
from app.settings import AppSettings, load_settings, save_settings
from app.settings_dialog import SettingsDialog
from app.stats_bar import StatsBar
from app.store import Store, StoredMessage
from app.theme import apply_look
from app.transcript import TranscriptView
from app.widgets import ErrorBanner, InputBox
from app.worker import EngineWorker
from runtime.engine.chat import Chunk
from runtime.engine.thread import EngineThread
from runtime.errors import UserError
from runtime.models.cache import DEMO_NAME, cache_root, list_models
from runtime.plan.policy import more_precise

API_QUEUE = 32  # API requests that may wait for the engine (the window's own never wait on this bound)


class MainWindow(QMainWindow):
    answer_finished = Signal(str)  # the answer's text ("" when it failed); tests and the self-test wait on it
    chunk_shown = Signal(object)  # the latest streamed Chunk, once the window has shown it (on the GUI thread)

    def __init__(self, store: Store | None = None, qsettings: QSettings | None = None) -> None:
        super().__init__()
        self.qsettings = qsettings
        self.settings: AppSettings = load_settings(qsettings)
        self.store = store or Store()
        self.conversation: int | None = None
        self._closing = False
        self.setWindowTitle("SpecQuant")
        self.resize(1100, 720)
        self.models = ModelsDialog(self.release_engine, self)
        self._build()
        self._build_menus()

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
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setAccessibleName("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.refresh_conversations)
        self.conversations = QListWidget()
        self.conversations.setAccessibleName("Conversations")
        self.conversations.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversations.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conversations.currentItemChanged.connect(self._on_conversation_selected)
        new = QPushButton("&New chat")
        new.clicked.connect(self.new_conversation)
        self.rename_button = QPushButton("Rena&me")
        self.rename_button.clicked.connect(self.rename_conversation)
        self.delete_button = QPushButton("Dele&te")
        self.delete_button.clicked.connect(self.delete_conversation)
        buttons = QHBoxLayout()
        for b in (new, self.rename_button, self.delete_button):
            buttons.addWidget(b)
        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(8, 8, 4, 8)
        side_layout.addWidget(self.search)
        side_layout.addWidget(self.conversations, 1)
        side_layout.addLayout(buttons)

        self.banner = ErrorBanner()
        self.banner.action.connect(self._on_banner_action)
        self.model_box = QComboBox()
        self.model_box.setAccessibleName("Model")
        self.model_box.activated.connect(lambda _: self.select_model(self.model_box.currentData() or ""))
        manage = QPushButton("&Models…")
        manage.clicked.connect(self.show_models)
        settings = QPushButton("&Settings…")
        settings.clicked.connect(self.show_settings)
        top = QHBoxLayout()
        top.addWidget(QLabel("Model:", buddy=self.model_box))
        top.addWidget(self.model_box, 1)
        top.addWidget(manage)
        top.addWidget(settings)

        self.welcome = QWidget()
        welcome_layout = QVBoxLayout(self.welcome)
        if self.models.demo_shipped:
            text = QLabel(
                "<h2>Welcome to SpecQuant</h2><p>There is no model on this computer yet. The demo model "
                "(SmolLM2-135M-Instruct) comes with SpecQuant: setting it up takes about 15 seconds and needs "
                "no network.</p><p>You can add your own models later under <b>Models…</b>.</p>"
            )
            self.demo_button = QPushButton("Set up the demo model")
            self.demo_button.clicked.connect(self.setup_demo)
        else:  # a build made without the demo model
            text = QLabel(
                "<h2>Welcome to SpecQuant</h2><p>There is no model on this computer yet. Add one under "
                "<b>Models…</b>: a Hugging Face repo id (downloaded once), a Hugging Face model folder, or a "
                ".gguf file. SpecQuant converts it once into three precision tiers.</p>"
            )
            self.demo_button = QPushButton("Add a model…")
            self.demo_button.clicked.connect(self.show_models)
        text.setWordWrap(True)
        self.demo_button.setDefault(True)
        welcome_layout.addStretch(1)
        welcome_layout.addWidget(text)
        welcome_layout.addWidget(self.demo_button, 0, Qt.AlignmentFlag.AlignLeft)
        welcome_layout.addStretch(2)

        self.transcript = TranscriptView()
        self.transcript.copied.connect(lambda _: self.statusBar().showMessage("Code copied", 2000))
        self.input = InputBox()
        self.input.submitted.connect(self.send)
        self.send_button = QPushButton("Send")
        self.send_button.setToolTip("Send (Enter)")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the answer (Esc)")
        self.stop_button.clicked.connect(self.stop)
        self.regenerate_button = QToolButton()
        self.regenerate_button.setText("Regenerate")
        self.regenerate_button.setAccessibleName("Regenerate the last answer")
        self.regenerate_button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        self.regenerate_button.clicked.connect(lambda: self.regenerate(higher=False))
        menu = QMenu(self.regenerate_button)
        self.higher_action = menu.addAction("Answer at higher precision")
        self.higher_action.triggered.connect(lambda: self.regenerate(higher=True))
        self.regenerate_button.setMenu(menu)
        actions = QVBoxLayout()
        for b in (self.send_button, self.stop_button, self.regenerate_button):
            b.setMinimumWidth(110)
            actions.addWidget(b)
        actions.addStretch(1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.input, 1)
        bottom.addLayout(actions)

        main = QWidget()
        main_layout = QVBoxLayout(main)
        main_layout.setContentsMargins(4, 8, 8, 8)
        main_layout.addLayout(top)
        main_layout.addWidget(self.banner)
        main_layout.addWidget(self.welcome, 1)
        main_layout.addWidget(self.transcript, 1)
        main_layout.addLayout(bottom)

        splitter = QSplitter()
        splitter.addWidget(side)
        splitter.addWidget(main)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 840])
        self.setCentralWidget(splitter)

        self.stats = StatsBar(self.statusBar())
        # The labels by name, for the tests and the self-test.
        self.badge, self.precision, self.speed = self.stats.badge, self.stats.precision, self.stats.speed
        self.acceptance, self.placement = self.stats.acceptance, self.stats.placement
        self.speedup, self.speed_chart = self.stats.speedup, self.stats.chart
        self.model_label, self.api_label = self.stats.model_label, self.stats.api_label
        self.setTabOrder(self.input, self.send_button)
        self.setTabOrder(self.send_button, self.stop_button)
        self.setTabOrder(self.stop_button, self.regenerate_button)

    def _build_menus(self) -> None:
        def act(menu: QMenu, text: str, slot: Any, keys: Any = None) -> QAction:
            a = menu.addAction(text)
            a.triggered.connect(slot)
            if keys is not None:
                a.setShortcuts(keys if isinstance(keys, list) else [QKeySequence(keys)])
            return a

        file = self.menuBar().addMenu("&File")
        act(file, "&New chat", self.new_conversation, QKeySequence.StandardKey.New)
        act(file, "&Models…", self.show_models)
        act(file, "&Settings…", self.show_settings, "Ctrl+,")  # StandardKey.Preferences is empty on Linux
        file.addSeparator()
        act(file, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        chat = self.menuBar().addMenu("&Chat")
        act(chat, "&Stop", self.stop, Qt.Key.Key_Escape)
        act(chat, "&Regenerate", lambda: self.regenerate(higher=False), "Ctrl+R")
        act(chat, "Regenerate at &higher precision", lambda: self.regenerate(higher=True), "Ctrl+Shift+R")
        view = self.menuBar().addMenu("&View")
        act(view, "Zoom &in", lambda: self.zoom(+1), [QKeySequence("Ctrl++"), QKeySequence("Ctrl+=")])
        act(view, "Zoom &out", lambda: self.zoom(-1), QKeySequence("Ctrl+-"))
        act(view, "&Reset zoom", lambda: self.zoom(0), QKeySequence("Ctrl+0"))
        self.highlight_toggle = act(view, "&Highlight draft tokens", self._toggle_highlight)
        self.highlight_toggle.setCheckable(True)
        self.highlight_toggle.setChecked(self.settings.highlight_draft)
        self.chart_toggle = act(view, "Speed &chart", self._toggle_chart)
        self.chart_toggle.setCheckable(True)
        self.chart_toggle.setChecked(self.settings.speed_chart)
        self.speed_chart.setVisible(self.settings.speed_chart)

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
        if self.live is not None and self.live.conversation == conversation_id:
            self.transcript.begin_live()
            self._render_live()
        self.refresh_conversations()
        self._set_busy(self.live is not None)

    def new_conversation(self) -> None:
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
        if self.conversation is None:
            title = " ".join(text.split())
            self.conversation = self.store.create(title[:60] + ("…" if len(title) > 60 else ""))
        self.store.add_message(self.conversation, "user", text)  # saved before anything can fail
        self.input.clear()
        self._start(self.store.messages(self.conversation), replaces=None)

    def regenerate(self, higher: bool) -> None:
        """Answer the last user message again; the old answer is replaced only when the new one is done."""
        if self.live is not None or self.conversation is None:
            return
        messages = self.store.messages(self.conversation)
        if not messages or messages[-1].role != "assistant":
            return
        old = messages[-1]
        parent = more_precise(old.meta.get("parent", "f16")) if higher else None
        if higher and parent is None:
            self.statusBar().showMessage("That answer already came from F16, the highest precision.", 4000)
            return
        self._start(messages[:-1], replaces=old.id, parent=parent)

    def _start(self, messages: list[StoredMessage], replaces: int | None, parent: str | None = None) -> None:
        """Answer the chat `messages` (the conversation without the answer a regenerate replaces)."""
        assert self.conversation is not None
        self.transcript.show_messages(messages)
        self.refresh_conversations()
        try:
            options = self.settings.chat_options(parent=parent)
        except UserError as e:
            self.banner.show_error(str(e))
            self._set_busy(False)
            return
        history = [m.as_chat() for m in messages]
        self.chat.start(self.conversation, history, self.model, self.settings.engine_settings(), options, replaces)
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
        last = self.store.last_message(self.conversation) if self.conversation is not None and not busy else None
        can_regenerate = last is not None and last.role == "assistant"
        self.regenerate_button.setEnabled(can_regenerate)
        self.higher_action.setEnabled(can_regenerate and more_precise(last.meta.get("parent", "f16")) is not None)

    def _on_banner_action(self, action: str) -> None:
        if action == "Set up demo model":
            self.setup_demo()
        else:
            self.show_models()

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
