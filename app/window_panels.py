"""The main window's panels, one builder each: they make the widgets, set them on the window under the names
its code and the tests use (`w.search`, `w.transcript`, `w.speed_chart`, …) and wire them to its slots.
`MainWindow._build` calls them in this order and lays the results out; the window keeps no layout code.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QMenu,
    QPushButton,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.documents_panel import DocumentsPanel
from app.stats_bar import StatsBar
from app.tools_panel import ToolsPanel
from app.transcript import TranscriptView
from app.widgets import ErrorBanner, InputBox

# The MainWindow (app.window) the panels are built on, typed loosely so that this module does not import the
# window back: each builder sets its widgets on it under the names the window and its tests use.
MainWindow = Any


def sidebar(w: MainWindow) -> QWidget:
    """The conversation list with its search field and New, Rename and Delete."""
    w.search = QLineEdit()
    w.search.setPlaceholderText("Search conversations")
    w.search.setAccessibleName("Search conversations")
    w.search.setClearButtonEnabled(True)
    w.search.textChanged.connect(w.refresh_conversations)
    w.conversations = QListWidget()
    w.conversations.setAccessibleName("Conversations")
    w.conversations.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    w.conversations.setTextElideMode(Qt.TextElideMode.ElideRight)
    w.conversations.currentItemChanged.connect(w._on_conversation_selected)
    new = QPushButton("&New chat")
    new.clicked.connect(w.new_conversation)
    w.rename_button = QPushButton("Rena&me")
    w.rename_button.clicked.connect(w.rename_conversation)
    w.delete_button = QPushButton("Dele&te")
    w.delete_button.clicked.connect(w.delete_conversation)
    buttons = QHBoxLayout()
    for b in (new, w.rename_button, w.delete_button):
        buttons.addWidget(b)
    side = QWidget()
    side_layout = QVBoxLayout(side)
    side_layout.setContentsMargins(8, 8, 4, 8)
    side_layout.addWidget(w.search)
    side_layout.addWidget(w.conversations, 1)
    side_layout.addLayout(buttons)
    return side


def documents(w: MainWindow) -> DocumentsPanel:
    """The documents collections (app.documents_panel), on the index beside the conversation history."""
    w.documents = DocumentsPanel(w.documents_index)
    w.documents.collections_changed.connect(w.show_collections)
    return w.documents


def tools(w: MainWindow) -> ToolsPanel:
    """The MCP servers and their tools (app.tools_panel), on the window's lazily created McpHost."""
    w.tools_panel = ToolsPanel(lambda: w.tool_host, w.ensure_tool_host, w.tool_switches)
    w.tools_panel.show_mode(w.settings.tool_approval)
    w.tools_panel.chat_tools_changed.connect(w.choose_tools)
    w.tools_panel.mode_changed.connect(w.choose_tool_mode)
    w.tools_panel.servers_changed.connect(w.retire_tool_host)
    return w.tools_panel


def side_tabs(w: MainWindow, chats: QWidget, docs: QWidget, tools_tab: QWidget) -> QTabWidget:
    """Chats, Documents and Tools share the left column: the reading column keeps its width."""
    w.side_tabs = QTabWidget()
    w.side_tabs.setDocumentMode(True)
    w.side_tabs.addTab(chats, "C&hats")
    w.side_tabs.addTab(docs, "&Documents")
    w.side_tabs.addTab(tools_tab, "T&ools")
    return w.side_tabs


def model_bar(w: MainWindow) -> QHBoxLayout:
    """The error banner (`w.banner`, laid out below the row) and the row with the model choice, Models and
    Settings."""
    w.banner = ErrorBanner()
    w.banner.action.connect(w._on_banner_action)
    w.model_box = QComboBox()
    w.model_box.setAccessibleName("Model")
    w.model_box.activated.connect(lambda _: w.select_model(w.model_box.currentData() or ""))
    manage = QPushButton("&Models…")
    manage.clicked.connect(w.show_models)
    settings = QPushButton("&Settings…")
    settings.clicked.connect(w.show_settings)
    top = QHBoxLayout()
    top.addWidget(QLabel("Model:", buddy=w.model_box))
    top.addWidget(w.model_box, 1)
    top.addWidget(manage)
    top.addWidget(settings)
    return top


def welcome(w: MainWindow) -> QWidget:
    """What shows instead of the transcript while there is no model: set up the demo, or add a model."""
    w.welcome = QWidget()
    welcome_layout = QVBoxLayout(w.welcome)
    if w.models.demo_shipped:
        text = QLabel(
            "<h2>Welcome to SpecQuant</h2><p>There is no model on this computer yet. The demo model "
            "(SmolLM2-135M-Instruct) comes with SpecQuant: setting it up takes about 15 seconds and needs "
            "no network.</p><p>You can add your own models later under <b>Models…</b>.</p>"
        )
        w.demo_button = QPushButton("Set up the demo model")
        w.demo_button.clicked.connect(w.setup_demo)
    else:  # a build made without the demo model
        text = QLabel(
            "<h2>Welcome to SpecQuant</h2><p>There is no model on this computer yet. Add one under "
            "<b>Models…</b>: a Hugging Face repo id (downloaded once), a Hugging Face model folder, or a "
            ".gguf file. SpecQuant converts it once into three precision tiers.</p>"
        )
        w.demo_button = QPushButton("Add a model…")
        w.demo_button.clicked.connect(w.show_models)
    text.setWordWrap(True)
    w.demo_button.setDefault(True)
    welcome_layout.addStretch(1)
    welcome_layout.addWidget(text)
    welcome_layout.addWidget(w.demo_button, 0, Qt.AlignmentFlag.AlignLeft)
    welcome_layout.addStretch(2)
    return w.welcome


def transcript(w: MainWindow) -> TranscriptView:
    """The conversation's messages and the answer in flight."""
    w.transcript = TranscriptView()
    w.transcript.copied.connect(lambda _: w.statusBar().showMessage("Code copied", 2000))
    w.transcript.open_failed.connect(lambda path: w.statusBar().showMessage(f"No application opens {path}", 6000))
    return w.transcript


def input_row(w: MainWindow) -> QVBoxLayout:
    """What this chat answers from (`w.answer_from`) and its system-prompt preset (`w.preset_box`), then the
    input box with Send, Stop and Regenerate (its menu: answer at higher precision)."""
    w.answer_from = QComboBox()
    w.answer_from.setAccessibleName("Answer from")
    w.answer_from.setToolTip(
        "Answer from your documents: the best passages go into the question, and the answer lists its sources"
    )
    w.answer_from.addItem("No documents", None)
    w.answer_from.addItem("All documents", "")
    w.answer_from.activated.connect(lambda i: w.choose_documents(w.answer_from.itemData(i)))
    w.preset_box = QComboBox()
    w.preset_box.setAccessibleName("System-prompt preset")
    w.preset_box.setToolTip("What the assistant is told before this chat, and how it samples (Manage presets…)")
    w.preset_box.activated.connect(lambda i: w.choose_preset(w.preset_box.itemData(i)))
    manage = QPushButton("Manage presets…")
    manage.clicked.connect(w.show_presets)
    choice = QHBoxLayout()
    choice.addWidget(QLabel("&Answer from:", buddy=w.answer_from))
    choice.addWidget(w.answer_from)
    choice.addSpacing(12)
    choice.addWidget(QLabel("&Preset:", buddy=w.preset_box))
    choice.addWidget(w.preset_box)
    choice.addWidget(manage)
    choice.addStretch(1)
    w.input = InputBox()
    w.input.submitted.connect(w.send)
    w.send_button = QPushButton("Send")
    w.send_button.setToolTip("Send (Enter)")
    w.send_button.clicked.connect(w.send)
    w.stop_button = QPushButton("Stop")
    w.stop_button.setToolTip("Stop the answer (Esc)")
    w.stop_button.clicked.connect(w.stop)
    w.regenerate_button = QToolButton()
    w.regenerate_button.setText("Regenerate")
    w.regenerate_button.setAccessibleName("Regenerate the last answer")
    w.regenerate_button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
    w.regenerate_button.clicked.connect(lambda: w.regenerate(higher=False))
    menu = QMenu(w.regenerate_button)
    w.higher_action = menu.addAction("Answer at higher precision")
    w.higher_action.triggered.connect(lambda: w.regenerate(higher=True))
    w.regenerate_button.setMenu(menu)
    actions = QVBoxLayout()
    for b in (w.send_button, w.stop_button, w.regenerate_button):
        b.setMinimumWidth(110)
        actions.addWidget(b)
    actions.addStretch(1)
    row = QHBoxLayout()
    row.addWidget(w.input, 1)
    row.addLayout(actions)
    bottom = QVBoxLayout()
    bottom.addLayout(choice)
    bottom.addLayout(row)
    return bottom


def status_bar(w: MainWindow) -> None:
    """The status bar's answer facts and speed chart; the labels also by name, for the tests and the self-test."""
    w.stats = StatsBar(w.statusBar())
    w.badge, w.precision, w.speed = w.stats.badge, w.stats.precision, w.stats.speed
    w.acceptance, w.placement = w.stats.acceptance, w.stats.placement
    w.speedup, w.speed_chart = w.stats.speedup, w.stats.chart
    w.model_label, w.api_label = w.stats.model_label, w.stats.api_label


def menus(w: MainWindow) -> None:
    """File, Chat and View with their shortcuts; Export and Import chat as `w.export_action` and
    `w.import_action`, the View toggles as `w.highlight_toggle` and `w.chart_toggle`."""

    def act(menu: QMenu, text: str, slot: Any, keys: Any = None) -> QAction:
        a = menu.addAction(text)
        a.triggered.connect(slot)
        if keys is not None:
            a.setShortcuts(keys if isinstance(keys, list) else [QKeySequence(keys)])
        return a

    file = w.menuBar().addMenu("&File")
    act(file, "&New chat", w.new_conversation, QKeySequence.StandardKey.New)
    w.export_action = act(file, "&Export chat…", w.export_conversation)
    w.import_action = act(file, "&Import chat…", w.import_conversation)
    file.addSeparator()
    act(file, "&Models…", w.show_models)
    act(file, "&Settings…", w.show_settings, "Ctrl+,")  # StandardKey.Preferences is empty on Linux
    file.addSeparator()
    act(file, "&Quit", w.close, QKeySequence.StandardKey.Quit)
    chat = w.menuBar().addMenu("&Chat")
    act(chat, "&Stop", w.stop, Qt.Key.Key_Escape)
    act(chat, "&Regenerate", lambda: w.regenerate(higher=False), "Ctrl+R")
    act(chat, "Regenerate at &higher precision", lambda: w.regenerate(higher=True), "Ctrl+Shift+R")
    chat.addSeparator()
    act(chat, "Manage &presets…", w.show_presets)
    view = w.menuBar().addMenu("&View")
    act(view, "Zoom &in", lambda: w.zoom(+1), [QKeySequence("Ctrl++"), QKeySequence("Ctrl+=")])
    act(view, "Zoom &out", lambda: w.zoom(-1), QKeySequence("Ctrl+-"))
    act(view, "&Reset zoom", lambda: w.zoom(0), QKeySequence("Ctrl+0"))
    w.highlight_toggle = act(view, "&Highlight draft tokens", w._toggle_highlight)
    w.highlight_toggle.setCheckable(True)
    w.highlight_toggle.setChecked(w.settings.highlight_draft)
    w.chart_toggle = act(view, "Speed &chart", w._toggle_chart)
    w.chart_toggle.setCheckable(True)
    w.chart_toggle.setChecked(w.settings.speed_chart)
    w.speed_chart.setVisible(w.settings.speed_chart)
