"""What comes back from an answer: a stream of `Chunk`s, each with the answer's cumulative `Stats`, and the
whole `Answer` they make. Plain data: the engine makes them; the CLI, the window, the API, the calibration and
the benchmark read them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from runtime.decode.drafts import offered
from runtime.plan.placement import Plan
from runtime.plan.policy import Choice
from runtime.plan.router import Route

if TYPE_CHECKING:
    from runtime.documents.grounding import Citation
    from runtime.engine.tools import CallDelta


class DraftCount(NamedTuple):
    """One kind of draft source's tokens in an answer: proposed, and accepted by the parent."""

    kind: str
    drafted: int
    accepted: int


def counted(counts: tuple[DraftCount, ...], kind: str, drafted: int, accepted: int) -> tuple[DraftCount, ...]:
    """`counts` with one more proposal of `kind`: `drafted` tokens, `accepted` of them kept."""
    for i, c in enumerate(counts):
        if c.kind == kind:
            return (*counts[:i], DraftCount(kind, c.drafted + drafted, c.accepted + accepted), *counts[i + 1 :])
    return (*counts, DraftCount(kind, drafted, accepted))


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
    # Per kind of draft source that proposed (runtime/decode/drafts), its drafted and accepted tokens; read
    # by kind (`drafted_by`, `accepted_by`), or all under the counters' names (`counters`).
    by_kind: tuple[DraftCount, ...] = ()
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
    machine_cap: float | None = None  # the cap for the draft on this machine (runtime.decode.machine_costs)
    # A thinking model's thought (runtime.engine.thinking), apart: its tokens (in `tokens` too), what was
    # drafted and accepted in its cycles, and its cycles after the first: their tokens and time.
    thinking_tokens: int = 0
    thinking_drafted: int = 0
    thinking_accepted: int = 0
    thinking_decode_tokens: int = 0
    thinking_decode_s: float = 0.0
    # When the answer's parent batches ran far outside the probe's prediction (runtime.engine.plain_estimate's
    # LOAD_BAND): their ratio, above 1 when slower (another program on the cores). What the window names.
    load: float | None = None

    def drafted_by(self, kind: str) -> int:
        return sum(c.drafted for c in self.by_kind if c.kind == kind)

    def accepted_by(self, kind: str) -> int:
        return sum(c.accepted for c in self.by_kind if c.kind == kind)

    def counters(self) -> dict[str, int]:
        """Every registered offered kind's counters by the names it declares (`tier_accepted`, `ngram_drafted`),
        zero where it proposed nothing: accepted, then drafted."""
        accepted = {k.accepted_counter: self.accepted_by(k.name) for k in offered()}
        return accepted | {k.drafted_counter: self.drafted_by(k.name) for k in offered()}

    @property
    def tok_per_s(self) -> float:
        """Decode speed: tokens after the first cycle over the time after it (prefill excluded)."""
        n = self.tokens - self.first_tokens
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def part_facts(self) -> dict[str, dict[str, Any]]:
        """The thought's and the answer's tokens, acceptance and decode speed apart (empty without a thought)."""
        if not self.thinking_tokens:
            return {}

        def facts(tokens: int, drafted: int, accepted: int, n: int, s: float) -> dict[str, Any]:
            return {
                "tokens": tokens,
                "drafted": drafted,
                "accepted": accepted,
                "acceptance": round(accepted / drafted, 4) if drafted else None,
                "tok_per_s": round(n / s, 3) if n > 0 and s > 0 else 0.0,
            }

        answer_n = self.tokens - self.first_tokens - self.thinking_decode_tokens
        return {
            "thinking": facts(
                self.thinking_tokens, self.thinking_drafted, self.thinking_accepted, self.thinking_decode_tokens,
                self.thinking_decode_s,
            ),
            "answer": facts(
                self.tokens - self.thinking_tokens, self.drafted - self.thinking_drafted,
                self.accepted - self.thinking_accepted, answer_n, self.decode_s - self.thinking_decode_s,
            ),
        }

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
            **self.counters(),
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "cycles": self.cycles,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "dropped_turns": self.dropped_turns,
            "stop_reason": self.stop_reason,
            **_speedup_facts(self),
            **self.part_facts(),
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
        "load": s.load,
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
    # On the last Chunk of a grounded answer: the passages it was given, by number (runtime.documents.grounding)
    citations: tuple[Citation, ...] = ()
    thinking: str = ""  # new thought text (a thinking model's, runtime.engine.thinking): never in `text`


@dataclass(frozen=True)
class Answer:
    """A whole answer: its text, its token ids and the last Chunk (stats, route, choice, placement)."""

    text: str
    token_ids: tuple[int, ...]
    last: Chunk
    thinking: str = ""  # a thinking model's thought, apart from `text`


def collect(chunks: Iterable[Chunk], on_text: Callable[[str], None] | None = None) -> Answer:
    """Gather a stream of Chunks into an Answer; `on_text` sees each piece of text as it comes."""
    parts: list[str] = []
    thought: list[str] = []
    ids: list[int] = []
    last = None
    for chunk in chunks:
        thought.append(chunk.thinking)
        if chunk.text:
            parts.append(chunk.text)
            if on_text is not None:
                on_text(chunk.text)
        ids.extend(chunk.tokens)
        last = chunk
    if last is None:
        raise ValueError("the stream ended without its last chunk")
    return Answer("".join(parts), tuple(ids), last, "".join(thought))
