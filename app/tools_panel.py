"""The Tools panel (#43): the MCP servers of `mcp.json` with their state and tools, each tool's on/off switch,
the remembered "always allow" choices with Revoke, the approval mode, "Tools in this chat", and Add server…
(app.add_server_dialog) and Remove. With no server yet, a few plain words say what tools are and how to add
one, with a link to the Tools guide (#63: the tab was empty, with no explanation).

The panel never starts a server by itself: the window's McpHost is created when a chat with tools first
answers, or when the user presses Start here, and the panel then shows each server's state as it moves
(polled while the panel is shown: reading a state is a dictionary lookup). Starting runs on a Python thread,
because a server may take up to 30 s. A server's secrets (its env and headers) are never shown: only
`ServerConfig.summary()`, which redacts them. The MCP SDK is imported only once the panel is first shown.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.add_server_dialog import AddServerDialog
from runtime.chat.toolbox import BUILTIN
from runtime.errors import UserError
from runtime.mcp.switches import ToolSwitches
from runtime.paths import config_dir as config_folder

if TYPE_CHECKING:
    from runtime.mcp import McpHost

log = logging.getLogger("specquant.app")

ERROR_COLOUR = "#b3261e"  # the banner's red: 4.5:1 on white
POLL_MS = 500  # how often the shown panel reads the servers' states
MODES = (("ask", "Ask before each call"), ("all", "Run every call"), ("none", "Run no call"))
SEARCH_TOOL = "search_documents"  # runtime.engine.document_tool.NAME
TOOLS_GUIDE = "tools.md"  # docs/guide/tools.md, opened in the window's guide viewer
INTRO = (
    "<p><b>Tools</b> let the model do what words alone cannot: read your files, search the web, look something "
    "up. Each tool comes from a small program, a <i>tool server</i> (the MCP standard); many are free.</p>"
    "<p>No tool server is set up yet. To add one, press <b>Add server…</b> and copy in the command from the "
    "tool's instructions: for example <tt>npx</tt> with the arguments "
    "<tt>-y @modelcontextprotocol/server-filesystem ~/Documents</tt>. Then tick <b>Tools in this chat</b>; "
    "you are asked before each use.</p>"
    f'<p><a href="guide:{TOOLS_GUIDE}">Read the Tools guide</a></p>'
)


def state_text(state: str, reason: str) -> str:
    """A server's state as the panel's column shows it: `failed: the reason's first line`."""
    first = reason.strip().splitlines()[0] if reason.strip() else ""
    return f"{state}: {first}" if state == "failed" and first else state


class ToolsPanel(QWidget):
    """The Tools tab. `host()` is the window's McpHost or None; `ensure_host()` creates it (Start)."""

    chat_tools_changed = Signal(bool)  # "Tools in this chat" switched by the user
    mode_changed = Signal(str)  # the approval mode chosen: ask, all or none
    servers_changed = Signal()  # a server was added or removed: the window's host is out of date
    refreshed = Signal()  # the list was drawn again (tests wait on it)
    guide_wanted = Signal(str)  # a guide's file name (docs/guide/): the intro's link

    def __init__(
        self,
        host: Callable[[], McpHost | None],
        ensure_host: Callable[[], McpHost | None],
        switches: ToolSwitches | None = None,
    ) -> None:
        super().__init__()
        self.host, self.ensure_host = host, ensure_host
        self.switches = switches or ToolSwitches()
        self.has_documents = False
        self.loaded = False  # the config was read at least once (the panel was shown, or refreshed)
        self._drawn: Any = None  # what the tree shows, to redraw only on a change
        self._starting: str | None = None  # the server a Start pressed here is starting

        self.chat_tools = QCheckBox("&Tools in this chat")
        self.chat_tools.setToolTip("Let the model call the tools below in this conversation")
        self.chat_tools.toggled.connect(self.chat_tools_changed.emit)
        self.mode_box = QComboBox()
        self.mode_box.setAccessibleName("Tool calls")
        for mode, label in MODES:
            self.mode_box.addItem(label, mode)
        self.mode_box.activated.connect(lambda i: self.mode_changed.emit(self.mode_box.itemData(i)))

        self.intro = QLabel(INTRO)  # shown while mcp.json names no server
        self.intro.setTextFormat(Qt.TextFormat.RichText)  # our own words, no server's
        self.intro.setWordWrap(True)
        self.intro.linkActivated.connect(lambda link: self.guide_wanted.emit(link.removeprefix("guide:")))
        self.intro.setVisible(False)
        self.tree = QTreeWidget()
        self.tree.setAccessibleName("Servers and tools")
        self.tree.setHeaderLabels(["Server / tool", "State"])
        # Names are never cut: the name column is as wide as its longest name, and the tree scrolls sideways.
        self.tree.header().setStretchLastSection(False)  # a stretched last column is as wide as the space left
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.tree.itemChanged.connect(self._on_switch)
        self.tree.currentItemChanged.connect(lambda *_: self._enable())
        self.problems = QLabel()
        self.problems.setTextFormat(Qt.TextFormat.PlainText)
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.add_button = QPushButton("&Add server…")
        self.add_button.clicked.connect(self.add_server)
        self.remove_button = QPushButton("Remo&ve")
        self.remove_button.clicked.connect(self.remove_server)
        self.start_button = QPushButton("St&art")
        self.start_button.setToolTip("Start the server now and list its tools (Retry after a failure)")
        self.start_button.clicked.connect(self.start_server)

        self.approvals = QListWidget()
        self.approvals.setAccessibleName("Always allowed")
        self.approvals.currentItemChanged.connect(lambda *_: self._enable())
        self.revoke_button = QPushButton("Re&voke")
        self.revoke_button.clicked.connect(self.revoke)
        self.status = QLabel()
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)

        mode_row = QHBoxLayout()
        mode_row.addWidget(QLabel("Calls:", buddy=self.mode_box))
        mode_row.addWidget(self.mode_box, 1)
        server_buttons = QHBoxLayout()
        for b in (self.add_button, self.remove_button, self.start_button):
            server_buttons.addWidget(b)
        revoke_row = QHBoxLayout()
        revoke_row.addStretch(1)
        revoke_row.addWidget(self.revoke_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        layout.addWidget(self.chat_tools)
        layout.addLayout(mode_row)
        layout.addWidget(self.intro)
        layout.addWidget(self.tree, 3)
        layout.addWidget(self.problems)
        layout.addLayout(server_buttons)
        layout.addWidget(QLabel("Always allowed:"))
        layout.addWidget(self.approvals, 1)
        layout.addLayout(revoke_row)
        layout.addWidget(self.status)

        self._poll = QTimer(self)
        self._poll.setInterval(POLL_MS)
        self._poll.timeout.connect(self._draw_servers)
        self._enable()

    # --- what the window tells the panel --------------------------------------------------------------
    def show_chat_tools(self, on: bool) -> None:
        """The open chat's "Tools in this chat" (not a user's switch: no signal)."""
        self.chat_tools.blockSignals(True)
        self.chat_tools.setChecked(on)
        self.chat_tools.blockSignals(False)

    def show_mode(self, mode: str) -> None:
        self.mode_box.setCurrentIndex(max(0, self.mode_box.findData(mode)))

    def show_documents(self, has: bool) -> None:
        """Whether a documents collection exists: the built-in search is listed then."""
        if has != self.has_documents:
            self.has_documents = has
            if self.loaded:
                self._draw_servers()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.refresh()
        self._poll.start()

    def hideEvent(self, event: Any) -> None:
        super().hideEvent(event)
        self._poll.stop()

    # --- drawing --------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read mcp.json and the remembered choices again, and draw everything."""
        self.loaded = True
        self._drawn = None
        self._draw_servers()
        self._draw_approvals()
        self.refreshed.emit()

    def _rows(self) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        """What the tree should show: per server (name, state, tooltip, tools as (name, description, on), tools
        not offered as (name, reason)), and the problems: the config's, then each tool not offered (#51)."""
        from runtime.mcp import ServerStatus, load_config

        try:
            config = load_config()
        except UserError as e:
            self.intro.setVisible(False)  # the file is there, only unreadable: its fault is said instead
            return (), (str(e),)
        self.intro.setVisible(not config.servers and not config.problems)
        host = self.host()
        states = host.status() if host is not None else {}
        listing = host.listing() if host is not None else None
        off = self.switches.off()
        rows = []
        problems = list(config.problems)
        for name, server in config.servers.items():
            reason = "disabled in mcp.json" if server.disabled else "not started yet"
            status = states.get(name, ServerStatus("stopped", reason))
            tools = []
            if listing is not None:
                described = {t["function"]["name"]: t["function"].get("description") or "" for t in listing.tools}
                for offered, (server_name, tool) in listing.routes.items():
                    if server_name == name:
                        tools.append((tool, described.get(offered, ""), tool not in off.get(name, ())))
            left_out = listing.skipped if listing is not None else ()
            skipped = tuple((s.tool, s.reason) for s in left_out if s.server == name)
            problems += [f"{name}: the tool {tool} is not offered to the model: {why}" for tool, why in skipped]
            tip = server.summary() + (f"\n{status.reason}" if status.reason else "")
            rows.append((name, state_text(status.state, status.reason), tip, tuple(tools), skipped))
        if self.has_documents:
            tool = (SEARCH_TOOL, "Search your documents (the Documents tab)", SEARCH_TOOL not in off.get(BUILTIN, ()))
            rows.append((BUILTIN, "ready", "Built into SpecQuant", (tool,), ()))
        return tuple(rows), tuple(problems)

    def _draw_servers(self) -> None:
        if not self.loaded:
            return
        rows, problems = self._rows()
        self.tree.setHidden(not rows)  # nothing to list: the intro says why
        # The folder is in the tooltip: in the narrow panel the file's name says enough.
        self.problems.setText("\n".join(p.replace(f"{config_folder()}{os.sep}", "") for p in problems))
        self.problems.setToolTip("\n".join(problems))
        self.problems.setVisible(bool(problems))
        if self._starting is not None:  # a Start pressed here: say how it ended
            state = next((state for name, state, *_ in rows if name == self._starting), "")
            if state == "ready" or state.startswith("failed"):
                self.status.setText(f"{self._starting}: {state}")
                self._starting = None
        if (rows, problems) == self._drawn:
            return
        self._drawn = (rows, problems)
        current = self.tree.currentItem()
        chosen = self._path(current) if current is not None else None
        self.tree.blockSignals(True)
        self.tree.clear()
        for name, state, tip, tools, skipped in rows:
            top = QTreeWidgetItem([name, state])
            top.setData(0, Qt.ItemDataRole.UserRole, (name, None))
            top.setToolTip(0, tip)
            top.setToolTip(1, tip)
            for tool, description, on in tools:
                item = QTreeWidgetItem([tool, ""])
                item.setData(0, Qt.ItemDataRole.UserRole, (name, tool))
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                item.setCheckState(0, Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
                item.setToolTip(0, description or tool)
                top.addChild(item)
            for tool, why in skipped:  # listed by the server, not offered: greyed, with the reason
                item = QTreeWidgetItem([tool, "not offered"])
                item.setData(0, Qt.ItemDataRole.UserRole, (name, tool))
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled)
                item.setToolTip(0, f"Not offered to the model: {why}")
                item.setToolTip(1, f"Not offered to the model: {why}")
                top.addChild(item)
            self.tree.addTopLevelItem(top)
            top.setExpanded(True)
            if chosen and chosen[0] == name and chosen[1] is None:
                self.tree.setCurrentItem(top)
        self.tree.blockSignals(False)
        self._enable()

    def _draw_approvals(self) -> None:
        from runtime.mcp import Approvals

        self.approvals.clear()
        for server, tools in sorted(Approvals().allowed().items()):
            for tool in sorted(tools):
                item = QListWidgetItem(f"{server} › {tool}")
                item.setData(Qt.ItemDataRole.UserRole, (server, tool))
                self.approvals.addItem(item)
        self._enable()

    def _path(self, item: QTreeWidgetItem | None) -> tuple[str, str | None] | None:
        return item.data(0, Qt.ItemDataRole.UserRole) if item is not None else None

    def _selected_server(self) -> str | None:
        path = self._path(self.tree.currentItem())
        return path[0] if path is not None and path[0] != BUILTIN else None

    def _enable(self) -> None:
        server = self._selected_server()
        self.remove_button.setEnabled(server is not None)
        self.start_button.setEnabled(server is not None)
        self.revoke_button.setEnabled(self.approvals.currentItem() is not None)

    # --- the user's actions ---------------------------------------------------------------------------
    def _on_switch(self, item: QTreeWidgetItem, column: int) -> None:
        path = self._path(item)
        if column != 0 or path is None or path[1] is None:
            return
        on = item.checkState(0) == Qt.CheckState.Checked
        try:
            self.switches.turn(path[0], path[1], on)
        except UserError as e:
            self.status.setText(str(e))
            return
        self.status.setText(f"{path[0]} › {path[1]} is {'on' if on else 'off'}.")
        self._drawn = None

    def add_server(self) -> None:
        dialog = AddServerDialog(self)
        if dialog.exec() and dialog.added:
            self.status.setText(f"Added {', '.join(dialog.added)}.")
            self.servers_changed.emit()
            self.refresh()

    def remove_server(self) -> None:
        from runtime.mcp import Approvals, remove_server

        name = self._selected_server()
        if name is None:
            return
        answer = QMessageBox.question(self, "Remove server", f"Remove the server “{name}” from mcp.json?")
        if answer != QMessageBox.StandardButton.Yes:
            return
        try:
            remove_server(name)
            Approvals().revoke(name)
            self.switches.forget(name)
        except UserError as e:
            self.status.setText(str(e))
            return
        self.status.setText(f"Removed {name}.")
        self.servers_changed.emit()
        self.refresh()

    def start_server(self) -> None:
        """Start (or, after a failure, retry) the chosen server on a Python thread; its state shows as it moves."""
        name = self._selected_server()
        host = self.ensure_host() if name is not None else None
        if host is None or name is None:
            return
        failed = host.status().get(name)
        retry = failed is not None and failed.state == "failed"

        def start() -> None:
            try:
                host.restart(name) if retry else host.start([name])
            except Exception:  # the host reports faults as states; anything else is a bug, logged
                log.warning("starting MCP server %s failed", name, exc_info=True)

        threading.Thread(target=start, name=f"mcp-start-{name}", daemon=True).start()
        self.status.setText(f"Starting {name}…")
        self._starting = name
        self._poll.start()

    def revoke(self) -> None:
        from runtime.mcp import Approvals

        item = self.approvals.currentItem()
        if item is None:
            return
        server, tool = item.data(Qt.ItemDataRole.UserRole)
        try:
            Approvals().revoke(server, tool)
        except UserError as e:
            self.status.setText(str(e))
            return
        self.status.setText(f"{server} › {tool} will be asked about again.")
        self._draw_approvals()
