"""The machine's costs for one model, measured once: what decides whether speculation pays here.

For the parent tier: one plain step, and v(n), a verify batch of n tokens in units of that step, for
n = 1..16 (measured at a few sizes, fitted as one monotone curve). For each draft tier: c, its step over the
parent's; a caught-up token's cost; and how often its greedy choice agrees with the parent's on a fixed
text (teacher-forced: one batch each, no generation). From those, each draft source's cap: the best
speed-up the cost model predicts at its acceptance, and the k that reaches it.

Interleaved rounds (every size and tier once per round, medians over rounds) so that a drift in the
machine's speed hits all terms alike. It takes at most BUDGET_S (a few seconds on a 1.5B model, well under a
second on the demo), and is cached in the model's folder, keyed like every measured speed (machine, kernel
variant, threads, tier hashes). `specquant info --costs` prints it; the controller starts from it.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runtime.decode.controller import CostShape, cap, interpolate, isotonic
from runtime.decode.drafts import KINDS, lookups, offered
from runtime.decode.llama_backend import LlamaBackend
from runtime.models.cache import atomic_write_text

log = logging.getLogger("specquant.costs")
FILE = "costs.json"
VERSION = 2  # 2: v(n) stops at the parent's exact-rows bound (llama_backend.exact_rows)
BUDGET_S = 10.0
N_MAX = 16  # v(n) is reported for n = 1..N_MAX
SIZES = (1, 2, 4, 6, 8, 12, 16)  # measured; the rest interpolated
MIN_ROUNDS, MAX_ROUNDS = 3, 6
DRAFT_STEPS = 3  # draft steps timed per round (they are cheap; one slow one must not set c)
# Code and prose, as answers mix them: the context the batches are timed at, and the text the drafts'
# agreement with the parent is measured on.
PROBE_TEXT = (
    "def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n"
    '    """Merge two sorted lists into one sorted list."""\n'
    "    out, i, j = [], 0, 0\n"
    "    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n"
    "            out.append(a[i])\n"
    "            i += 1\n"
    "        else:\n"
    "            out.append(b[j])\n"
    "            j += 1\n"
    "    return out + a[i:] + b[j:]\n\n"
    "The function walks both lists once, so it takes time proportional to their total length. "
    "When one list runs out, the rest of the other is already sorted and is appended as it is.\n"
)


@dataclass(frozen=True)
class MachineCosts:
    """What the probe measured; `shape()` is what the controller takes from it."""

    step_s: float
    v: dict[int, float]  # n -> a verify batch of n tokens over one step, n = 1..N_MAX (fitted)
    c: dict[str, float] = field(default_factory=dict)  # draft tier -> its step over the parent's
    prefill: dict[str, float] = field(default_factory=dict)  # draft tier -> a caught-up token over a step
    acceptance: dict[str, float] = field(default_factory=dict)  # draft tier -> greedy agreement
    parent: str = "f16"
    rounds: int = 0
    seconds: float = 0.0
    spread: float = 0.0  # the plain step's relative spread over rounds (max - min over median)

    def shape(self) -> CostShape:
        return CostShape(self.step_s, self.v, self.c, self.prefill, self.acceptance)

    def caps(self) -> dict[str, dict[str, float]]:
        """Per draft source: its acceptance, cost, best predicted speed-up (the cap) and the k reaching it.
        A lookup costs nothing, but its acceptance depends on how much the answer repeats what came before:
        each lookup kind's caps are given at the controller's priors (per match length, where it has them)."""
        out = {}
        k_decoded = max((k.k_max for k in offered() if k.decodes), default=0)
        for tier, c in self.c.items():
            a = self.acceptance.get(tier, 0.0)
            best, k = cap(a, c, self.v, k_decoded)
            out[tier] = {"acceptance": a, "c": c, "cap": round(best, 3), "k": k}
        for kind in lookups():
            for key, a in (kind.key_priors or {kind.name: kind.prior}).items():
                best, k = cap(a, 0.0, self.v, kind.k_max)
                out[key] = {"acceptance": a, "c": 0.0, "cap": round(best, 3), "k": k}
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "parent": self.parent,
            "step_s": round(self.step_s, 6),
            "v": {str(n): round(x, 4) for n, x in self.v.items()},
            "c": {t: round(x, 4) for t, x in self.c.items()},
            "prefill": {t: round(x, 4) for t, x in self.prefill.items()},
            "acceptance": {t: round(x, 4) for t, x in self.acceptance.items()},
            "rounds": self.rounds,
            "seconds": round(self.seconds, 2),
            "spread": round(self.spread, 4),
            "caps": self.caps(),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> MachineCosts:
        """Back from `as_dict`; raises ValueError on anything malformed (then it is measured afresh)."""

        def ratios(x: Any, low: float, high: float) -> dict[str, float]:
            if not isinstance(x, Mapping):
                raise ValueError("not a mapping")
            out = {str(k): float(val) for k, val in x.items()}
            if not all(low <= val <= high for val in out.values()):
                raise ValueError("out of range")
            return out

        step = float(raw["step_s"])
        if not 0 < step < 3600:
            raise ValueError("step out of range")
        v = {int(n): x for n, x in ratios(raw["v"], 0.5, 1000).items()}
        if not v or sorted(v) != list(range(1, max(v) + 1)) or max(v) > N_MAX:
            raise ValueError("v(n) incomplete")
        return cls(
            step,
            v,
            ratios(raw.get("c", {}), 0, 100),
            ratios(raw.get("prefill", {}), 0, 100),
            ratios(raw.get("acceptance", {}), 0, 1),
            str(raw.get("parent", "f16")),
            int(raw.get("rounds", 0)),
            float(raw.get("seconds", 0.0)),
            float(raw.get("spread", 0.0)),
        )


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _greedy(backend: LlamaBackend, tokens: list[int]) -> tuple[np.ndarray, float]:
    """The backend's argmax after each prefix of `tokens` (one batch from an empty cache), and its seconds."""
    backend.truncate(0)
    t = time.perf_counter()
    rows = backend.decode(tokens, range(len(tokens)))
    return rows.argmax(axis=1), time.perf_counter() - t


def measure_costs(
    parent: LlamaBackend, drafts: Mapping[str, LlamaBackend], parent_name: str = "f16", budget_s: float = BUDGET_S
) -> MachineCosts:
    """Measure the costs (module docstring). Leaves every cache empty."""
    started = time.perf_counter()
    text = parent.tokenize(PROBE_TEXT)
    # A verify batch never exceeds the parent's exact-rows bound: batches above it are not measured.
    top = min(N_MAX, parent.exact_rows or N_MAX)
    sizes = [*(n for n in SIZES if n < top), top]
    extra = max(SIZES)
    context, batch = text[:-extra], text[-extra:]
    # Agreement, teacher-forced: each draft's greedy choice after each prefix against the parent's.
    want, _ = _greedy(parent, text)
    agree: dict[str, float] = {}
    prefill_s: dict[str, float] = {}
    skip = 8  # the first few positions have almost no context: no answer looks like them
    for tier, d in drafts.items():
        got, seconds = _greedy(d, text)
        agree[tier] = float(np.mean(got[skip:] == want[skip:]))
        prefill_s[tier] = seconds / len(text)
    for b in (parent, *drafts.values()):  # the context every timing below starts from (already decoded)
        b.truncate(len(context))
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    draft_steps: dict[str, list[float]] = {t: [] for t in drafts}
    rounds = 0
    while rounds < MAX_ROUNDS:
        t_round = time.perf_counter()
        for n in sizes:
            samples[n].append(_timed(lambda n=n: parent.decode(batch[:n], range(n))))
            parent.truncate(len(context))
        for tier, d in drafts.items():
            for i in range(DRAFT_STEPS):
                draft_steps[tier].append(_timed(lambda d=d, i=i: d.decode(batch[i : i + 1], [0])))
            d.truncate(len(context))
        rounds += 1
        elapsed = time.perf_counter() - started
        if rounds >= MIN_ROUNDS and elapsed + (time.perf_counter() - t_round) > budget_s:
            break
    for b in (parent, *drafts.values()):
        b.truncate(0)
    step = statistics.median(samples[1])
    fitted = isotonic([(n, statistics.median(xs) / step, float(len(xs))) for n, xs in sorted(samples.items())])
    v = {n: max(1.0, interpolate(fitted, n)) if n > 1 else 1.0 for n in range(1, top + 1)}
    return MachineCosts(
        step_s=step,
        v=v,
        c={t: statistics.median(xs) / step for t, xs in draft_steps.items()},
        prefill={t: s / step for t, s in prefill_s.items()},
        acceptance=agree,
        parent=parent_name,
        rounds=rounds,
        seconds=time.perf_counter() - started,
        spread=(max(samples[1]) - min(samples[1])) / step,
    )


def load_or_measure_costs(
    folder: Path,
    key: Mapping[str, Any],
    parent: Callable[[], LlamaBackend],
    drafts: Callable[[], Mapping[str, LlamaBackend]],
    parent_name: str = "f16",
    refresh: bool = False,
    before_measuring: Callable[[], None] | None = None,
) -> tuple[MachineCosts, bool]:
    """The cached costs for this machine (key), else measured now and cached; and whether they were cached.
    `before_measuring` is called when the probe is about to run (a window's wait says so). A cache that cannot
    be written costs the next start a new probe, nothing more."""
    path = folder / FILE
    wanted = json.loads(json.dumps(dict(key)))
    if not refresh:
        try:
            cached = json.loads(path.read_text(encoding="utf-8"))
            if cached.get("version") == VERSION and cached.get("key") == wanted:
                entry = cached["costs"].get(parent_name)
                if entry is not None:
                    return MachineCosts.from_dict(entry), True
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # none yet, unreadable or malformed: measure
    log.info("measuring this machine's costs for %s (once; a few seconds)", folder.name)
    if before_measuring is not None:
        before_measuring()
    costs = measure_costs(parent(), drafts(), parent_name)
    entries: dict[str, Any] = {}
    try:  # keep other parents' entries measured under the same key
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("version") == VERSION and cached.get("key") == wanted:
            entries = dict(cached.get("costs") or {})
    except (OSError, ValueError, AttributeError):
        pass
    entries[parent_name] = costs.as_dict()
    try:
        atomic_write_text(path, json.dumps({"version": VERSION, "key": wanted, "costs": entries}, indent=2) + "\n")
    except OSError as e:
        log.debug("could not cache the machine's costs: %s", e)
    return costs, False


def _label(source: str) -> str:
    """A draft tier as "Q4_K_M", a draft model as "model qwen-coder-0.5b", a lookup's estimates by their
    kind's word and match ("n-gram (3-token match)")."""
    name, _, match = source.partition(":")
    kind = KINDS.get(name)
    if kind is not None and not kind.decodes and kind.verified:
        return f"{kind.summary_word} ({match}-token match)" if match else kind.summary_word
    return source.replace(":", " ", 1) if match else source.upper()


def format_costs(costs: MachineCosts, cached: bool) -> str:
    """The lines `specquant info --costs` prints."""
    lines = [
        f"costs   parent {costs.parent.upper()}: a plain step {costs.step_s * 1000:.1f} ms "
        f"(spread {costs.spread:.0%} over {costs.rounds} rounds; "
        + ("cached" if cached else f"measured in {costs.seconds:.1f} s")
        + ")",
        "  v(n)  " + "  ".join(f"{n}:{x:.2f}" for n, x in costs.v.items()),
    ]
    for tier, c in costs.c.items():
        lines.append(
            f"  draft {_label(tier)}: c {c:.2f}, a caught-up token {costs.prefill[tier]:.3f}, "
            f"agreement {costs.acceptance[tier]:.0%}"
        )
    for source, cap_ in costs.caps().items():
        name = _label(source)
        if cap_["k"]:
            lines.append(f"  cap   {name}: {cap_['cap']:.2f}x at k = {cap_['k']} (acceptance {cap_['acceptance']:.0%})")
        else:
            lines.append(f"  cap   {name}: none at acceptance {cap_['acceptance']:.0%} (plain decoding is faster)")
    return "\n".join(lines)
