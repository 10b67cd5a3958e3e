"""Calibration for the `auto` preset: time every plain tier and every draft/parent pair on this machine.

Paired and interleaved (every configuration runs on each prompt, in rotating order, round after round) so
that machine noise hits all alike; load and prefill time are excluded; medians are kept. Per level, the
fastest configuration whose output precision meets the level's floor wins, so speculation that does not
pay is switched off. The result is cached in the model's folder, keyed by machine and tier hashes.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import replace
from typing import Any, Protocol

from runtime.decode.sampling import SamplingParams
from runtime.engine.answer import Answer, Stats
from runtime.engine.options import ChatOptions, Message
from runtime.models.cache import ModelDir, atomic_write_text
from runtime.plan.policy import LOSSY_FLOORS, PRECISION, STRICT_FLOORS


class Engine(Protocol):
    """What calibrating needs of runtime.engine.engine.Engine (which calls this module, so it is not imported)."""

    model: ModelDir

    def chat(self, messages: list[Message], options: ChatOptions) -> Answer: ...

    def machine_key(self) -> dict[str, Any]: ...

log = logging.getLogger("specquant.calibrate")
CONFIGS: tuple[tuple[str, str | None], ...] = (
    ("f16", None),
    ("q8_0", None),
    ("q4_k_m", None),
    ("f16", "q4_k_m"),
    ("f16", "q8_0"),
    ("q8_0", "q4_k_m"),
)
PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain in two sentences why the sky is blue.",
)
FILE = "calibration.json"
CALIBRATION_K = 4


def config_name(parent: str, draft: str | None) -> str:
    return parent if draft is None else f"{parent}<-{draft}"


def pick(measured: dict[str, dict[str, Any]], floors: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per level, the fastest measured configuration whose parent is at least the level's floor."""
    out = {}
    for level, floor in floors.items():
        allowed = [(n, m) for n, m in measured.items() if PRECISION[m["parent"]] >= PRECISION[floor]]
        name, best = max(allowed, key=lambda nm: nm[1]["tok_per_s"])
        out[level] = {"config": name, "parent": best["parent"], "draft": best["draft"], "k": None}
    return out


def calibrate(engine: Engine, rounds: int = 2, max_tokens: int = 32) -> dict[str, Any]:
    started = time.perf_counter()
    samples: dict[str, list[float]] = {config_name(p, d): [] for p, d in CONFIGS}
    accepted = dict.fromkeys(samples, 0)
    drafted = dict.fromkeys(samples, 0)
    # Warm-up: load every tier and touch its pages once, outside the timings.
    for parent, draft in CONFIGS:
        _run(engine, parent, draft, PROMPTS[0], ChatOptions(max_tokens=4, sampling=SamplingParams()))
    for r in range(rounds):
        for i, prompt in enumerate(PROMPTS):
            shift = (r * len(PROMPTS) + i) % len(CONFIGS)
            for parent, draft in CONFIGS[shift:] + CONFIGS[:shift]:
                greedy = ChatOptions(max_tokens=max_tokens, sampling=SamplingParams())
                stats = _run(engine, parent, draft, prompt, greedy)
                name = config_name(parent, draft)
                samples[name].append(stats.tok_per_s)
                accepted[name] += stats.accepted
                drafted[name] += stats.drafted
    measured = {}
    for parent, draft in CONFIGS:
        name = config_name(parent, draft)
        measured[name] = {
            "parent": parent,
            "draft": draft,
            "tok_per_s": round(statistics.median(samples[name]), 3),
            "samples": [round(x, 3) for x in samples[name]],
            "acceptance": round(accepted[name] / drafted[name], 4) if drafted[name] else None,
        }
    result = {
        "key": engine.machine_key(),
        "measured": measured,
        "choices": {"strict": pick(measured, STRICT_FLOORS), "lossy": pick(measured, LOSSY_FLOORS)},
        "seconds": round(time.perf_counter() - started, 1),
    }
    log.info("calibrated %s in %.1f s", engine.model.name, result["seconds"])
    return result


def _run(engine: Engine, parent: str, draft: str | None, prompt: str, options: ChatOptions) -> Stats:
    """Greedy answer with a pinned pair; returns its stats (decode speed excludes prefill).

    A pair drafts with a fixed k, so what is timed is the pair itself: with the controller a pair that
    does not pay would run as plain steps and tie with its parent alone."""
    pinned = replace(options, parent=parent, draft=draft or "none", k=CALIBRATION_K if draft else None)
    return engine.chat([{"role": "user", "content": prompt}], pinned).last.stats


def load_or_calibrate(engine: Engine) -> dict[str, Any]:
    path = engine.model.path / FILE
    key = engine.machine_key()
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return cached
    except (OSError, ValueError):
        pass
    log.warning("calibrating %s on this machine (once; about a minute on a 1.5B model)", engine.model.name)
    result = calibrate(engine)
    atomic_write_text(path, json.dumps(result, indent=2) + "\n")
    return result
