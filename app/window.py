"""The main window: it lays out the panels (the conversation list, Documents and Tools tabs, the model bar,
the open chat of app.chat_pane, the status bar) and hands the user's choices on. The deciding lives
elsewhere: the chat flow in app.chat_controller, the MCP host in app.tool_host_control, the API server in
app.api_server_control, the personas in app.persona_control, export and import in app.chat_files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QCloseEvent, QTextCursor
from PySide6.QtWidgets import QApplication, QMainWindow, QSplitter, QTabWidget, QVBoxLayout, QWidget

from app.api_server_control import ApiServerControl
from app.chat_controller import ChatController, Live
from app.chat_files import export_chat, import_chat
from app.chat_pane import ChatPane
from app.documents_panel import DocumentsPanel
from app.documents_worker import DocumentsJob
from app.help_menu import guide_action
from app.message_area import MessageArea
from app.models_dialog import ModelsDialog
from app.persona_control import PersonaControl
from app.personas_dialog import PersonasDialog
from app.settings import AppSettings, load_settings, save_settings
from app.settings_dialog import SettingsDialog
from app.stats_bar import StatsBar
from app.store import Store
from app.theme import apply_look
from app.tool_host_control import ToolHostControl
from app.tools_panel import ToolsPanel
from app.widgets import ErrorBanner, fit_titles
from app.window_panels import ChatList, Menus, ModelBar, Welcome, complete_model_names
from app.window_state import WindowState, load_state, on_a_screen, save_state
from runtime.engine.thread import EngineThread
from runtime.models.cache import DEMO_NAME, cache_root, list_models, size_text
from runtime.plan.catalog import DEMO_NOTE, better_model

API_QUEUE = 32  # API requests that may wait for the engine (the window's own never wait on this bound)
TURN_JOIN_S = 5.0  # at close: how long the turn's thread may take to end (a Stop reaches it within ~0.05 s)
REBUILT_NOTE = (" Its “Exact answer” is exact for its F16 copy, which was rebuilt from a compressed file: as precise as"
                " that file, not the original model.")
DRAFT_SAVE_MS = 1500  # the unsent text is saved this long after typing stops (and at close)


class MainWindow(QMainWindow):
    def __init__(
        self, store: Store | None = None, qsettings: QSettings | None = None, documents_index: Path | None = None
    ) -> None:
        super().__init__()
        self.qsettings, self.settings = qsettings, load_settings(qsettings)
        self.store = store or Store()
        # Beside the history: the user's data directory, as runtime.documents' default; a test's own folder.
        self.documents_index = documents_index or self.store.path.with_name("documents.sqlite3")
        self._closing = False
        self._told_about: set[str] = set()  # the models whose first answer was followed by their note
        self.setWindowTitle("SpecQuant")
        self.resize(1100, 720)
        fit_titles(QApplication.instance())  # every dialog as wide as its title
        self.runner = EngineThread(max_queue=API_QUEUE, calibrate_when_idle=True)  # shared with the local API server
        self.tools, self.personas = ToolHostControl(), PersonaControl()
        self.chat = ChatController(self.store, self.runner, self.personas, self.tools, self.documents_index)
        self.api = ApiServerControl(self.runner, lambda: self.settings)
        self.models, self.personas_dialog = ModelsDialog(self.release_engine, self), PersonasDialog(self)
        self._build()
        self.menus = Menus(self, self.settings.highlight_draft, self.settings.speed_chart)
        self.pane.think_switch = self.menus.thinking_toggle
        self._connect()
        self.refresh_models()
        self.refresh_personas()
        self._show_settings()
        if self.store.recovered_from:
            self.banner.show_error(f"The conversation history could not be read; it was kept as "
                                   f"{self.store.recovered_from} and a new one was started.")
        self._reopen()
        self.input.setFocus()

    def _reopen(self) -> None:
        """As the window was at close (#63): its size and place, the chat that was open, the text not yet sent."""
        state = load_state(self.qsettings)
        if state.size is not None:
            self.resize(state.size)
        if state.pos is not None and on_a_screen(state.pos):
            self.move(state.pos)
        if state.maximized:
            self.setWindowState(self.windowState() | Qt.WindowState.WindowMaximized)
        c = state.conversation
        if c is not None and c in {x.id for x in self.store.conversations()}:  # a chat since deleted: a new one
            self.open_conversation(c)
        if state.draft:
            self.input.setPlainText(state.draft)
            self.input.moveCursor(QTextCursor.MoveOperation.End)
        self._draft_timer = QTimer(self, singleShot=True, interval=DRAFT_SAVE_MS)
        self._draft_timer.timeout.connect(self.save_state)
        self.input.textChanged.connect(self._draft_timer.start)

    def save_state(self) -> None:
        maximized = self.isMaximized()
        size = self.normalGeometry().size() if maximized else self.size()  # the size it goes back to
        pos = None if maximized else self.pos()  # the frame's corner, as move() takes it back
        save_state(WindowState(size, maximized, self.conversation, self.input.toPlainText(), pos), self.qsettings)

    @property
    def live(self) -> Live | None:
        """The answer in flight (the chat controller's)."""
        return self.chat.live

    @property
    def model(self) -> str:
        return self.settings.model

    @property
    def conversation(self) -> int | None:
        """The open chat's id (None: a new chat)."""
        return self.pane.conversation

    def _build(self) -> None:
        """The panels, laid out in the order that makes the focus chain."""
        self.chats, self.documents = ChatList(self.store), DocumentsPanel(self.documents_index)
        self.tools_panel = ToolsPanel(lambda: self.tools.host, self.tools.ensure, self.tools.switches)
        self.side_tabs = QTabWidget()
        self.side_tabs.setDocumentMode(True)
        for panel, name in ((self.chats, "C&hats"), (self.documents, "&Documents"), (self.tools_panel, "T&ools")):
            self.side_tabs.addTab(panel, name)
        self.model_bar, self.banner, self.welcome = ModelBar(), ErrorBanner(), Welcome(self.models.demo_shipped)
        self.notes = MessageArea()  # an export's path, an import, a presets.json fault: they stay until closed
        self.stats = StatsBar(self.statusBar())
        self.pane = ChatPane(self.chat, self.stats, self.statusBar(), self.banner, self.chats, self.tools_panel,
                             lambda: self.settings, self.notes)
        main = QWidget()
        layout = QVBoxLayout(main)
        layout.setContentsMargins(4, 8, 8, 8)
        for widget in (self.model_bar, self.banner, self.notes, self.welcome, self.pane):
            layout.addWidget(widget, 1 if widget in (self.welcome, self.pane) else 0)
        splitter = QSplitter()
        splitter.addWidget(self.side_tabs)
        splitter.addWidget(main)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 840])
        self.setCentralWidget(splitter)
        # What the self-test, scripts/measure_window.py and the tests read of the window, by these names.
        p, st = self.pane, self.stats
        self.transcript, self.composer, self.approval = p.transcript, p.composer, p.approval
        self.input = p.composer.input
        self.answer_finished, self.chunk_shown = p.answer_finished, p.chunk_shown
        self.send, self.stop, self.open_conversation = p.send, p.stop, p.open_conversation
        self.new_conversation, self.choose_documents = p.new_conversation, p.choose_documents
        self.badge, self.precision, self.speed = st.badge, st.precision, st.speed
        self.acceptance, self.placement, self.speed_chart = st.acceptance, st.placement, st.chart

    def _connect(self) -> None:
        """What the user does outside the open chat, to what decides it."""
        c, t, m = self.chats, self.tools_panel, self.model_bar
        t.show_mode(self.settings.tool_approval)
        for signal, slot in (
            (c.failed, self.banner.show_error), (self.pane.model_wanted, self._use_chat_model),
            (self.documents.collections_changed, self.show_collections),
            (self.documents.job_ended, self._documents_added),
            (t.mode_changed, lambda mode: self._save(replace(self.settings, tool_approval=mode))),
            (t.servers_changed, self.chat.retire_tool_host),
            (t.guide_wanted, self.show_guide),
            (m.model_chosen, self.select_model), (m.models_button.clicked, self.show_models),
            (m.settings_button.clicked, self.show_settings),
            (self.banner.action, lambda act: self.setup_demo() if act == "Set up demo model" else self.show_models()),
            (self.welcome.demo_button.clicked, self.setup_demo if self.welcome.demo_shipped else self.show_models),
            (self.composer.personas_button.clicked, self.show_personas),
            (self.models.models_changed, self.refresh_models), (self.models.use_model, self.select_model),
            (self.personas_dialog.personas_changed, self.refresh_personas),
            (self.pane.answer_finished, self._after_answer),
        ):
            signal.connect(slot)

    # --- models ------------------------------------------------------------------------------------
    complete_model_names = staticmethod(complete_model_names)

    def refresh_models(self) -> None:
        current = self.model_bar.refresh(self.model)
        self.stats.show_model(current)
        if current != self.model:
            self._save(replace(self.settings, model=current))
        self.welcome.setVisible(not current)
        self.transcript.setVisible(bool(current))
        self.pane.show_thinking()  # offered for a model that thinks only
        self.pane.show_busy()

    def select_model(self, name: str) -> None:
        """Answer with `name` from now on, in this chat too (it is switched back to when the chat is opened)."""
        if name and name != self.model:
            self._save(replace(self.settings, model=name))
            if self.conversation is not None:
                self.pane.store_call(self.store.set_model, self.conversation, name)
        self.refresh_models()
        self.banner.hide()

    def _use_chat_model(self, wanted: str) -> None:
        """A chat opened anew answered with `wanted`: answer with it again, while it is among the models."""
        if wanted in self.complete_model_names():
            self._save(replace(self.settings, model=wanted))
            self.refresh_models()
        else:
            self.notes.show_note(f"This chat used {wanted}, which is no longer among the models; it goes on "
                                 f"with {self.model}.")

    def _after_answer(self, text: str) -> None:
        """Said once a session, after an answer: the demo is a tiny demo, and a better model that fits is one
        click away (#63: its first answer called black a primary colour, and nothing said why); a model whose
        F16 was rebuilt from a quantized file gives "exact" answers only as precise as that file."""
        if not text or self.model in self._told_about:
            return
        self._told_about.add(self.model)
        manifest = next((m.manifest or {} for m in list_models(cache_root()) if m.name == self.model), {})
        rebuilt = REBUILT_NOTE if manifest.get("reconstructed") else ""
        if self.model != DEMO_NAME:
            self.notes.show_note(rebuilt.strip())
            return
        entry = better_model()
        if entry is None:
            self.notes.show_note(f"{DEMO_NOTE}{rebuilt} No larger model of the catalogue fits this computer's memory.")
            return
        self.notes.show_note(
            f"{DEMO_NOTE}{rebuilt} For better answers, <b>{entry.name}</b> fits this computer: "
            f"{size_text(entry.download_bytes)} to download, converted once.",
            f"Get {entry.name}…", lambda: self.get_model(entry.repo))

    def get_model(self, repo: str) -> None:
        """Models → Discover with `repo` picked, and its download asked for (the question names its size)."""
        self.show_models()
        self.models.tabs.setCurrentWidget(self.models.discover)
        self.models.discover.offer(repo)

    def setup_demo(self) -> None:
        self.show_models()
        self.models.tabs.setCurrentIndex(0)  # Installed, where the demo appears (#63: it opened on Discover)
        self.models.setup_demo()

    def show_models(self) -> None:
        self.models.refresh()
        _raise(self.models)

    def release_engine(self) -> None:
        """Stop any answer and unload the models (before a delete or repair touches their files)."""
        self.chat.stop()
        self.runner.release()

    def show_collections(self, names: list[str]) -> None:
        if self.chat.last_documents and self.chat.last_documents not in names:  # removed: new chats go without
            self.chat.last_documents = None
        self.composer.show_collections(names)
        self.tools_panel.show_documents(bool(names))

    def _documents_added(self, job: DocumentsJob | None, failure: str) -> None:
        """Documents the user added are for the open chat, and for new ones (#63: they were left unused)."""
        if job is not None and job.verb == "add" and not job.automatic and job.collection and not failure:
            self.choose_documents(job.collection)

    # --- personas, export and import -------------------------------------------------------------------
    def refresh_personas(self) -> None:
        """Offer the personas again; an unreadable presets.json is one status line (the shipped ones stay)."""
        if fault := self.personas.reload():
            self.notes.show_note(fault)
        self.composer.show_personas(self.personas.names)

    def show_personas(self) -> None:
        self.personas_dialog.refresh()
        _raise(self.personas_dialog)

    def export_conversation(self) -> None:
        c = self.conversation
        self._note(export_chat(self, self.store, c) if c is not None else "Open a chat to export it.")

    def import_conversation(self) -> None:
        new, note = import_chat(self, self.store)
        if new is not None:
            self.open_conversation(new)
        self._note(note)

    def show_guide(self, name: str) -> None:
        """A user guide (docs/guide/`name`) in the window's guide viewer, as Help opens it."""
        action = guide_action(self.menus.help, name)
        if action is not None and action.isEnabled():
            action.trigger()

    def _note(self, text: str) -> None:
        self.notes.show_note(text)

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
        self.pane.show_thinking()  # a chat never switched follows the Settings' default
        self.transcript.highlight_draft = s.highlight_draft
        self.stats.chart.setVisible(s.speed_chart)
        self.open_conversation(self.conversation)

    def toggle_view(self) -> None:
        m = self.menus
        self.apply_settings(replace(self.settings, highlight_draft=m.highlight_toggle.isChecked(),
                                    speed_chart=m.chart_toggle.isChecked()))

    def toggle_thinking(self) -> None:
        self.pane.choose_thinking(self.menus.thinking_toggle.isChecked())

    def regenerate(self, higher: bool) -> None:
        self.pane.regenerate(higher)

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
            self.save_state()
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
