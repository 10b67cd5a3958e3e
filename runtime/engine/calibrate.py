"""Calibration for the default (`auto`) preset: this machine's speed of each frontier preset against a plain
Q4_K_M file, what people run instead (#61).

Paired and interleaved (every configuration answers each prompt, in rotating order, round after round) so that
machine noise hits all alike; every run starts from empty caches (each pays its prefill, and none drafts from an
earlier run's answer); load time is excluded. A run's speed is end to end: its tokens over its time from the
request to the last token. Per run, each preset's speed is divided by plain Q4_K_M's on the same prompt in the
same round, and the median of those ratios is kept (`vs_q4`); runtime.plan.policy.frontier_pick then takes the
most precise preset at or above 1.0. Cached in the model's folder, keyed by machine and tier hashes.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol

from runtime.decode.sampling import SamplingParams
from runtime.engine.answer import Answer, Stats
from runtime.engine.options import ChatOptions, Message
from runtime.models.cache import ModelDir, atomic_write_text
from runtime.plan.policy import FRONTIER, frontier_pick


class CalibrationTarget(Protocol):
    """What calibrating needs of runtime.engine.engine.Engine (which calls this module, so it is not imported)."""

    model: ModelDir

    def chat(self, messages: list[Message], options: ChatOptions) -> Answer: ...

    def machine_key(self) -> dict[str, Any]: ...

    def reset_caches(self) -> None: ...


log = logging.getLogger("specquant.calibrate")
PLAIN_Q4 = "plain q4_k_m"  # the yardstick: one Q4_K_M file decoded plainly, as Ollama and LM Studio run it
CONFIGS: tuple[str, ...] = (PLAIN_Q4, *FRONTIER)
PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain in two sentences why the sky is blue.",
    "Correct the spelling and repeat the sentence: 'The quick brwon fox jumsp over the lazy dog near the rivr.'",
)
FILE = "calibration.json"
FORMAT = 2  # 1: the old auto's per-level pairs; a file of another format is measured again


def options_for(config: str, max_tokens: int) -> ChatOptions:
    """Greedy options for `config`: plain Q4_K_M pinned without speculation, or a preset as users run it."""
    greedy = SamplingParams()
    if config == PLAIN_Q4:
        return ChatOptions(preset="fast", parent="q4_k_m", no_spec=True, max_tokens=max_tokens, sampling=greedy)
    return ChatOptions(preset=config, max_tokens=max_tokens, sampling=greedy)


def end_to_end_rate(stats: Stats) -> float:
    """Tokens over the time from the request to the last token (prefill included): how soon the answer is there."""
    seconds = stats.ttft_s + stats.decode_s
    return stats.tokens / seconds if stats.tokens and seconds > 0 else 0.0


def ratios_vs_q4(rates: dict[str, list[float]]) -> dict[str, float | None]:
    """Per preset, the median over paired runs of its speed over plain Q4_K_M's (None where none is usable)."""
    out: dict[str, float | None] = {}
    for config, samples in rates.items():
        if config == PLAIN_Q4:
            continue
        paired = [r / q for r, q in zip(samples, rates[PLAIN_Q4], strict=True) if q > 0 and r > 0]
        out[config] = round(statistics.median(paired), 3) if paired else None
    return out


def calibrate(
    engine: CalibrationTarget, rounds: int = 2, max_tokens: int = 32, stop: Callable[[], bool] | None = None
) -> dict[str, Any] | None:
    """Measure, and return the calibration; None when `stop()` said to stop (checked before every run)."""
    started = time.perf_counter()
    rates: dict[str, list[float]] = {c: [] for c in CONFIGS}
    accepted, drafted = dict.fromkeys(CONFIGS, 0), dict.fromkeys(CONFIGS, 0)
    # Warm-up: load every tier and touch its pages once, outside the timings.
    for config in CONFIGS:
        _run(engine, config, PROMPTS[0], 4)
    for r in range(rounds):
        for i, prompt in enumerate(PROMPTS):
            shift = (r * len(PROMPTS) + i) % len(CONFIGS)
            for config in CONFIGS[shift:] + CONFIGS[:shift]:
                if stop is not None and stop():
                    engine.reset_caches()
                    log.info("measuring %s stopped for a request; measured again when idle", engine.model.name)
                    return None
                stats = _run(engine, config, prompt, max_tokens)
                rates[config].append(end_to_end_rate(stats))
                accepted[config] += stats.accepted
                drafted[config] += stats.drafted
    engine.reset_caches()  # nothing of the calibration's prompts stays to speed up (or slow down) a real answer
    measured = {
        config: {
            "tok_per_s": round(statistics.median(rates[config]), 3),  # end to end
            "samples": [round(x, 3) for x in rates[config]],
            "acceptance": round(accepted[config] / drafted[config], 4) if drafted[config] else None,
        }
        for config in CONFIGS
    }
    vs_q4 = ratios_vs_q4(rates)
    result = {
        "format": FORMAT,
        "key": engine.machine_key(),
        "measured": measured,
        "vs_q4": vs_q4,
        "default": frontier_pick({"vs_q4": vs_q4})[0],
        "seconds": round(time.perf_counter() - started, 1),
    }
    log.info("calibrated %s in %.1f s: the default is %s", engine.model.name, result["seconds"], result["default"])
    return result


def _run(engine: CalibrationTarget, config: str, prompt: str, max_tokens: int) -> Stats:
    """One greedy answer of `config` from empty caches; its stats."""
    engine.reset_caches()
    return engine.chat([{"role": "user", "content": prompt}], options_for(config, max_tokens)).last.stats


def stored(engine: CalibrationTarget) -> dict[str, Any] | None:
    """The calibration measured on this machine for these tiers, if one is saved (nothing is measured)."""
    try:
        cached = json.loads((engine.model.path / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("format") != FORMAT or cached.get("key") != engine.machine_key():
        return None
    return cached


def load_or_calibrate(engine: CalibrationTarget, stop: Callable[[], bool] | None = None) -> dict[str, Any] | None:
    """The saved calibration, else one measured now and saved (None: `stop()` stopped it; nothing saved)."""
    cached = stored(engine)
    if cached is not None:
        return cached
    log.warning("measuring %s's presets on this machine (once; about a minute on a 1.5B model)", engine.model.name)
    result = calibrate(engine, stop=stop)
    if result is not None:
        atomic_write_text(engine.model.path / FILE, json.dumps(result, indent=2) + "\n")
    return result
