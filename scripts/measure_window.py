"""Measure what the window costs: decode speed in the window against the Engine alone (interleaved pairs, in
one process, median ratio), and the time from Stop to the worker's last chunk. The window is shown, with its
live speed chart on unless `--chart off`, so what it paints per cycle is part of what is measured. Greedy
unless `--sampled`: then the window and the Engine write the same answer, and the ratio is the window's cost
alone, not the spread of sampled answers' lengths and speeds.

    QT_QPA_PLATFORM=offscreen python scripts/measure_window.py [--pairs 5] [--model NAME] [--chart on|off] [--sampled]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
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
    from PySide6.QtCore import QSettings, Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from app.settings import AppSettings, save_settings
    from app.store import Store
    from app.window import MainWindow
    from runtime.engine import Engine

    app = QApplication([])
    folder = Path(tempfile.mkdtemp())
    qs = QSettings(str(folder / "s.ini"), QSettings.Format.IniFormat)
    greedy = {} if args.sampled else {"model_sampling": False, "temperature": 0.0}
    save_settings(AppSettings(max_tokens=120, model=args.model, speed_chart=args.chart == "on", **greedy), qs)
    w = MainWindow(Store(folder / "c.db"), qs)
    w.show()  # a hidden window paints nothing: neither the streamed text nor the chart would cost anything
    engine = Engine(w.model, w.settings.engine_settings())  # the same model and settings, without the window
    window_speed: list[float] = []
    direct_speed: list[float] = []
    stops: list[float] = []
    state: dict[str, float] = {}

    def direct() -> float:
        return engine.chat([{"role": "user", "content": PROMPT}], w.settings.chat_options()).last.stats.tok_per_s

    def ask(text: str) -> None:
        w.new_conversation()
        w.input.setPlainText(text)
        w.send()

    def on_chunk(chunk) -> None:  # GUI thread
        if len(window_speed) == args.pairs and "stop" not in state and chunk.stats.tokens >= 20:
            state["stop"] = time.perf_counter()
            w.stop()

    def on_worker_done(*_) -> None:  # worker thread, at the moment the final chunk is emitted
        if "stop" in state:
            stops.append((time.perf_counter() - state.pop("stop")) * 1000)

    def on_answer(_text: str) -> None:
        if len(window_speed) < args.pairs:
            window_speed.append(float(w.speed.text().split()[0]))
            direct_speed.append(direct())  # interleaved: window, engine, window, engine, ...
        if len(window_speed) < args.pairs:
            QTimer.singleShot(10, lambda: ask(PROMPT))
        elif len(stops) < args.pairs:
            QTimer.singleShot(10, lambda: ask(LONG))
        else:
            app.quit()

    w.chunk_shown.connect(on_chunk)
    w.worker.finished.connect(on_worker_done, Qt.ConnectionType.DirectConnection)
    w.answer_finished.connect(on_answer)
    QTimer.singleShot(0, lambda: ask(PROMPT))
    app.exec()
    ratios = [a / b for a, b in zip(window_speed, direct_speed, strict=True)]
    print(f"window tok/s {window_speed}; engine alone {[round(x, 1) for x in direct_speed]}")
    print(f"median ratio window/engine: {statistics.median(ratios):.3f} over {len(ratios)} interleaved pairs")
    print(f"Stop -> last chunk: median {statistics.median(stops):.0f} ms, max {max(stops):.0f} ms over {len(stops)}")
    chart = w.speed_chart
    print(f"speed chart {args.chart}: {chart.paints} paints, {chart.cycles} cycles in the last answer")
    w.close()
    engine.close()


if __name__ == "__main__":
    main()
