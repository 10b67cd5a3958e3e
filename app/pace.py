"""How often streamed Chunks reach the GUI thread.

On a 2-core laptop every millisecond the GUI thread spends is taken from one of llama.cpp's two compute
threads, and the other waits for it at ggml's barrier: a queued signal and a redraw per verify cycle cost the
demo ~7% of its speed. So app.turn_runner hands Chunks over in batches, spaced by what drawing them costs.
"""

from __future__ import annotations

import time

DELIVER_MS = (66, 250)  # the range of the time between two batches of streamed Chunks (each is one redraw)
GUI_SHARE = 0.02  # while an answer streams, the GUI thread may spend this share of its time; batches space out


class Pace:
    """How long the GUI waits between two batches: long enough that the GUI thread's CPU time (drawing text,
    chart and status bar, a cost that varies with the machine, the answer's length and the window's size)
    stays near GUI_SHARE of the time, within DELIVER_MS. Measured with the GUI thread's own CPU clock."""

    def __init__(self) -> None:
        self.interval_ms = float(DELIVER_MS[0])
        self.share: float | None = None  # smoothed CPU share of the GUI thread while answers stream
        self._mark: tuple[float, float] | None = None

    def restart(self) -> None:
        """An answer begins: the time since the last one was idle and says nothing."""
        self._mark = (time.perf_counter(), time.thread_time())

    def tick(self) -> int:
        """On the GUI thread, at each batch: the interval until the next one, in ms."""
        now = (time.perf_counter(), time.thread_time())
        if self._mark is not None and now[0] - self._mark[0] > 0.01:  # not the first batch, flushed at once
            share = (now[1] - self._mark[1]) / (now[0] - self._mark[0])
            # Smoothed: Windows' thread clock ticks in 15.6 ms steps, so one interval alone reads 0 or a lot.
            self.share = share if self.share is None else 0.7 * self.share + 0.3 * share
            # The cost of a batch is about constant, so the share falls as 1/interval: one step converges.
            wanted = self.interval_ms * self.share / GUI_SHARE
            self.interval_ms = min(max(wanted, DELIVER_MS[0]), DELIVER_MS[1])
        self._mark = now
        return round(self.interval_ms)
