"""The main window's panels, each a widget that owns its widgets and says what the user did with signals; the
window (app.window) lays them out, keeps a reference to each and decides what happens. The Documents and
Tools tabs are their own modules (app.documents_panel, app.tools_panel); the status bar is app.stats_bar.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.help_menu import add_help_menu
from app.store import Store
from app.widgets import InputBox
from runtime.errors import UserError
from runtime.models.cache import DEMO_NAME, complete_models


def complete_model_names() -> list[str]:
    """The names of the cached models with every tier in place (runtime.models.cache.complete_models)."""
    return [m.name for m in complete_models()]


class ChatList(QWidget):
    """The history's conversations, with a search field (titles and message text), New, Rename and Delete. It
    renames itself; a delete is the window's (an answer in flight forbids it), confirmed with `confirm_delete`."""

    selected = Signal(int)  # a conversation's id, picked by the user
    delete = Signal(int)  # the user asks to delete this conversation
    failed = Signal(str)  # the history refused a change: one line

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.current: int | None = None
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setAccessibleName("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(lambda _: self.refresh())
        self.conversations = QListWidget()
        self.conversations.setAccessibleName("Conversations")
        self.conversations.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversations.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conversations.currentItemChanged.connect(self._on_current)
        self.new_button = QPushButton("&New chat")
        self.rename_button = QPushButton("Rena&me")
        self.rename_button.clicked.connect(self._rename)
        self.delete_button = QPushButton("Dele&te")
        self.delete_button.clicked.connect(lambda: self.current is not None and self.delete.emit(self.current))
        buttons = QHBoxLayout()
        for b in (self.new_button, self.rename_button, self.delete_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        layout.addWidget(self.search)
        layout.addWidget(self.conversations, 1)
        layout.addLayout(buttons)

    def refresh(self, current: int | None = -1) -> None:
        """List the conversations that match the search, `current` (the open one; -1: the same) selected
        without reporting it as the user's choice."""
        if current != -1:
            self.current = current
        self.conversations.blockSignals(True)
        self.conversations.clear()
        for c in self.store.conversations(self.search.text()):
            item = QListWidgetItem(c.title)
            item.setToolTip(c.title)
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            self.conversations.addItem(item)
            if c.id == self.current:
                self.conversations.setCurrentItem(item)
        self.conversations.blockSignals(False)
        self.rename_button.setEnabled(self.current is not None)
        self.delete_button.setEnabled(self.current is not None)

    def _rename(self) -> None:
        if self.current is None:
            return
        title, ok = QInputDialog.getText(self, "Rename", "Title:", text=self.store.title(self.current))
        if ok:
            try:
                self.store.rename(self.current, title)
            except UserError as e:
                self.failed.emit(str(e))
            self.refresh()

    def confirm_delete(self, conversation: int) -> bool:
        title = self.store.title(conversation)
        answer = QMessageBox.question(self, "Delete", f"Delete the conversation “{title}”?")
        return answer == QMessageBox.StandardButton.Yes

    def _on_current(self, item: QListWidgetItem | None) -> None:
        if item is not None:
            self.selected.emit(item.data(Qt.ItemDataRole.UserRole))


class ModelBar(QWidget):
    """The model choice (the complete models in the cache), Models… and Settings…."""

    model_chosen = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        self.model_box = QComboBox()
        self.model_box.setAccessibleName("Model")
        self.model_box.activated.connect(lambda _: self.model_chosen.emit(self.model_box.currentData() or ""))
        self.models_button = QPushButton("&Models…")
        self.settings_button = QPushButton("&Settings…")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Model:", buddy=self.model_box))
        layout.addWidget(self.model_box, 1)
        layout.addWidget(self.models_button)
        layout.addWidget(self.settings_button)

    def refresh(self, wanted: str) -> str:
        """List the complete models and show the one to answer with: `wanted` while it is there, else the
        demo, else the first ("" when there is none)."""
        names = complete_model_names()
        current = wanted if wanted in names else (DEMO_NAME if DEMO_NAME in names else next(iter(names), ""))
        self.model_box.clear()
        for name in names:
            self.model_box.addItem(name, name)
        self.model_box.setCurrentIndex(max(0, self.model_box.findData(current)))
        return current


class Welcome(QWidget):
    """What shows instead of the transcript while there is no model: set up the demo, or add a model."""

    def __init__(self, demo_shipped: bool) -> None:
        super().__init__()
        if demo_shipped:
            text = QLabel(
                "<h2>Welcome to SpecQuant</h2><p>There is no model on this computer yet. The demo model "
                "(SmolLM2-135M-Instruct) comes with SpecQuant: setting it up takes about 15 seconds and needs "
                "no network.</p><p>You can add your own models later under <b>Models…</b>.</p>"
            )
            self.demo_button = QPushButton("Set up the demo model")
        else:  # a build made without the demo model
            text = QLabel(
                "<h2>Welcome to SpecQuant</h2><p>There is no model on this computer yet. Add one under "
                "<b>Models…</b>: a Hugging Face repo id (downloaded once), a Hugging Face model folder, or a "
                ".gguf file. SpecQuant converts it once into three precision tiers.</p>"
            )
            self.demo_button = QPushButton("Add a model…")
        self.demo_shipped = demo_shipped
        text.setWordWrap(True)
        self.demo_button.setDefault(True)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        layout.addWidget(text)
        layout.addWidget(self.demo_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addStretch(2)


EXAMPLES = (  # the first screen's prompts: what a small model answers well, and text that shows as written
    "Write a four-line poem about the sea.",
    "Explain what a spreadsheet is, in two sentences.",
    "Write a Python function that reverses a string.",
    "Give me three tips for sleeping well.",
)
CAN_DO = (
    "<b>Private:</b> the model runs on this computer; what you type stays here.",
    "<b>Your documents:</b> add files under <i>Documents</i> and pick them under <i>Answer from</i>; the answer "
    "names the passages it used.",
    "<b>Tools:</b> connect tool servers under <i>Tools</i> (files, search and more); you allow each use.",
    "<b>Faster:</b> a small version of the model proposes words and the full model checks them, so you get the "
    "full model's answer sooner. The line under each answer says how much sooner.",
)


SPEED_NOTE = ("Answers come at least as soon as from a plain 4-bit copy of the model on this computer, in the most "
              "precise words that speed allows (measured here once); tick <b>Exact words</b> below for the full "
              "model's own words.")


class StartPanel(QWidget):
    """What an empty chat shows instead of a blank transcript: example prompts to click and, in plain words,
    what SpecQuant can do."""

    prompt_chosen = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        title = QLabel("<h2>Ask anything</h2><p>Type a question below, or start with one of these:</p>")
        title.setWordWrap(True)
        self.example_buttons: list[QPushButton] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 8, 24, 8)
        layout.addStretch(1)
        layout.addWidget(title)
        for prompt in EXAMPLES:
            button = QPushButton(prompt)
            button.setToolTip("Ask this")
            button.setStyleSheet("text-align: left; padding: 6px 10px")
            button.clicked.connect(lambda _=False, p=prompt: self.prompt_chosen.emit(p))
            self.example_buttons.append(button)
            layout.addWidget(button, 0, Qt.AlignmentFlag.AlignLeft)
        self.can_do = QLabel("<h3>What SpecQuant can do</h3><ul>" + "".join(f"<li>{c}</li>" for c in CAN_DO)
                             + "</ul><p>More under <b>Help</b>.</p>")
        self.can_do.setWordWrap(True)
        layout.addSpacing(12)
        layout.addWidget(self.can_do)
        self.speed_note = QLabel(SPEED_NOTE)  # the default's choice in one sentence (#61)
        self.speed_note.setAccessibleName("How fast and how precise answers are")
        self.speed_note.setWordWrap(True)
        layout.addWidget(self.speed_note)
        layout.addStretch(2)


class Composer(QWidget):
    """What this chat answers from and its persona, then the input box with Send, Stop and
    Regenerate (its menu: answer at higher precision)."""

    documents_chosen = Signal(object)  # None: no documents, "": all, else a collection's name
    persona_chosen = Signal(object)  # a persona's name, or None
    exact_chosen = Signal(bool)  # this chat answers with the full model's own words (the `exact` speed preset)
    regenerate = Signal(bool)  # at higher precision

    def __init__(self) -> None:
        super().__init__()
        self.answer_from = QComboBox()
        self.answer_from.setAccessibleName("Answer from")
        self.answer_from.setToolTip(
            "Answer from your documents: the best passages go into the question, and the answer lists its sources"
        )
        self.answer_from.addItem("No documents", None)
        self.answer_from.addItem("All documents", "")
        self.answer_from.activated.connect(lambda i: self.documents_chosen.emit(self.answer_from.itemData(i)))
        self.persona_box = QComboBox()
        # "Persona", never "preset": Settings' speed modes are the runtime's speed presets (#51, #62: one word each).
        self.persona_box.setAccessibleName("Persona")
        self.persona_box.setToolTip("What the assistant is told before this chat, and how it samples "
                                   "(Manage personas…)")
        self.persona_box.activated.connect(lambda i: self.persona_chosen.emit(self.persona_box.itemData(i)))
        self.personas_button = QPushButton("Manage personas…")
        # Precision one click away (#61): the default answers as fast as a plain Q4_K_M file would here.
        self.exact_box = QCheckBox("E&xact words")
        self.exact_box.setAccessibleName("Exact words in this chat")
        self.exact_box.setToolTip(
            "This chat answers with the full model's own words (F16): the most precise, slower on most computers. "
            "Off: the speed mode in Settings (by default as fast as a plain 4-bit file on this computer)"
        )
        # clicked, not toggled: showing a chat's own choice (setChecked) must not store it again
        self.exact_box.clicked.connect(lambda: self.exact_chosen.emit(self.exact_box.isChecked()))
        choice = QHBoxLayout()
        choice.addWidget(QLabel("&Answer from:", buddy=self.answer_from))
        choice.addWidget(self.answer_from)
        choice.addSpacing(12)
        choice.addWidget(QLabel("&Persona:", buddy=self.persona_box))
        choice.addWidget(self.persona_box)
        choice.addWidget(self.personas_button)
        choice.addSpacing(12)
        choice.addWidget(self.exact_box)
        choice.addStretch(1)
        self.input = InputBox()
        self.send_button = QPushButton("Send")
        self.send_button.setToolTip("Send (Enter)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the answer (Esc)")
        self.regenerate_button = QToolButton()
        self.regenerate_button.setText("Regenerate")
        self.regenerate_button.setAccessibleName("Regenerate the last answer")
        self.regenerate_button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        self.regenerate_button.clicked.connect(lambda: self.regenerate.emit(False))
        menu = QMenu(self.regenerate_button)
        self.higher_action = menu.addAction("Answer at higher precision")
        self.higher_action.triggered.connect(lambda: self.regenerate.emit(True))
        self.regenerate_button.setMenu(menu)
        actions = QVBoxLayout()
        for b in (self.send_button, self.stop_button, self.regenerate_button):
            b.setMinimumWidth(110)
            actions.addWidget(b)
        actions.addStretch(1)
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        row.addLayout(actions)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(choice)
        layout.addLayout(row)
        self.setTabOrder(self.input, self.send_button)
        self.setTabOrder(self.send_button, self.stop_button)
        self.setTabOrder(self.stop_button, self.regenerate_button)

    def show_busy(self, busy: bool, can_send: bool, can_regenerate: bool, can_go_higher: bool) -> None:
        self.send_button.setEnabled(not busy and can_send)
        self.stop_button.setEnabled(busy)
        self.regenerate_button.setEnabled(can_regenerate)
        self.higher_action.setEnabled(can_go_higher)

    def show_collections(self, names: list[str]) -> None:
        """The Answer-from choices after the collections changed; the chat's own choice stays."""
        current = self.answer_from.currentData()
        while self.answer_from.count() > 2:  # after No documents and All documents
            self.answer_from.removeItem(2)
        for name in names:
            self.answer_from.addItem(name, name)
        self.show_documents(current)

    def show_documents(self, documents: str | None) -> None:
        box = self.answer_from
        index = next((i for i in range(box.count()) if box.itemData(i) == documents), -1)
        if index < 0:  # a collection since removed: still shown, and its answer says it is missing
            box.addItem(documents, documents)
            index = box.count() - 1
        box.setCurrentIndex(index)

    def show_personas(self, names: list[str]) -> None:
        """The personas offered; the chat's own choice stays."""
        current = self.persona_box.currentData()
        self.persona_box.clear()
        self.persona_box.addItem("No persona", None)
        for name in names:
            self.persona_box.addItem(name, name)
        self.show_persona(current)

    def show_persona(self, name: str | None) -> None:
        box = self.persona_box
        index = box.findData(name) if name is not None else 0
        if index < 0:  # a persona since deleted: still shown as the chat's, and its next answer says so
            box.addItem(f"{name} (gone)", name)
            index = box.count() - 1
        box.setCurrentIndex(index)


class Menus:
    """File, Chat, View and Help with their shortcuts, their slots on `w` (the window, typed loosely so that this
    module does not import it back). The actions tests and toggles need are kept here."""

    def __init__(self, w: Any, highlight: bool, chart: bool) -> None:
        bar = w.menuBar()
        file = bar.addMenu("&File")
        _act(file, "&New chat", w.new_conversation, QKeySequence.StandardKey.New)
        self.export_action = _act(file, "&Export chat…", w.export_conversation)
        self.import_action = _act(file, "&Import chat…", w.import_conversation)
        file.addSeparator()
        _act(file, "&Models…", w.show_models)
        _act(file, "&Settings…", w.show_settings, "Ctrl+,")  # StandardKey.Preferences is empty on Linux
        file.addSeparator()
        _act(file, "&Quit", w.close, QKeySequence.StandardKey.Quit)
        chat = bar.addMenu("&Chat")
        _act(chat, "&Stop", w.stop, Qt.Key.Key_Escape)
        _act(chat, "&Regenerate", lambda: w.regenerate(higher=False), "Ctrl+R")
        _act(chat, "Regenerate at &higher precision", lambda: w.regenerate(higher=True), "Ctrl+Shift+R")
        chat.addSeparator()
        # A thinking model's (Qwen3, SmolLM3…) switch for this chat; Settings → Advanced holds the default.
        self.thinking_toggle = _act(chat, "Let the model &think before answering", w.toggle_thinking)
        self.thinking_toggle.setCheckable(True)
        self.thinking_toggle.setToolTip("For models that think aloud (Qwen3, SmolLM3, DeepSeek-R1): in this chat only")
        _act(chat, "Manage &personas…", w.show_personas)
        view = bar.addMenu("&View")
        _act(view, "Zoom &in", lambda: w.zoom(+1), [QKeySequence("Ctrl++"), QKeySequence("Ctrl+=")])
        _act(view, "Zoom &out", lambda: w.zoom(-1), QKeySequence("Ctrl+-"))
        _act(view, "&Reset zoom", lambda: w.zoom(0), QKeySequence("Ctrl+0"))
        self.highlight_toggle = _act(view, "&Highlight draft tokens", w.toggle_view)
        self.chart_toggle = _act(view, "Speed &chart", w.toggle_view)
        for action in (self.highlight_toggle, self.chart_toggle):
            action.setCheckable(True)
        self.show_view(highlight, chart)
        self.help = add_help_menu(bar, w)

    def show_view(self, highlight: bool, chart: bool) -> None:
        self.highlight_toggle.setChecked(highlight)
        self.chart_toggle.setChecked(chart)


def _act(menu: QMenu, text: str, slot: Callable[..., Any], keys: Any = None) -> QAction:
    a = menu.addAction(text)
    a.triggered.connect(slot)
    if keys is not None:
        a.setShortcuts(keys if isinstance(keys, list) else [QKeySequence(keys)])
    return a

