"""A sparkline of the answer's speed, one point per cycle, painted with QPainter (no charting library).

The line is tokens per second over the last few cycles; under it, a tick per cycle whose accepted draft
tokens it carries, as tall as their count and coloured by where the draft came from (the quantized tier or
n-gram lookup); a dashed line marks the parent's plain speed. It must cost the answer nothing measurable:
adding a point is O(1), repaints are coalesced to at most ~15 a second and only while the chart is visible,
and the points are bounded (pairs merge beyond MAX_POINTS), so a paint is O(MAX_POINTS).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from PySide6.QtCore import QLineF, QPointF, QSize, Qt, QTimer
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget

from runtime.engine.answer import Chunk

MAX_POINTS = 300  # beyond this, neighbouring points merge in pairs
REPAINT_MS = 66  # at most ~15 repaints a second, however fast cycles come (app.worker paces the batches)
RATE_CYCLES = 6  # the line's speed is over the last few cycles: one cycle alone is all spikes
TIER_COLOUR = QColor("#e09b00")  # amber, like the transcript's draft highlight
NGRAM_COLOUR = QColor("#2e9e5b")  # green


@dataclass
class Point:
    """One cycle (or, once merged, a run of cycles)."""

    t: float  # seconds since the answer began, at the cycle's end
    rate: float  # tokens per second over the last RATE_CYCLES cycles
    tier: int  # accepted tokens the quantized tier proposed
    ngram: int  # accepted tokens n-gram lookup proposed


class SpeedChart(QWidget):
    """The live speed of the answer in flight (or of the last one)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Speed chart")
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REPAINT_MS)
        self._timer.timeout.connect(self.update)
        self.paints = 0  # paint events served (the window's measurement reports it)
        self.reset()

    def reset(self) -> None:
        self.points: list[Point] = []
        self.cycles = 0  # cycles seen this answer (points merge; this does not)
        self.plain_rate: float | None = None  # the parent's plain tokens per second, when measured
        self._recent: deque[tuple[float, int]] = deque(maxlen=RATE_CYCLES + 1)  # (t, tokens) at cycle ends
        self._recent.append((0.0, 0))
        self._last = (0, 0)  # cumulative (tier, ngram) accepted at the previous cycle
        self._schedule()

    def sizeHint(self) -> QSize:
        return QSize(150, max(16, self.fontMetrics().height()))

    # --- data --------------------------------------------------------------------------------------
    def add_chunk(self, chunk: Chunk) -> None:
        """One Chunk of the answer: every Chunk but the last is one cycle (the last only closes the answer)."""
        s = chunk.stats
        if (s.cycles == 1 and not chunk.done) or s.cycles < self.cycles:  # a new answer began
            self.reset()
            self.setToolTip(self._tip(chunk.choice.parent, chunk.choice.draft))
        self.plain_rate = 1.0 / s.plain_step_s if s.plain_step_s else None
        if not chunk.done and s.cycles > self.cycles:
            self.add(s.elapsed_s, s.tokens, s.tier_accepted, s.ngram_accepted)
        else:
            self._schedule()

    def add(self, t: float, tokens: int, tier_accepted: int, ngram_accepted: int) -> None:
        """A cycle that ended `t` seconds into the answer, with the answer's cumulative counts then."""
        t0, n0 = self._recent[0]
        rate = (tokens - n0) / (t - t0) if t > t0 else 0.0
        self._recent.append((t, tokens))
        tier, ngram = tier_accepted - self._last[0], ngram_accepted - self._last[1]
        self._last = (tier_accepted, ngram_accepted)
        self.points.append(Point(t, rate, tier, ngram))
        self.cycles += 1
        if len(self.points) > MAX_POINTS:
            self._merge()
        self._schedule()

    def _merge(self) -> None:
        """Halve the points: each pair becomes one (its later time, mean speed, summed accepted tokens)."""
        p = self.points
        pairs = zip(p[0::2], p[1::2], strict=False)  # an odd last point stays as it is
        merged = [Point(b.t, (a.rate + b.rate) / 2, a.tier + b.tier, a.ngram + b.ngram) for a, b in pairs]
        if len(p) % 2:
            merged.append(p[-1])
        self.points = merged

    def _schedule(self) -> None:
        # update() alone would repaint on every cycle the event loop delivers; the timer coalesces them.
        if self.isVisible() and not self._timer.isActive():
            self._timer.start()

    def _tip(self, parent: str, draft: str | None) -> str:
        tier = draft.upper() if draft else "the quantized tier"
        return (
            "Tokens per second over this answer, one point per cycle. Ticks: accepted draft tokens per cycle, "
            f"amber from {tier}, green from n-gram lookup. Dashed: plain {parent.upper()} speed."
        )

    # --- painting ----------------------------------------------------------------------------------
    def paintEvent(self, event: QPaintEvent) -> None:
        self.paints += 1
        points = self.points
        if not points:
            return
        w, h = self.width() - 2.0, self.height() - 2.0
        t_max = points[-1].t or 1.0
        top = max(max(p.rate for p in points), self.plain_rate or 0.0) or 1.0
        most = max(max(p.tier + p.ngram for p in points), 1)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.translate(1.0, 1.0)
        tick_h = h * 0.45  # ticks keep to the lower part, under the line mostly

        def x(t: float) -> float:
            return w * t / t_max

        for colour, part in ((TIER_COLOUR, "tier"), (NGRAM_COLOUR, "ngram")):
            lines = []
            for p in points:
                n = p.tier if part == "tier" else p.ngram
                if n:
                    base = h - (tick_h * p.tier / most if part == "ngram" else 0.0)  # n-gram stacks on the tier
                    lines.append(QLineF(x(p.t), base, x(p.t), base - tick_h * n / most))
            if lines:
                painter.setPen(QPen(colour, 2.0))
                painter.drawLines(lines)
        text = self.palette().color(QPalette.ColorRole.WindowText)
        if self.plain_rate:
            pen = QPen(text, 1.0, Qt.PenStyle.DashLine)
            pen.setColor(QColor(text.red(), text.green(), text.blue(), 110))
            painter.setPen(pen)
            y = h - h * self.plain_rate / top
            painter.drawLine(QLineF(0.0, y, w, y))
        painter.setPen(QPen(self.palette().color(QPalette.ColorRole.Highlight), 1.5))
        painter.drawPolyline(QPolygonF([QPointF(x(p.t), h - h * p.rate / top) for p in points]))
        painter.end()
