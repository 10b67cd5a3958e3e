"""An answer in words and numbers for people: `answer_facts` (the API's `specquant` object, what the window
stores with an answer) and the stats line, speed-up and acceptance texts the CLI and the window show."""

from __future__ import annotations

from typing import Any

from runtime.decode.drafts import KINDS, lookups, offered
from runtime.decode.drafts.model import KIND as DRAFT_MODEL
from runtime.engine.answer import Chunk, _speedup_facts
from runtime.plan.policy import preset_words


def answer_facts(last: Chunk) -> dict[str, Any]:
    """What an answer did, JSON-ready: the API's `specquant` object, what the window stores with an answer,
    and what every stats line is made of (`stats_line`)."""
    s = last.stats
    # Accepted tokens per kind of source: every lookup (free, so always offered), and each other kind that drafted.
    shown = set(lookups())
    sources = {k.name: s.accepted_by(k.name) for k in offered() if k in shown or s.drafted_by(k.name)}
    # A draft model (`--draft-model`) planned in: what the controller let it draft (0: declined, it did not pay)
    name = DRAFT_MODEL.name
    sibling = {"drafted": s.drafted_by(name), "accepted": s.accepted_by(name)} if last.placement.sibling else None
    return {
        "level": last.route.level,
        "reason": last.route.reason,
        "pair": last.choice.label,
        "parent": last.choice.parent,
        "draft": last.choice.draft,
        "why": last.choice.why,
        # The frontier preset that answered, in words ("Fast: the Q4_K_M model's words, 1.2× the speed of a
        # plain Q4 file"; "" for the paper's table or pinned tiers)
        "preset": last.choice.preset,
        "vs_q4": last.choice.vs_q4,  # its measured speed over plain Q4_K_M's here (None: not measured)
        "preset_words": preset_words(last.choice.preset, last.choice.vs_q4),
        "placement": last.placement.label,
        "precision_note": last.placement.precision_note or None,
        "tokens": s.tokens,
        "tok_per_s": round(s.tok_per_s, 3),
        "ttft_s": round(s.ttft_s, 4),
        "acceptance": None if s.acceptance is None else round(s.acceptance, 4),
        "drafted": s.drafted,
        "accepted": s.accepted,
        "draft_sources": sources,
        **({"draft_model": sibling} if sibling is not None else {}),
        "forced": s.forced,  # tokens the grammar (a response_format) decided: no draft, no verify row
        "reused_tokens": s.reused_tokens,
        "dropped_turns": s.dropped_turns,
        "stop_reason": s.stop_reason,
        **_speedup_facts(s),
        **({"citations": [c.as_dict() for c in last.citations]} if last.citations else {}),
        # A thinking model's thought: its tokens, and how long it ran (the prefill, then its cycles)
        **({"thinking_tokens": s.thinking_tokens, "thinking_s": round(s.ttft_s + s.thinking_decode_s, 3)}
           if s.thinking_tokens else {}),
    }


def speed_text(facts: dict[str, Any]) -> str:
    return f"{facts['tok_per_s']:.1f} tok/s" if facts.get("tok_per_s") else "– tok/s"


def acceptance_text(facts: dict[str, Any]) -> str:
    return f"acceptance {facts['acceptance']:.0%}" if facts.get("acceptance") is not None else "no draft"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


SAME_TIME = 0.03  # a speed-up within this of 1.0 is reported as the same time: the plain estimate's noise


def speedup_text(facts: dict[str, Any]) -> str:
    """How much sooner the answer came than plain decoding by its parent would have: "1.4× faster than plain
    F16 · saved 6 s". "" when nothing was drafted (the comparison would be noise) or no plain parent step was
    ever timed (nothing to compare with)."""
    x, saved = facts.get("speedup"), facts.get("saved_s")
    if x is None or saved is None or not facts.get("drafted"):
        return ""
    plain = f"plain {str(facts.get('parent') or '').upper()}".rstrip()
    if abs(x - 1.0) < SAME_TIME:  # the estimate's own noise: neither a gain nor a loss to report
        return f"{x:.2f}× {plain} · about the same time"
    if saved >= 0:
        return f"{x:.1f}× faster than {plain} · saved {_duration(saved)}"
    return f"{x:.2f}× the speed of {plain} · {_duration(-saved)} slower"


def cap_text(facts: dict[str, Any]) -> str:
    """What the machine allows: "On this computer the cost model's cap for F16 ← Q4_K_M is 1.9×" ("" when the
    machine's costs for the pair were not measured)."""
    x, pair = facts.get("machine_cap"), facts.get("pair")
    if x is None or not facts.get("draft"):
        return ""
    if x <= 1.0:
        return f"On this computer {pair} cannot beat plain decoding (its measured costs allow no speed-up)"
    return f"On this computer the cost model's cap for {pair} is {x:.2f}× (its measured costs)"


def sources_text(facts: dict[str, Any]) -> str:
    """Where the tokens not sampled one by one came from: "3 forced by the grammar, 12 from n-gram, 9 from
    earlier text, 40 from the draft tier" ("" when none were): each kind in its own word."""

    def word(kind: str) -> str:  # facts stored before the kinds named them: a tier by its name, in capitals
        return KINDS[kind].summary_word if kind in KINDS else kind if " " in kind else kind.upper()

    parts = [f"{n} from {word(k)}" for k, n in facts.get("draft_sources", {}).items() if n]
    if facts.get("forced"):
        parts.insert(0, f"{facts['forced']} forced by the grammar")
    return ", ".join(parts)


def stats_line(facts: dict[str, Any], detail: bool = False) -> str:
    """One line about an answer. Short (under an answer in the window): level · pair · speed · acceptance ·
    speed-up over plain decoding · tokens · how it ended. `detail` (the CLI): also where accepted tokens came
    from (or why nothing was drafted), the first token's time, reused prompt tokens and the placement."""
    if not facts.get("pair"):
        return ""
    if not detail:
        parts = [str(facts.get("level", "")).capitalize(), facts["pair"]]
        if facts.get("tok_per_s"):
            parts.append(speed_text(facts))
        if facts.get("acceptance") is not None:
            parts.append(acceptance_text(facts))
        parts.append(speedup_text(facts))
        parts.append(f"{facts.get('tokens', 0)} tokens")
        ending = {"cancelled": "stopped", "max_tokens": "cut at the token limit", "length": "cut at the token limit"}
        parts.append(ending.get(facts.get("stop_reason") or "", ""))
        return " · ".join(p for p in parts if p)
    sources = sources_text(facts)
    tokens = f"{facts['tokens']} tokens" + (f" ({sources})" if sources else "")
    speed = speed_text(facts) + (f", {acceptance_text(facts)}" if facts.get("acceptance") is not None else "")
    reused = f"{facts['reused_tokens']} prompt tokens reused" if facts.get("reused_tokens") else ""
    speedup = speedup_text(facts) or (f"plain decoding: {facts['spec_off']}" if facts.get("spec_off") else "")
    parts = [facts["level"], facts["pair"], tokens, speed, speedup, f"first token {facts['ttft_s']:.2f} s", reused]
    if facts.get("draft_model") is not None:
        m = facts["draft_model"]
        used = f"{m['accepted']} of {m['drafted']} drafted tokens kept" if m["drafted"] else "declined (would not pay)"
        parts.append(f"draft model: {used}")
    line = "[" + " · ".join(p for p in [*parts, facts["placement"]] if p) + "]"
    line += f"\n[{facts['precision_note']}]" if facts.get("precision_note") else ""
    return line + (f"\n[{facts['preset_words']}]" if facts.get("preset_words") else "")
