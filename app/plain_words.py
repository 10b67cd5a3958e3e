"""An answer's facts (runtime.engine.summary.answer_facts) in words a person without any knowledge of
quantization reads: what kind of answer it is, what speculation bought, how fast the words came, and, when
the machine was slowed down, by what. The technical words (tiers, acceptance, the cost model's cap) stay in
the details line that the status bar shows on demand (#51)."""

from __future__ import annotations

import re
from typing import Any

from app.stored_messages import TOOLS_UNUSED
from runtime.engine.plain_estimate import LOAD_BAND
from runtime.engine.summary import SAME_TIME, acceptance_text, speed_text, speedup_text, stats_line
from runtime.plan.policy import preset_words

# What the answering tier means for the answer. F16 is the model as published; the others are smaller copies.
KIND = {
    "f16": ("Exact answer", "The full model chose every word (a smaller copy only proposed words it checked)."),
    "q8_0": ("Near-exact answer", "A compressed copy of the model (8-bit) chose every word: close to the full "
                                  "model, a little faster."),
    "q4_k_m": ("Quick answer", "A small compressed copy of the model (4-bit) chose every word: fastest, "
                               "sometimes worded differently from the full model."),
}
# The speed presets' words without tier names (runtime.plan.policy.preset_words has the technical ones).
PRESET_PLAIN = {
    "exact": "the full model's words", "balanced": "the 8-bit copy's words", "fast": "the 4-bit copy's words"
}
YARDSTICK = "a plain 4-bit copy"  # plain Q4_K_M, what other apps run by default
BUSY = "Slower than usual: another program is using the processor"
TOOLS_UNUSED_NOTE = "Tools were offered; the model answered without them"


ENDINGS = {"cancelled": "stopped", "max_tokens": "cut short at the answer length limit",
           "length": "cut short at the answer length limit"}


def meta_line(facts: dict[str, Any], text: str = "") -> str:
    """The small line under a stored answer, in the status line's words ("Exact answer · 2.1× faster than
    without speculation · 12 words/s"), how it ended when it did not end by itself, and that tools went unused
    when they did; `meta_tooltip` holds the technical line."""
    parts = [plain_line(facts, text), ENDINGS.get(str(facts.get("stop_reason") or ""), "")]
    if facts.get(TOOLS_UNUSED):
        parts.append(TOOLS_UNUSED_NOTE)
    return " · ".join(p for p in parts if p)


def meta_tooltip(facts: dict[str, Any]) -> str:
    """The technical line behind an answer's small line: level, precisions, speed, acceptance, speed-up."""
    return stats_line(facts)
_WORD = re.compile(r"\w+")


def answer_kind(facts: dict[str, Any]) -> tuple[str, str]:
    """("Exact answer", why) for the tier that answered; ("", "") before any answer."""
    return KIND.get(str(facts.get("parent") or ""), ("", ""))


def slowdown_text(facts: dict[str, Any]) -> str:
    """The cause of a slow answer in plain words, when the answer's own record names one ("" otherwise)."""
    load = facts.get("load")
    return BUSY if load is not None and load > LOAD_BAND[1] else ""


def gain_text(facts: dict[str, Any]) -> str:
    """What speculation bought, without the tiers' names: "2.1× faster than without speculation"."""
    if not speedup_text(facts):  # nothing drafted, or nothing that can be fairly claimed
        return ""
    x, saved = facts["speedup"], facts["saved_s"]
    if abs(x - 1.0) < SAME_TIME:
        return "about as fast as without speculation"
    if saved >= 0:
        return f"{x:.1f}× faster than without speculation"
    return f"{x:.2f}× the speed without speculation (slower this time)"


def words_per_s(facts: dict[str, Any], text: str) -> float | None:
    """The answer's speed in words: its tokens per second times its words per token (None before it has any)."""
    tokens, rate = facts.get("tokens") or 0, facts.get("tok_per_s") or 0.0
    words = len(_WORD.findall(text))
    return rate * words / tokens if tokens and rate and words else None


def words_text(rate: float) -> str:
    """"12 words/s"; a slow answer with its decimal, "1.4 words/s" (#63: "1 words/s", "0 words/s")."""
    return f"{rate:.1f} words/s" if rate < 9.95 else f"{rate:.0f} words/s"


def plain_line(facts: dict[str, Any], text: str = "") -> str:
    """The status line: "Exact answer · 2.1× faster than without speculation · 12 words/s", or the cause
    of a slowdown in place of the speed-up ("" before any answer). An answer of a speed preset says it in its
    words instead: "Fast: the 4-bit copy's words, 1.2× the speed of a plain 4-bit copy · 12 words/s"."""
    kind, _ = answer_kind(facts)
    if not kind:
        return ""
    rate = words_per_s(facts, text)
    preset = preset_words(facts.get("preset"), facts.get("vs_q4"), PRESET_PLAIN, YARDSTICK)
    gain = slowdown_text(facts) or ("" if preset else gain_text(facts))
    parts = [preset or kind, gain, words_text(rate) if rate else ""]
    return " · ".join(p for p in parts if p)


def details_line(facts: dict[str, Any]) -> str:
    """The technical line behind Details: the pair, tokens per second, acceptance, the speed-up against the
    plain parent (or why none is claimed), the placement."""
    if not facts.get("pair"):
        return ""
    speedup = speedup_text(facts)
    if not speedup and facts.get("spec_off"):
        speedup = f"no draft: {facts['spec_off']}"
    elif not speedup and facts.get("speedup_note") and facts.get("drafted"):
        speedup = f"no speed-up claimed: {facts['speedup_note']}"
    parts = [facts["pair"], speed_text(facts), acceptance_text(facts), speedup, facts.get("placement") or ""]
    return " · ".join(p for p in parts if p)
