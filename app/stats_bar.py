"""The status bar's answer facts: level badge, precision pair, speed, acceptance, placement, model, and the
local API server's URL. The window calls `show_answer` once per delivered batch of Chunks (the chart takes
every Chunk itself); the words come from runtime.engine.summary's one formatter."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QStatusBar

from app.speed_chart import SpeedChart
from app.widgets import LevelBadge
from runtime.engine.answer import Chunk
from runtime.engine.summary import acceptance_text, answer_facts, cap_text, sources_text, speed_text, speedup_text


def _label(name: str, tip: str = "") -> QLabel:
    label = QLabel("")
    label.setAccessibleName(name)
    if tip:
        label.setToolTip(tip)
    return label


class StatsBar:
    """Permanent widgets of a QStatusBar (they stay on the right; messages show on the left)."""

    def __init__(self, bar: QStatusBar) -> None:
        self.badge = LevelBadge()
        self.precision = _label("Precision pair", "The parent that answers ← the draft that proposes tokens")
        self.speed = _label("Tokens per second")
        self.acceptance = _label("Draft acceptance", "Share of drafted tokens the parent accepted")
        self.speedup = _label("Speed-up over plain decoding")
        self.chart = SpeedChart()
        self.placement = _label("Placement")
        self.model_label = _label("Model name")
        self.api_label = _label("Local API server", "Other apps on this computer can use this model: base URL …/v1")
        self.api_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.api_label.hide()
        labels = (self.precision, self.speed, self.chart, self.acceptance, self.speedup, self.placement)
        for w in (self.badge, *labels, self.model_label, self.api_label):
            bar.addPermanentWidget(w)

    def show_answer(self, chunk: Chunk, model: str) -> None:
        facts = answer_facts(chunk)
        self.badge.set_level(facts["level"], facts["reason"])
        self.precision.setText(facts["pair"])
        self.precision.setToolTip(facts["why"])
        self.speed.setText(speed_text(facts))
        self.acceptance.setText(acceptance_text(facts))
        sources = sources_text(facts) or "none accepted yet"
        self.acceptance.setToolTip(
            f"Share of drafted tokens the parent accepted ({sources}); first token after {facts['ttft_s']:.2f} s"
        )
        self.show_speedup(facts)
        self.placement.setText(facts["placement"])
        self.placement.setToolTip(chunk.placement.reason)
        self.model_label.setText(model)

    def show_speedup(self, facts: dict[str, Any]) -> None:
        """How much sooner than plain decoding, with this machine's cap in the tooltip; when nothing is
        claimed, why not (in the tooltip)."""
        text = speedup_text(facts)
        plain = f"plain {str(facts.get('parent') or '').upper()}"
        cap = cap_text(facts)
        if text:
            self.speedup.setText(text)
            self.speedup.setToolTip(
                f"{text}: plain decoding estimated at {facts['plain_s']:.2f} s from the parent's measured step "
                f"({facts['plain_step_s'] * 1000:.0f} ms a token after the first cycle); this answer took "
                f"{facts['elapsed_s']:.2f} s" + (f". {cap}" if cap else "")
            )
        elif facts.get("spec_off"):
            self.speedup.setText(plain)
            self.speedup.setToolTip(f"Nothing was drafted: {facts['spec_off']}" + (f". {cap}" if cap else ""))
        elif facts.get("speedup_note") and facts.get("drafted"):
            self.speedup.setText("")
            self.speedup.setToolTip(f"No speed-up shown: {facts['speedup_note']}" + (f". {cap}" if cap else ""))
        else:  # nothing drafted yet, or no plain step ever timed: claim nothing
            self.speedup.setText("")
            self.speedup.setToolTip("")

    def show_model(self, model: str) -> None:
        self.model_label.setText(model)

    def show_api(self, url: str | None) -> None:
        self.api_label.setText(f"API: {url}" if url else "")
        self.api_label.setVisible(bool(url))
