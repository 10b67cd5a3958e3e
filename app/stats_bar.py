"""The status bar: on the left the plain line (what the window waits for, or what a person cares about in an
answer: "Exact answer · 2.1× faster than without speculation · 12 words/s", or the cause of a slowdown), and
behind the Details toggle the technical facts (level badge, precision pair, speed, acceptance, speed-up over
the plain parent, placement); then the chart, the model and the local API server's URL. The window calls
`show_answer` once per delivered batch of Chunks (the chart takes every Chunk itself); the words come from
runtime.engine.summary's one formatter and app.plain_words (#51)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QStatusBar, QToolButton

from app.plain_words import answer_kind, details_line, plain_line, slowdown_text
from app.speed_chart import SpeedChart
from app.widgets import ElidedLabel, LevelBadge
from runtime.engine.answer import Chunk
from runtime.engine.summary import acceptance_text, answer_facts, cap_text, sources_text, speed_text, speedup_text


def _label(name: str, tip: str = "") -> QLabel:
    label = QLabel("")
    label.setAccessibleName(name)
    if tip:
        label.setToolTip(tip)
    return label


class StatsBar:
    """The widgets of a QStatusBar: the plain line stretched on the left, the rest on the right."""

    def __init__(self, bar: QStatusBar) -> None:
        # A narrow window shortens the line with "…", not the figures; its tooltip and the line under the answer
        # hold it whole.
        self.plain = ElidedLabel("")
        self.plain.setAccessibleName("Answer summary")
        self.details_button = QToolButton()
        self.details_button.setText("Details")
        self.details_button.setCheckable(True)
        self.details_button.setAccessibleName("Show the technical details")
        self.details_button.setToolTip("Show the technical details: the precisions, acceptance, speed-up and placement")
        self.details_button.toggled.connect(self.show_details)
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
        self.details = (self.badge, self.precision, self.speed, self.acceptance, self.speedup, self.placement)
        bar.addWidget(self.plain, 1)  # a stretch on the left, where Qt would flash a message (none is shown)
        for w in (self.details_button, *self.details, self.chart, self.model_label, self.api_label):
            bar.addPermanentWidget(w)
        self.show_details(False)

    def show_details(self, on: bool) -> None:
        """The technical facts beside the plain line, or only in its tooltip."""
        for w in self.details:
            w.setVisible(on)
        if self.details_button.isChecked() != on:
            self.details_button.setChecked(on)

    def show_wait(self, text: str) -> None:
        """What the window waits for ("Loading the model…"), in the plain line until the answer's first words."""
        self.plain.setText(text)
        self.plain.setToolTip(text)

    def clear(self) -> None:
        """No answer's figures: a new or switched chat must not show the previous chat's."""
        self.badge.set_level("", "")
        for w in (self.plain, *self.details[1:]):
            w.setText("")
            w.setToolTip("")
        self.chart.reset()

    def show_answer(self, chunk: Chunk, model: str, text: str = "") -> None:
        """The answer's facts; `text` (the answer so far) gives the speed in words."""
        facts = answer_facts(chunk)
        self.show_plain(facts, text)
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

    def show_plain(self, facts: dict[str, Any], text: str) -> None:
        kind, why = answer_kind(facts)
        self.plain.setText(plain_line(facts, text))
        slow = slowdown_text(facts)
        tip = [why, f"{slow}: {facts['speedup_note']}." if slow else "", f"Details: {details_line(facts)}"]
        self.plain.setToolTip("\n".join(t for t in tip if t) if kind else "")

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
            self.speedup.setText(slowdown_text(facts) or "no speed-up claimed")
            self.speedup.setToolTip(f"No speed-up shown: {facts['speedup_note']}" + (f". {cap}" if cap else ""))
        else:  # nothing drafted yet, or no plain step ever timed: claim nothing
            self.speedup.setText("")
            self.speedup.setToolTip("")

    def show_model(self, model: str) -> None:
        self.model_label.setText(model)

    def show_api(self, url: str | None) -> None:
        self.api_label.setText(f"API: {url}" if url else "")
        self.api_label.setVisible(bool(url))
