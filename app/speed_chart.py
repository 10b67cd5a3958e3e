"""A sparkline of the answer's speed, one point per cycle, painted with QPainter (no charting library).

The line is tokens per second over the last few cycles; under it, a tick per cycle whose accepted draft
tokens it carries, as tall as their count and coloured by the kind of source they came from (the quantized
tier, n-gram lookup, any other the registry in runtime/decode/drafts offers); a dashed line marks the
parent's plain speed. It must cost the answer nothing measurable:
adding a point is O(1), repaints are coalesced to at most ~15 a second and only while the chart is visible,
and the points are bounded (pairs merge beyond MAX_POINTS), so a paint is O(MAX_POINTS).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from PySide6.QtCore import QLineF, QPointF, QSize, Qt, QTimer
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget

from runtime.decode.drafts import offered
from runtime.engine.answer import Chunk

MAX_POINTS = 300  # beyond this, neighbouring points merge in pairs
REPAINT_MS = 66  # at most ~15 repaints a second, however fast cycles come (app.turn_runner paces the batches)
RATE_CYCLES = 6  # the line's speed is over the last few cycles: one cycle alone is all spikes
# Each kind of draft source's tick colour, as (name in the tooltip, colour); ticks stack in this order. A kind
# not listed takes the next spare colour, so a new source needs no change here.
COLOURS = {
    "tier": ("amber", QColor("#e09b00")),  # like the transcript's draft highlight
    "ngram": ("green", QColor("#2e9e5b")),
}
SPARE = (("blue", QColor("#3d7fd6")), ("purple", QColor("#9b59b6")), ("red", QColor("#d64541")))


def _palette() -> list[tuple[str, str, QColor]]:
    """(kind, colour name, colour) for every offered kind, the listed ones first."""
    kinds = sorted(offered(), key=lambda k: list(COLOURS).index(k.name) if k.name in COLOURS else len(COLOURS))
    spare = iter(SPARE * len(kinds))
    return [(k.name, *(COLOURS.get(k.name) or next(spare))) for k in kinds]


PALETTE = _palette()


@dataclass
class Point:
    """One cycle (or, once merged, a run of cycles)."""

    t: float  # seconds since the answer began, at the cycle's end
    rate: float  # tokens per second over the last RATE_CYCLES cycles
    accepted: dict[str, int] = field(default_factory=dict)  # per kind of source: accepted tokens it proposed

    def __getattr__(self, kind: str) -> int:
        """A kind's accepted tokens by its name (`p.tier`, `p.ngram`)."""
        if kind in {k.name for k in offered()}:
            return self.__dict__.get("accepted", {}).get(kind, 0)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {kind!r}")


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
        self._last: dict[str, int] = {}  # cumulative accepted per kind at the previous cycle
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
            self.add(s.elapsed_s, s.tokens, {k.name: s.accepted_by(k.name) for k in offered()})
        else:
            self._schedule()

    def add(self, t: float, tokens: int, accepted: Mapping[str, int]) -> None:
        """A cycle that ended `t` seconds into the answer, with the answer's cumulative counts then (accepted
        draft tokens per kind of source)."""
        t0, n0 = self._recent[0]
        rate = (tokens - n0) / (t - t0) if t > t0 else 0.0
        self._recent.append((t, tokens))
        new = {kind: n - self._last.get(kind, 0) for kind, n in accepted.items()}
        self._last = dict(accepted)
        self.points.append(Point(t, rate, {kind: n for kind, n in new.items() if n}))
        self.cycles += 1
        if len(self.points) > MAX_POINTS:
            self._merge()
        self._schedule()

    def _merge(self) -> None:
        """Halve the points: each pair becomes one (its later time, mean speed, summed accepted tokens)."""
        p = self.points
        pairs = zip(p[0::2], p[1::2], strict=False)  # an odd last point stays as it is
        merged = [Point(b.t, (a.rate + b.rate) / 2, _sum(a.accepted, b.accepted)) for a, b in pairs]
        if len(p) % 2:
            merged.append(p[-1])
        self.points = merged

    def _schedule(self) -> None:
        # update() alone would repaint on every cycle the event loop delivers; the timer coalesces them.
        if self.isVisible() and not self._timer.isActive():
            self._timer.start()

    def _tip(self, parent: str, draft: str | None) -> str:
        kinds = {k.name: k for k in offered()}
        # A kind that decodes a model is the chosen draft tier: it is named.
        label = {n: draft.upper() if draft and k.decodes else k.label for n, k in kinds.items()}
        ticks = ", ".join(f"{colour} from {label[kind]}" for kind, colour, _ in PALETTE)
        return (
            "Tokens per second over this answer, one point per cycle. Ticks: accepted draft tokens per cycle, "
            f"{ticks}. Dashed: plain {parent.upper()} speed."
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
        most = max(max(sum(p.accepted.values()) for p in points), 1)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.translate(1.0, 1.0)
        tick_h = h * 0.45  # ticks keep to the lower part, under the line mostly

        def x(t: float) -> float:
            return w * t / t_max

        below = [0] * len(points)  # each kind's tick stacks on those before it in PALETTE
        for kind, _, colour in PALETTE:
            lines = []
            for i, p in enumerate(points):
                n = p.accepted.get(kind, 0)
                if n:
                    base = h - tick_h * below[i] / most
                    lines.append(QLineF(x(p.t), base, x(p.t), base - tick_h * n / most))
                    below[i] += n
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


def _sum(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {kind: a.get(kind, 0) + b.get(kind, 0) for kind in {**a, **b}}
