"""What a chat request asks for and what comes back: `ChatOptions` in, a stream of `Chunk`s out, each with
the answer's cumulative `Stats`. Plain data: the Engine makes them, the CLI, the window, the API, the
calibration and the benchmark read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from runtime.decode.sampling import LLAMA_DEFAULTS, SamplingParams
from runtime.errors import UserError
from runtime.plan import router
from runtime.plan.placement import Plan
from runtime.plan.policy import PRESET_NAMES, Choice
from runtime.plan.router import Route

if TYPE_CHECKING:
    from runtime.decode.grammar import Grammar
    from runtime.engine.tools import CallDelta, ToolRequest

# {"role", "content"}; with tools also an assistant's "tool_calls" and a tool result's "tool_call_id".
Message = dict[str, Any]


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
    # The answer follows this grammar (a JSON schema, any JSON object): runtime.decode.grammar.
    grammar: Grammar | None = None
    tools: ToolRequest | None = None  # tools the model may call (runtime.engine.tools); the grammar is theirs
    logprobs: int | None = None  # each token's log-probability and this many alternatives (None: not asked)
    raw_prompt: bool = False  # the last message's content is the prompt as it is, without the chat template
    # A chat too long for the context loses its oldest turns (the window and the CLI keep their own chats
    # going); False: it is refused (ContextTooLong), as the API does unless a request asks (OpenAI's 400).
    trim: bool = True
    # Whose KV cache this answer may reuse: a prompt prefix is kept only from an answer with the same key, so
    # how fast an answer starts never tells one party (the window, an API client) what another one asked.
    cache_key: str = ""

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
    end_token: int = 0  # 1 once the answer ended at an end-of-generation token: not shown, but computed
    decode_s: float = 0.0  # time after the first cycle
    drafted: int = 0
    accepted: int = 0
    ngram_accepted: int = 0  # accepted tokens proposed by n-gram lookup
    tier_accepted: int = 0  # accepted tokens proposed by the draft tier
    ngram_drafted: int = 0  # tokens proposed by n-gram lookup
    tier_drafted: int = 0  # tokens proposed by the draft tier
    draft_s: float = 0.0
    verify_s: float = 0.0
    cycles: int = 0
    forced: int = 0  # tokens the grammar forced: emitted without a draft or a logit row
    grammar_s: float = 0.0  # time spent computing the grammar's masks and moving its state
    stop_reason: str | None = None  # eos | max_tokens | stop | length | cancelled
    # What plain decoding at the same precision would pay per token after the first: the machine's measured
    # step, scaled to this answer's own speed, plus the loop's per-token work (runtime.engine.plain_estimate). None
    # while no plain step was ever timed: then no speed-up is claimed.
    plain_step_s: float | None = None
    spec_off: str | None = None  # on the last Chunk of an answer nothing was drafted for: why
    speedup_note: str | None = None  # why no speed-up is claimed although a plain step is known
    machine_cap: float | None = None  # the cost model's cap for the draft on this machine (runtime.decode.costs)

    @property
    def tok_per_s(self) -> float:
        """Decode speed: tokens after the first cycle over the time after it (prefill excluded)."""
        n = self.tokens - self.first_tokens
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def elapsed_s(self) -> float:
        """From the start of the prefill to the latest token."""
        return self.ttft_s + self.decode_s

    @property
    def plain_s(self) -> float | None:
        """What plain decoding would have taken: the same first cycle (the prefill and first token cost both the
        same), then one measured parent step per further token, the end-of-generation token included (plain
        decoding computes it too)."""
        if self.plain_step_s is None or self.tokens <= self.first_tokens:
            return None
        return self.ttft_s + (self.tokens + self.end_token - self.first_tokens) * self.plain_step_s

    @property
    def speedup(self) -> float | None:
        """Plain time over actual time (1.4: arrived 1.4 times sooner); None when it cannot be known."""
        plain = None if self.speedup_note else self.plain_s
        return plain / self.elapsed_s if plain is not None and self.elapsed_s > 0 else None

    @property
    def saved_s(self) -> float | None:
        plain = None if self.speedup_note else self.plain_s
        return None if plain is None else plain - self.elapsed_s

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
            "ngram_drafted": self.ngram_drafted,
            "tier_drafted": self.tier_drafted,
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "cycles": self.cycles,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "dropped_turns": self.dropped_turns,
            "stop_reason": self.stop_reason,
            **_speedup_facts(self),
        }


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def _speedup_facts(s: Stats) -> dict[str, Any]:
    """What speculation bought, against plain decoding by the same parent (Stats.as_dict and answer_facts)."""
    return {
        "elapsed_s": round(s.elapsed_s, 4),
        "plain_step_s": _round(s.plain_step_s, 5),
        "plain_s": _round(s.plain_s, 4),
        "speedup": _round(s.speedup, 3),
        "saved_s": _round(s.saved_s, 4),
        "spec_off": s.spec_off,
        "speedup_note": s.speedup_note,
        "machine_cap": s.machine_cap,
    }


@dataclass(frozen=True)
class TokenChoice:
    """A token of the answer with its log-probability under the parent (after a grammar's mask) and the most
    likely tokens in its place, as (text, bytes, logprob): what OpenAI's `logprobs` report."""

    text: str
    bytes: bytes
    logprob: float
    top: tuple[tuple[str, bytes, float], ...] = ()


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
    calls: tuple[CallDelta, ...] = ()  # tool-call pieces (with tools, call text is here, not in `text`)
    logprobs: tuple[TokenChoice, ...] = ()  # per token of `tokens`, when ChatOptions.logprobs asked


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
        "forced": s.forced,  # tokens the grammar (a response_format) decided: no draft, no verify row
        "reused_tokens": s.reused_tokens,
        "dropped_turns": s.dropped_turns,
        "stop_reason": s.stop_reason,
        **_speedup_facts(s),
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
    """Where the tokens not sampled one by one came from: "3 forced by the grammar, 12 from n-gram, 40 from
    Q4_K_M" ("" when none were)."""
    words = {"ngram": "n-gram"}
    parts = [f"{n} from {words.get(k, k.upper())}" for k, n in facts.get("draft_sources", {}).items() if n]
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
    line = "[" + " · ".join(p for p in [*parts, facts["placement"]] if p) + "]"
    return line + (f"\n[{facts['precision_note']}]" if facts.get("precision_note") else "")
