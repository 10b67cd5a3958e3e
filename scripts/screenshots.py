"""Screenshots of the real window with a short conversation: Markdown, a code block and tinted draft spans.

    QT_QPA_PLATFORM=offscreen python scripts/screenshots.py [--out docs] [--scale 2] [--theme light dark]

Writes window-<theme>.png (window-<theme>@<scale>x.png when scaled) at 1280x800 logical pixels. The window
runs on a temporary history and settings folder; the demo model is converted into a temporary cache when
$SPECQUANT_CACHE_DIR does not already hold it.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUESTION = "How do I read a **CSV file** in Python and sum one column?"
ANSWER = """Use the standard library's `csv` module:

1. Open the file with `newline=""`.
2. Read rows as dictionaries with **`csv.DictReader`**.
3. Convert the column to numbers and add them up.

```python
import csv

def column_total(path: str, column: str) -> float:
    # One pass, constant memory: fine for files of any size.
    with open(path, newline="") as f:
        return sum(float(row[column]) for row in csv.DictReader(f))

print(column_total("sales.csv", "amount"))
```

For *very* large files or heavy analysis, `pandas.read_csv` is faster to write."""


def draft_runs(text: str, seed: int = 7) -> list[list[int]]:
    """Plausible accepted-draft runs: about half of the ~4-character tokens, in streaks."""
    from app.transcript_text import draft_mask

    rng = random.Random(seed)
    flags: list[bool] = []
    drafted = False
    for start in range(0, len(text), 4):
        drafted = rng.random() < (0.7 if drafted else 0.4)
        flags += [drafted] * len(text[start : start + 4])
    return draft_mask(flags)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=Path("docs"))
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--theme", nargs="+", default=["light", "dark"], choices=["light", "dark"])
    args = p.parse_args()
    sys.path.insert(0, str(REPO))  # run as a file, Python looks for `app` next to it, in scripts/
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if args.scale != 1:
        os.environ["QT_SCALE_FACTOR"] = str(args.scale)  # read when the QApplication is made
    folder = Path(tempfile.mkdtemp(prefix="specquant-shots-"))
    from runtime.models.cache import DEMO_NAME, cache_root

    if not (cache_root() / DEMO_NAME).is_dir():
        from converters.convert import convert

        os.environ["SPECQUANT_CACHE_DIR"] = str(folder / "cache")
        convert("demo", root=folder / "cache")

    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.settings import AppSettings, save_settings
    from app.store import Store
    from app.window import MainWindow

    app = QApplication(sys.argv[:1])
    store = Store(folder / "conversations.sqlite3")
    chat = store.create("Reading a CSV file")
    store.add_message(chat, "user", QUESTION)
    meta = {"level": "low", "pair": "F16 ← Q4_K_M", "tok_per_s": 41.7, "acceptance": 0.68, "tokens": 142}
    store.add_message(chat, "assistant", ANSWER, meta | {"draft_mask": draft_runs(ANSWER), "stop_reason": "stop"})
    store.create("Primary colours")
    store.close()
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.scale == 1 else f"@{args.scale:g}x"
    for theme in args.theme:
        qsettings = QSettings(str(folder / f"settings-{theme}.ini"), QSettings.Format.IniFormat)
        save_settings(AppSettings(theme=theme, highlight_draft=True), qsettings)
        window = MainWindow(Store(folder / "conversations.sqlite3"), qsettings)  # closing it closes the store
        window.resize(1280, 800)
        window.show()
        window.open_conversation(chat)
        window.input.setPlainText("")
        for _ in range(5):  # let layouts settle (the transcript lays out lazily)
            app.processEvents()
        path = args.out / f"window-{theme}{suffix}.png"
        window.grab().save(str(path))
        print(path)
        window.close()
    app.processEvents()


if __name__ == "__main__":
    main()
