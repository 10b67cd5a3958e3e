"""What each test costs in work rather than seconds (seconds mean little on a shared CPU): how many times it
loads a model tier, builds an Engine, converts a model, measures quality, starts a llama.cpp child (a quantize
or a load check) and starts `specquant` or another Python child. A plugin, off unless asked for:

    python3 -m pytest -p tests.work_counts tests/test_quality.py -q

prints the totals and the tests that do the most; `SPECQUANT_WORK_COUNTS=FILE` also writes every test's
counts there as JSON (docs/testing.md). Work done by a module or session fixture counts for the test whose
setup started it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

COUNTS: dict[str, Counter[str]] = defaultdict(Counter)
_current = ["(collection)"]


def _count(what: str) -> None:
    COUNTS[_current[0]][what] += 1


def _wrap(owner: Any, name: str, what: Callable[..., str | None]) -> None:
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        label = what(*args, **kwargs)
        if label:
            _count(label)
        return original(*args, **kwargs)

    setattr(owner, name, counted)


def _child_label(self: Any, args: Any, *rest: Any, **kwargs: Any) -> str | None:
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
    if argv and argv[0] == sys.executable:
        if argv[1:3] == ["-m", "commands"]:
            sub = next((a for a in argv[3:] if not a.startswith("-")), "?")
            return f"cli {sub}"
        return "python child"
    return None


def pytest_configure(config: pytest.Config) -> None:
    from converters import convert, quantize
    from runtime.decode.llama_backend import LlamaBackend
    from runtime.engine.engine import Engine
    from runtime.plan import quality

    _wrap(LlamaBackend, "__init__", lambda self, path, *a, **k: f"load {os.path.basename(str(path))}")
    _wrap(Engine, "__init__", lambda *a, **k: "engine")
    _wrap(convert, "_convert_locked", lambda *a, **k: "convert")
    _wrap(quantize, "run_llama_child", lambda task, *a, **k: f"llama child {task}")
    _wrap(quality, "measure", lambda *a, **k: "quality measure")
    _wrap(subprocess.Popen, "__init__", _child_label)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current[0] = item.nodeid
    yield
    _current[0] = "(between tests)"


def summary() -> tuple[Counter[str], list[tuple[str, Counter[str]]]]:
    totals: Counter[str] = Counter()
    for counts in COUNTS.values():
        totals.update(counts)
    heavy = sorted(COUNTS.items(), key=lambda kv: -sum(kv[1].values()))
    return totals, heavy


def pytest_terminal_summary(terminalreporter: Any) -> None:
    totals, heavy = summary()
    write = terminalreporter.write_line
    terminalreporter.section("work counts (tests/work_counts.py)")
    for what, n in sorted(totals.items()):
        write(f"{n:6d}  {what}")
    write("the tests that did the most:")
    for nodeid, counts in heavy[:15]:
        write(f"  {sum(counts.values()):4d}  {nodeid}: " + ", ".join(f"{w} {n}" for w, n in sorted(counts.items())))
    out = os.environ.get("SPECQUANT_WORK_COUNTS")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({k: dict(v) for k, v in COUNTS.items()}, f, indent=1, sort_keys=True)
