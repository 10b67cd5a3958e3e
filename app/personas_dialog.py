"""Manage personas…: the personas (runtime.engine.personas) in a list, the user's own added,
edited and deleted; the shipped ones shown read-only. A bad value or an unreadable presets.json is one line
in the dialog."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from runtime.engine.personas import (
    SAMPLING_RANGES,
    SHIPPED,
    Persona,
    delete_persona,
    load_personas,
    save_persona,
)
from runtime.errors import UserError


def parse_temperature(text: str) -> float | None:
    """The temperature field: empty for the model's own, else a number in the personas' range."""
    if not text.strip():
        return None
    lo, hi = SAMPLING_RANGES["temperature"]
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not lo <= value <= hi:  # NaN fails too
        raise UserError(f"the temperature must be a number from {lo:g} to {hi:g}, or empty for the model's own")
    return value


class PersonasDialog(QDialog):
    personas_changed = Signal()  # a persona was saved or deleted: the window reloads its Persona box

    def __init__(self, parent: QWidget | None = None, path: Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Personas")
        self.resize(640, 420)
        self.path = path  # None: presets.json in the config folder
        self.editing: Persona | None = None  # the user's persona the fields show (None: a new one)

        self.list = QListWidget()
        self.list.setAccessibleName("Personas")
        self.list.currentItemChanged.connect(self._on_selected)
        self.name = QLineEdit()
        self.name.setAccessibleName("Name of the persona")
        self.system = QPlainTextEdit()
        self.system.setAccessibleName("System prompt")
        self.system.setPlaceholderText("What the assistant is told before the chat, e.g. “Answer in French.”")
        self.temperature = QLineEdit()
        self.temperature.setAccessibleName("Temperature")
        self.temperature.setPlaceholderText("the model's own")
        self.error = QLabel()
        self.error.setAccessibleName("Problem with the persona")
        self.error.setStyleSheet("color: #b3261e;")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.new_button = QPushButton("&New")
        self.new_button.clicked.connect(self.new)
        self.save_button = QPushButton("&Save")
        self.save_button.clicked.connect(self.save)
        self.delete_button = QPushButton("&Delete")
        self.delete_button.clicked.connect(self.delete)
        close = QPushButton("Close")
        close.clicked.connect(self.close)

        form = QFormLayout()
        form.addRow("&Name:", self.name)
        form.addRow("S&ystem prompt:", self.system)
        form.addRow("&Temperature:", self.temperature)
        buttons = QHBoxLayout()
        for b in (self.new_button, self.save_button, self.delete_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(close)
        fields = QVBoxLayout()
        fields.addLayout(form, 1)
        fields.addWidget(self.error)
        fields.addLayout(buttons)
        row = QHBoxLayout(self)
        row.addWidget(self.list, 1)
        row.addLayout(fields, 2)
        self.refresh()

    def refresh(self, select: str | None = None) -> None:
        """Reload the list (the shipped personas alone, and the reason, when presets.json is unreadable)."""
        try:
            personas = load_personas(self.path)
            self.error.clear()
        except UserError as e:
            personas = list(SHIPPED)
            self.error.setText(str(e))
        self.list.blockSignals(True)
        self.list.clear()
        for p in personas:
            item = QListWidgetItem(f"{p.name} (shipped)" if p.shipped else p.name)
            item.setData(Qt.ItemDataRole.UserRole, p)
            self.list.addItem(item)
            if select is not None and p.name.casefold() == select.casefold():
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)
        self._on_selected(self.list.currentItem())

    def _on_selected(self, item: QListWidgetItem | None) -> None:
        persona: Persona | None = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        self._show(persona)

    def _show(self, persona: Persona | None) -> None:
        """The fields for `persona` (None: empty, for a new one); a shipped persona's are read-only."""
        self.editing = persona if persona is not None and not persona.shipped else None
        temperature = dict(persona.sampling).get("temperature") if persona is not None else None
        self.name.setText(persona.name if persona is not None else "")
        self.system.setPlainText(persona.system if persona is not None else "")
        self.temperature.setText("" if temperature is None else f"{temperature:g}")
        shipped = persona is not None and persona.shipped
        for field in (self.name, self.system, self.temperature):
            field.setReadOnly(shipped)
        self.save_button.setEnabled(not shipped)
        self.delete_button.setEnabled(self.editing is not None)

    def new(self) -> None:
        self.list.clearSelection()
        self.list.setCurrentItem(None)
        self._show(None)
        self.name.setFocus()

    def save(self) -> None:
        """Save the fields as the user's persona (renaming the one edited); a bad value is the error line."""
        old = self.editing
        try:
            name = self.name.text().strip()
            if not name:
                raise UserError("give the persona a name")
            # The persona's other sampling values (set in presets.json by hand) are kept.
            sampling = {k: v for k, v in (old.sampling if old is not None else ()) if k != "temperature"}
            temperature = parse_temperature(self.temperature.text())
            if temperature is not None:
                sampling["temperature"] = temperature
            persona = Persona(name, self.system.toPlainText().strip(), tuple(sampling.items()))
            save_persona(persona, self.path)
            if old is not None and old.name.casefold() != name.casefold():
                delete_persona(old.name, self.path)  # renamed: saved under the new name first, so never lost
        except UserError as e:
            self.error.setText(str(e))
            return
        self.refresh(select=name)
        self.personas_changed.emit()

    def delete(self) -> None:
        if self.editing is None:
            return
        try:
            delete_persona(self.editing.name, self.path)
        except UserError as e:
            self.error.setText(str(e))
            return
        self.refresh()
        self.personas_changed.emit()
