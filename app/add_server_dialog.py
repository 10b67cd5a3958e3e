"""Add a tool server (#43, #63): a small form (name, command, arguments, environment) for the common case, a
program started on this computer; pasting the server's JSON (`mcpServers` format, the only way to add a server
on the network) stays as the advanced choice. Either way the entry is checked by runtime.mcp's own rules and
written to `mcp.json` whole or not at all; a fault is one line that starts with the field to correct."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from runtime.errors import UserError

if TYPE_CHECKING:
    from runtime.mcp import ServerConfig

ERROR_COLOUR = "#b3261e"  # the banner's red: 4.5:1 on white
# Which field a runtime.mcp complaint about an entry is about, by the word it starts with.
FIELDS = (("name", "Name"), ("command", "Command"), ("args", "Arguments"), ("env", "Environment"))


def entry_of(server: ServerConfig) -> dict[str, Any]:
    """A checked server as its `mcpServers` entry, for `add_server`."""
    entry: dict[str, Any] = {}
    if server.command is not None:
        entry["command"] = server.command
        if server.args:
            entry["args"] = list(server.args)
        if server.env:
            entry["env"] = dict(server.env)
    else:
        entry["url"] = server.url
        if server.headers:
            entry["headers"] = dict(server.headers)
    if server.disabled:
        entry["disabled"] = True
    return entry


def _taken(names: list[str], path: Path | None) -> str | None:
    from runtime.mcp import load_config

    existing = load_config(path).servers
    return next((n for n in names if n in existing), None)


def add_pasted(text: str, name: str = "", path: Path | None = None) -> list[str]:
    """Add the servers of a pasted snippet (`check_snippet`'s forms) to `mcp.json`: all of them or, on any
    problem, none. Their names; UserError with one line for text that is not JSON, a bad entry or a taken
    name. A command that is not installed is no reason to refuse: it may be installed later."""
    from runtime.mcp import add_server, check_snippet

    servers, problems = check_snippet(text, name.strip() or None)
    bad = [p for p in problems if not any(f"server {n!r}:" in p for n in servers)]
    if bad:
        raise UserError("; ".join(bad))
    if (taken := _taken(list(servers), path)) is not None:
        raise UserError(f"there is already a server named {taken!r}: remove it first, or give another name")
    for server_name, server in servers.items():
        add_server(server_name, entry_of(server), path)
    return list(servers)


def form_entry(name: str, command: str, arguments: str, environment: str) -> tuple[str, dict[str, Any]]:
    """The form's fields as (name, `mcpServers` entry); UserError "Field: what is wrong" for the first fault."""
    from runtime.mcp.config import server_from_entry

    name = name.strip()
    if not name:
        raise UserError("Name: give the server a name (it is shown in the Tools tab and before each call)")
    if not command.strip():
        raise UserError("Command: give the program that starts the server, as its instructions say (e.g. npx)")
    try:
        args = shlex.split(arguments, posix=os.name != "nt")
    except ValueError:
        raise UserError("Arguments: a quotation mark is not closed") from None
    env: dict[str, str] = {}
    for n, line in enumerate(environment.splitlines(), 1):
        if not line.strip():
            continue
        key, equals, value = line.partition("=")
        if not equals or not key.strip():
            raise UserError(f"Environment, line {n}: write one NAME=value a line")
        env[key.strip()] = value.strip()
    entry: dict[str, Any] = {"command": command.strip()}
    if args:
        entry["args"] = args
    if env:
        entry["env"] = env
    try:
        server_from_entry(name, entry)  # runtime.mcp's own rules (a reserved name, a relative command path)
    except ValueError as e:
        words = str(e)
        field = next((label for word, label in FIELDS if words.startswith(word) or f"the {word}" in words), "Entry")
        raise UserError(f"{field}: {words}") from None
    return name, entry


def add_from_form(name: str, command: str, arguments: str, environment: str, path: Path | None = None) -> str:
    """Check the form and add its server to `mcp.json`; its name. UserError "Field: …" on the first fault."""
    from runtime.mcp import add_server

    name, entry = form_entry(name, command, arguments, environment)
    if _taken([name], path) is not None:
        raise UserError(f"Name: there is already a server named {name!r}: remove it first, or give another name")
    add_server(name, entry, path)
    return name


class AddServerDialog(QDialog):
    """The form (name, command, arguments, environment) or, ticked under it, the pasted JSON; Add checks and
    writes, and a fault is said in one line under the fields (nothing is written then)."""

    def __init__(self, parent: QWidget | None = None, path: Path | None = None) -> None:
        super().__init__(parent)
        self.path = path
        self.added: list[str] = []
        self.setWindowTitle("Add tool server")
        self.name = QLineEdit()
        self.name.setAccessibleName("Server name")
        self.name.setPlaceholderText("e.g. files")
        self.command = QLineEdit()
        self.command.setAccessibleName("Command")
        self.command.setPlaceholderText("e.g. npx")
        self.arguments = QLineEdit()
        self.arguments.setAccessibleName("Arguments")
        self.arguments.setPlaceholderText("e.g. -y @modelcontextprotocol/server-filesystem ~/Documents")
        self.arguments.setToolTip("Separated by spaces; put an argument with spaces in quotes")
        self.environment = QPlainTextEdit()
        self.environment.setAccessibleName("Environment")
        self.environment.setPlaceholderText("API_KEY=…  (one NAME=value a line; optional)")
        self.environment.setTabChangesFocus(True)
        self.environment.setFixedHeight(self.fontMetrics().lineSpacing() * 4)
        self.form = QFormLayout()  # the name, then the command's rows (hidden while pasting)
        self.form.addRow("&Name:", self.name)
        self.form.addRow("&Command:", self.command)
        self.form.addRow("A&rguments:", self.arguments)
        self.form.addRow("&Environment:", self.environment)

        self.pasting = QCheckBox("&Paste the server's JSON instead (advanced: also for a server on the network)")
        self.pasting.toggled.connect(self._show_mode)
        self.text = QPlainTextEdit()
        self.text.setAccessibleName("Server JSON")
        self.text.setPlaceholderText('{"mcpServers": {"files": {"command": "npx", "args": ["-y", "..."]}}}')
        self.text.setTabChangesFocus(True)
        self.error = QLabel()
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.add_button = QPushButton("&Add")
        self.add_button.setDefault(True)
        self.add_button.clicked.connect(self.add)
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.add_button)
        buttons.addWidget(cancel)
        intro = QLabel("A tool server is a small program that gives the model tools. Its instructions name the "
                       "command that starts it; copy it here.")
        intro.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(self.form)
        layout.addWidget(self.pasting)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.error)
        layout.addStretch(0)
        layout.addLayout(buttons)
        self._show_mode(False)
        self.setMinimumWidth(self.fontMetrics().averageCharWidth() * 64)
        self.resize(600, 360)

    def _show_mode(self, pasting: bool) -> None:
        for row in (1, 2, 3):  # the command, its arguments and environment: the pasted JSON holds them
            self.form.setRowVisible(row, not pasting)
        self.text.setVisible(pasting)
        self.name.setPlaceholderText("needed for a single entry" if pasting else "e.g. files")
        self.error.clear()

    def add(self) -> None:
        try:
            if self.pasting.isChecked():
                self.added = add_pasted(self.text.toPlainText(), self.name.text(), self.path)
            else:
                self.added = [add_from_form(self.name.text(), self.command.text(), self.arguments.text(),
                                            self.environment.toPlainText(), self.path)]
        except UserError as e:
            self.error.setText(" ".join(str(e).split()))  # one line, whatever the message holds
            return
        self.accept()
