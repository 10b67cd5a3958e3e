"""The settings dialog: every AppSettings field with a plain-language label, in two tabs (#51): Basic (the
speed mode, the longest answer, the look, the local API server) and Advanced (the router, drafting,
sampling, memory and placement). "Speed mode" is the runtime's speed preset; a chat's system prompt
and sampling are its "Persona", so no word means two things."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.settings import THEMES, AppSettings
from runtime.errors import UserError
from runtime.plan.placement import PLACEMENT_MODES
from runtime.plan.policy import PRESET_NAMES
from runtime.plan.router import LEVELS as ROUTER_LEVELS

# Words for the runtime's own choices; the choices themselves come from the runtime (one source).
PRESET_WORDS = {
    "auto": "Automatic: as fast as a plain 4-bit copy here, in the most precise words that allows (measured once)",
    "exact": "Exact: always the full model's own answer, sooner wherever a draft pays",
    "balanced": "Balanced: the 8-bit copy's answer, sooner wherever a draft pays",
    "fast": "Fast: the 4-bit copy's answer, sooner wherever your own text or the format can be reused",
    "paper": "Paper: simple questions answered by a compressed copy (the research paper's choice)",
}
PRESETS = tuple((name, PRESET_WORDS[name]) for name in PRESET_NAMES)
LEVELS = (("auto", "Automatic (router)"), *((level, level.capitalize()) for level in ROUTER_LEVELS))
PLACEMENT_WORDS = {
    "auto": "Automatic",
    "cpu": "CPU only",
    "gpu": "GPU (as much as fits)",
    "remote": "Workers (the parent there, the draft here)",
}
PLACEMENTS = tuple((mode, PLACEMENT_WORDS[mode]) for mode in PLACEMENT_MODES)
THEME_WORDS = {"system": "Follow the system", "light": "Light", "dark": "Dark"}
THEME_CHOICES = tuple((theme, THEME_WORDS[theme]) for theme in THEMES)


def _combo(choices: tuple[tuple[str, str], ...], current: str, name: str) -> QComboBox:
    box = QComboBox()
    box.setAccessibleName(name)
    for value, text in choices:
        box.addItem(text, value)
    box.setCurrentIndex(max(0, box.findData(current)))
    return box


class SettingsDialog(QDialog):
    def __init__(self, settings: AppSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.base = settings
        s = settings
        self.preset = _combo(PRESETS, s.preset, "Speed mode")
        self.preset.setToolTip("How answers are made fast. Technical: the runtime's preset (auto, exact, balanced, "
                               "fast, paper), which picks the tier that answers and the drafts it may use")
        self.level = _combo(LEVELS, s.level, "Complexity level")
        self.spec = QCheckBox("Speculative decoding (a cheap draft proposes, the parent verifies)")
        self.spec.setChecked(s.speculation)
        self.draft_length = QSpinBox(minimum=0, maximum=16, value=s.draft_length)
        self.draft_length.setSpecialValueText("Automatic")
        self.draft_length.setToolTip("Tokens the draft proposes each cycle; Automatic: only where it pays")
        self.draft_model = QComboBox()
        self.draft_model.addItem("None", "")
        for name in _converted_models():
            self.draft_model.addItem(name, name)
        self.draft_model.setCurrentIndex(max(0, self.draft_model.findData(s.draft_model)))
        self.draft_model.setToolTip(
            "A smaller model of the same family that proposes tokens for the model you chat with (its vocabulary "
            "must be the same, token for token); used only where it pays, the answer stays the same"
        )
        self.model_sampling = QCheckBox("Sample as the model recommends (else llama.cpp's defaults)")
        self.model_sampling.setToolTip("Untick to set temperature, top-p and top-k yourself; temperature 0 is greedy")
        self.model_sampling.setChecked(s.model_sampling)
        self.temperature = QDoubleSpinBox(decimals=2, minimum=0.0, maximum=2.0, singleStep=0.1, value=s.temperature)
        self.temperature.setToolTip("0 always picks the most likely token")
        self.top_p = QDoubleSpinBox(decimals=2, minimum=0.01, maximum=1.0, singleStep=0.05, value=s.top_p)
        self.top_k = QSpinBox(minimum=0, maximum=1000, value=s.top_k)
        for box in (self.temperature, self.top_p, self.top_k):
            box.setEnabled(not s.model_sampling)
            self.model_sampling.toggled.connect(lambda on, box=box: box.setEnabled(not on))
        self.max_tokens = QSpinBox(minimum=1, maximum=32768, value=s.max_tokens)
        self.thinking = QCheckBox("Let thinking models think before they answer")
        self.thinking.setToolTip("Qwen3, SmolLM3, DeepSeek-R1, Phi-4-reasoning: their thoughts show above the answer")
        self.thinking.setChecked(s.thinking)
        self.thinking_budget = QSpinBox(minimum=0, maximum=32768, value=s.thinking_budget)
        self.thinking_budget.setSpecialValueText("Automatic")
        self.thinking_budget.setToolTip("Tokens of thought before the answer begins (automatic: 3/4 of its room)")
        self.thinking_budget.setEnabled(s.thinking)
        self.thinking.toggled.connect(self.thinking_budget.setEnabled)
        self.n_ctx = QSpinBox(minimum=256, maximum=262144, singleStep=256, value=s.n_ctx)
        self.placement = _combo(PLACEMENTS, s.placement, "Placement")
        self.max_memory = QDoubleSpinBox(decimals=1, minimum=0.0, maximum=4096.0, singleStep=1.0, value=s.max_memory_gb)
        self.max_memory.setSpecialValueText("What is free")
        self.max_memory.setSuffix(" GB")
        self.max_memory.setToolTip("Memory the model may use; the most precise tier that fits answers")
        self.workers = QLineEdit(s.workers)
        self.workers.setPlaceholderText("none (HOST:PORT, HOST:PORT…)")
        self.workers.setToolTip(
            "Computers running `specquant worker` that may run the model's layers; only on a network you trust"
        )
        self.theme = _combo(THEME_CHOICES, s.theme, "Theme")
        self.highlight = QCheckBox("Highlight tokens that came from the draft")
        self.highlight.setChecked(s.highlight_draft)
        self.api_server = QCheckBox("Local API server (OpenAI-compatible, for other apps on this computer)")
        self.api_server.setToolTip("Editors, note apps and scripts can use this model; they queue with your messages")
        self.api_server.setChecked(s.api_server)
        self.api_port = QSpinBox(minimum=1, maximum=65535, value=s.api_port)
        self.api_port.setEnabled(s.api_server)
        self.api_server.toggled.connect(self.api_port.setEnabled)
        self.saved_prompts = QLabel()
        self.saved_prompts.setToolTip("Long system prompts and documents saved after an answer, so the next chat "
                                      "starts sooner; they hold whole chats and only you can read them")
        self.clear_prompts = QPushButton("C&lear")
        self.clear_prompts.setToolTip("Remove the saved prompts (as `specquant cache clear`)")
        self.clear_prompts.clicked.connect(self._clear_prompts)
        self._show_prompts()
        self.error = QLabel("")
        self.error.setStyleSheet("color: #b3261e;")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)

        basic_page, advanced_page = QWidget(), QWidget()
        basic, form = QFormLayout(basic_page), QFormLayout(advanced_page)
        basic.addRow("&Speed mode:", self.preset)
        basic.addRow("Longest a&nswer (tokens):", self.max_tokens)
        basic.addRow("T&heme:", self.theme)
        basic.addRow("", self.api_server)
        basic.addRow("API p&ort:", self.api_port)
        form.addRow("&Level:", self.level)
        form.addRow("", self.spec)
        form.addRow("&Draft length:", self.draft_length)
        form.addRow("Draft m&odel:", self.draft_model)
        form.addRow("", self.model_sampling)
        form.addRow("&Temperature:", self.temperature)
        form.addRow("Top-&p:", self.top_p)
        form.addRow("Top-&k:", self.top_k)
        form.addRow("", self.thinking)
        form.addRow("T&hinking budget:", self.thinking_budget)
        form.addRow("&Context size:", self.n_ctx)
        form.addRow("Placem&ent:", self.placement)
        form.addRow("&Memory budget:", self.max_memory)
        form.addRow("&Workers:", self.workers)
        form.addRow("", self.highlight)
        saved = QHBoxLayout()
        saved.addWidget(self.saved_prompts, 1)
        saved.addWidget(self.clear_prompts)
        form.addRow("Saved prompts:", saved)
        self.tabs = QTabWidget()
        self.tabs.addTab(basic_page, "&Basic")
        self.tabs.addTab(advanced_page, "&Advanced")
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def _show_prompts(self) -> None:
        from runtime.engine.prompt_store import default_folder, store_usage

        files, size = store_usage()
        self.saved_prompts.setText(f"{files} ({size / 1e6:.0f} MB) in {default_folder()}")
        self.clear_prompts.setEnabled(files > 0)

    def _clear_prompts(self) -> None:
        import filelock

        from runtime.engine.prompt_store import clear

        try:
            clear()
        except (OSError, filelock.Timeout) as e:
            self.error.setText(f"cannot clear the saved prompts: {e}")
        self._show_prompts()

    def value(self) -> AppSettings:
        return replace(
            self.base,
            preset=self.preset.currentData(),
            level=self.level.currentData(),
            speculation=self.spec.isChecked(),
            draft_length=self.draft_length.value(),
            draft_model=self.draft_model.currentData(),
            model_sampling=self.model_sampling.isChecked(),
            temperature=self.temperature.value(),
            top_p=self.top_p.value(),
            top_k=self.top_k.value(),
            max_tokens=self.max_tokens.value(),
            thinking=self.thinking.isChecked(),
            thinking_budget=self.thinking_budget.value(),
            n_ctx=self.n_ctx.value(),
            placement=self.placement.currentData(),
            max_memory_gb=self.max_memory.value(),
            workers=self.workers.text().strip(),
            theme=self.theme.currentData(),
            highlight_draft=self.highlight.isChecked(),
            api_server=self.api_server.isChecked(),
            api_port=self.api_port.value(),
        )

    def accept(self) -> None:
        try:
            self.value().check()
        except UserError as e:
            self.error.setText(str(e))
            return
        super().accept()


def _converted_models() -> list[str]:
    """The complete models in the cache: the draft model's choices."""
    from runtime.models.cache import list_models

    return [m.name for m in list_models() if m.complete]
