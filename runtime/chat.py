"""What a chat request asks for and what comes back: `ChatOptions` in, a stream of `Chunk`s out, each with
the answer's cumulative `Stats`. Plain data: the Engine makes them, the CLI, the window, the API, the
calibration and the benchmark read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from runtime import router
from runtime.errors import UserError
from runtime.placement import Plan
from runtime.policy import PRESET_NAMES, Choice
from runtime.router import Route
from runtime.sampling import LLAMA_DEFAULTS, SamplingParams

Message = dict[str, str]


@dataclass(frozen=True)
class ChatOptions:
    """One request's choices; the CLI flags, the app's settings and the benchmark all build this."""

    level: str = "auto"  # auto | low | medium | high
    preset: str = "exact"
    allow_lossy: bool = False
    parent: str | None = None
    draft: str | None = None  # a tier, "none", or None for the preset's
    no_spec: bool = False
    k: int | None = None  # fixed draft length; None: the controller picks k each cycle
    max_tokens: int = 512
    # None: the model's own recommendation (its GGUF's general.sampling.* keys, else llama.cpp's defaults),
    # with `sampling_overrides` (field name, value) applied on top; SamplingParams() is greedy.
    sampling: SamplingParams | None = None
    sampling_overrides: tuple[tuple[str, float], ...] = ()
    stop: tuple[str, ...] = ()
    draft_window: int | None = None  # the draft's catch-up window (SpecConfig.draft_window); None: the setting

    def __post_init__(self) -> None:
        if self.level not in ("auto", *router.LEVELS):
            raise UserError(f"unknown level {self.level!r}: choose auto, low, medium or high")
        if self.preset not in PRESET_NAMES:
            raise UserError(f"unknown preset {self.preset!r}: choose from {', '.join(PRESET_NAMES)}")
        if self.max_tokens < 1:
            raise UserError(f"max tokens {self.max_tokens} must be at least 1")
        if self.draft_window is not None and self.draft_window < 0:
            raise UserError(f"draft window {self.draft_window} must be 0 (off) or more tokens")
        replace(self.sampling or LLAMA_DEFAULTS, **dict(self.sampling_overrides))  # bad values fail here


@dataclass(frozen=True)
class Stats:
    tokens: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens whose KV cache was kept from the previous turn
    dropped_turns: int = 0  # oldest turns dropped to fit the context
    ttft_s: float = 0.0
    first_tokens: int = 0  # tokens of the first cycle, which also paid for the prefill
    decode_s: float = 0.0  # time after the first cycle
    drafted: int = 0
    accepted: int = 0
    ngram_accepted: int = 0  # accepted tokens proposed by n-gram lookup
    tier_accepted: int = 0  # accepted tokens proposed by the draft tier
    draft_s: float = 0.0
    verify_s: float = 0.0
    cycles: int = 0
    stop_reason: str | None = None  # eos | max_tokens | stop | length | cancelled

    @property
    def tok_per_s(self) -> float:
        """Decode speed: tokens after the first cycle over the time after it (prefill excluded)."""
        n = self.tokens - self.first_tokens
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "tok_per_s": round(self.tok_per_s, 3),
            "ttft_s": round(self.ttft_s, 4),
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance": None if self.acceptance is None else round(self.acceptance, 4),
            "ngram_accepted": self.ngram_accepted,
            "tier_accepted": self.tier_accepted,
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "cycles": self.cycles,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "dropped_turns": self.dropped_turns,
            "stop_reason": self.stop_reason,
        }


@dataclass(frozen=True)
class Chunk:
    text: str  # new text since the previous chunk
    tokens: tuple[int, ...]
    from_draft: tuple[bool, ...]  # per token: proposed by the draft and accepted
    route: Route
    choice: Choice
    placement: Plan
    stats: Stats  # cumulative for this answer
    done: bool = False
    draft_chars: tuple[bool, ...] = ()  # per character of `text`: from a draft token (for highlighting)


@dataclass(frozen=True)
class Answer:
    """A whole answer: its text, its token ids and the last Chunk (stats, route, choice, placement)."""

    text: str
    token_ids: tuple[int, ...]
    last: Chunk


def collect(chunks: Iterable[Chunk], on_text: Callable[[str], None] | None = None) -> Answer:
    """Gather a stream of Chunks into an Answer; `on_text` sees each piece of text as it comes."""
    parts: list[str] = []
    ids: list[int] = []
    last = None
    for chunk in chunks:
        if chunk.text:
            parts.append(chunk.text)
            if on_text is not None:
                on_text(chunk.text)
        ids.extend(chunk.tokens)
        last = chunk
    if last is None:
        raise ValueError("the stream ended without its last chunk")
    return Answer("".join(parts), tuple(ids), last)


def answer_facts(last: Chunk) -> dict[str, Any]:
    """What an answer did, JSON-ready: the API's `specquant` object, what the window stores with an answer,
    and what every stats line is made of (`stats_line`)."""
    s = last.stats
    sources = {"ngram": s.ngram_accepted}
    if last.choice.draft:
        sources[last.choice.draft] = s.tier_accepted
    return {
        "level": last.route.level,
        "reason": last.route.reason,
        "pair": last.choice.label,
        "parent": last.choice.parent,
        "draft": last.choice.draft,
        "why": last.choice.why,
        "placement": last.placement.label,
        "precision_note": last.placement.precision_note or None,
        "tokens": s.tokens,
        "tok_per_s": round(s.tok_per_s, 3),
        "ttft_s": round(s.ttft_s, 4),
        "acceptance": None if s.acceptance is None else round(s.acceptance, 4),
        "drafted": s.drafted,
        "accepted": s.accepted,
        "draft_sources": sources,
        "reused_tokens": s.reused_tokens,
        "dropped_turns": s.dropped_turns,
        "stop_reason": s.stop_reason,
    }


def speed_text(facts: dict[str, Any]) -> str:
    return f"{facts['tok_per_s']:.1f} tok/s" if facts.get("tok_per_s") else "– tok/s"


def acceptance_text(facts: dict[str, Any]) -> str:
    return f"acceptance {facts['acceptance']:.0%}" if facts.get("acceptance") is not None else "no draft"


def sources_text(facts: dict[str, Any]) -> str:
    """Where the accepted tokens came from: "12 from n-gram, 40 from Q4_K_M" ("" when none were)."""
    words = {"ngram": "n-gram"}
    return ", ".join(f"{n} from {words.get(k, k.upper())}" for k, n in facts.get("draft_sources", {}).items() if n)


def stats_line(facts: dict[str, Any], detail: bool = False) -> str:
    """One line about an answer. Short (under an answer in the window): level · pair · speed · acceptance ·
    tokens · how it ended. `detail` (the CLI): also where accepted tokens came from, the first token's time,
    reused prompt tokens and the placement."""
    if not facts.get("pair"):
        return ""
    if not detail:
        parts = [str(facts.get("level", "")).capitalize(), facts["pair"]]
        if facts.get("tok_per_s"):
            parts.append(speed_text(facts))
        if facts.get("acceptance") is not None:
            parts.append(acceptance_text(facts))
        parts.append(f"{facts.get('tokens', 0)} tokens")
        ending = {"cancelled": "stopped", "max_tokens": "cut at the token limit", "length": "cut at the token limit"}
        parts.append(ending.get(facts.get("stop_reason") or "", ""))
        return " · ".join(p for p in parts if p)
    sources = sources_text(facts)
    tokens = f"{facts['tokens']} tokens" + (f" ({sources})" if sources else "")
    speed = speed_text(facts) + (f", {acceptance_text(facts)}" if facts.get("acceptance") is not None else "")
    reused = f"{facts['reused_tokens']} prompt tokens reused" if facts.get("reused_tokens") else ""
    parts = [facts["level"], facts["pair"], tokens, speed, f"first token {facts['ttft_s']:.2f} s", reused]
    line = "[" + " · ".join(p for p in [*parts, facts["placement"]] if p) + "]"
    return line + (f"\n[{facts['precision_note']}]" if facts.get("precision_note") else "")
