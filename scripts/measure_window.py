"""Measure what the window costs: decode speed in the window against the engine alone (interleaved pairs, in
one process, median ratio), the GUI thread's CPU time over each answer, and the time from Stop to the engine's
last chunk and to the window showing the stopped answer. The engine alone is the window's own Engine on its
own engine thread, fed the same request without the window: two threads that compute with ggml's OpenMP in one
process halve each other's speed, so a second Engine on the GUI thread would measure that, not the window. The
window is shown, with its live speed chart on unless `--chart off`, so what it paints per cycle is part of what
is measured. Greedy unless `--sampled`: then the window and the engine write the same answer, and the ratio is
the window's cost alone, not the spread of sampled answers' lengths and speeds.

    QT_QPA_PLATFORM=offscreen python scripts/measure_window.py [--pairs 5] [--model NAME] [--chart on|off] [--sampled]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROMPT = "Explain in two sentences why the sky is blue."
LONG = "Write a very long story about a dragon who learns to bake bread, with many chapters."


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--model", default="")
    p.add_argument("--chart", choices=("on", "off"), default="on", help="the status bar's live speed chart")
    p.add_argument("--sampled", action="store_true", help="the model's recommended sampling instead of greedy")
    args = p.parse_args()
    sys.path.insert(0, str(REPO))  # run as a file, Python looks for `app` next to it, in scripts/
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from app.settings import AppSettings, save_settings
    from app.store import Store
    from app.window import MainWindow
    from runtime.engine.thread import Failure, Job

    app = QApplication([])
    folder = Path(tempfile.mkdtemp())
    qs = QSettings(str(folder / "s.ini"), QSettings.Format.IniFormat)
    greedy = {} if args.sampled else {"model_sampling": False, "temperature": 0.0}
    save_settings(AppSettings(max_tokens=120, model=args.model, speed_chart=args.chart == "on", **greedy), qs)
    w = MainWindow(Store(folder / "c.db"), qs)
    w.show()  # a hidden window paints nothing: neither the streamed text nor the chart would cost anything
    window_speed: list[float] = []
    direct_speed: list[float] = []
    stops: list[float] = []  # Stops timed (each also in `shown`)
    shown: list[float] = []  # Stop → the window shows the stopped answer (stored, redrawn)
    gui_cpu: list[float] = []  # the GUI thread's CPU time over each answer's wall time
    state: dict[str, float] = {}

    def direct() -> float:
        """The same request on the window's engine thread, without the window (the GUI thread waits)."""
        done = threading.Event()
        last = []

        def sink(event) -> None:  # engine thread: Status, Chunk or Failure
            if isinstance(event, Failure) or getattr(event, "done", False):
                last.append(event)
                done.set()

        messages = [{"role": "user", "content": PROMPT}]
        w.runner.submit(Job(w.model, w.settings.engine_settings(), messages, w.settings.chat_options(), sink=sink))
        done.wait()
        if isinstance(last[-1], Failure):
            raise SystemExit(f"measure_window: the engine failed: {last[-1].reason}")
        return last[-1].stats.tok_per_s

    def ask(text: str) -> None:
        state["cpu0"], state["t0"] = time.thread_time(), time.perf_counter()  # the GUI thread's clocks
        w.new_conversation()
        w.input.setPlainText(text)
        w.send()

    def on_chunk(chunk) -> None:  # GUI thread
        if len(window_speed) == args.pairs and "stop" not in state and chunk.stats.tokens >= 20:
            state["stop"] = time.perf_counter()
            w.stop()

    def on_answer(_text: str) -> None:
        if "stop" in state:  # the turn runs on its own thread (app.turn_runner): timed when the GUI shows it
            stops.append((time.perf_counter() - state["stop"]) * 1000)
            shown.append((time.perf_counter() - state.pop("stop")) * 1000)
        if len(window_speed) < args.pairs:
            gui_cpu.append((time.thread_time() - state["cpu0"]) / (time.perf_counter() - state["t0"]))
            window_speed.append(float(w.speed.text().split()[0]))
            direct_speed.append(direct())  # interleaved: window, engine, window, engine, ...
        if len(window_speed) < args.pairs:
            QTimer.singleShot(10, lambda: ask(PROMPT))
        elif len(stops) < args.pairs:
            QTimer.singleShot(10, lambda: ask(LONG))
        else:
            app.quit()

    w.chunk_shown.connect(on_chunk)
    w.answer_finished.connect(on_answer)
    QTimer.singleShot(0, lambda: ask(PROMPT))
    app.exec()
    ratios = [a / b for a, b in zip(window_speed, direct_speed, strict=True)]
    print(f"window tok/s {window_speed}; engine alone {[round(x, 1) for x in direct_speed]}")
    print(f"median ratio window/engine: {statistics.median(ratios):.3f} over {len(ratios)} interleaved pairs")
    print(f"GUI thread CPU over answer time: median {statistics.median(gui_cpu):.1%}")
    print(f"Stop -> answer shown: median {statistics.median(shown):.0f} ms, max {max(shown):.0f} ms")
    chart = w.speed_chart
    print(f"speed chart {args.chart}: {chart.paints} paints, {chart.cycles} cycles in the last answer")
    w.close()


if __name__ == "__main__":
    main()
