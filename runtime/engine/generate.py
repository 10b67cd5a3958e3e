"""Run an `AnswerPlan`: the speculative loop's `Step`s become `Chunk`s, detokenized incrementally so a
multi-byte character is never split, stopping at EOS, max tokens or a stop string (the shape of mlx-lm's
`stream_generate` over `generate_step`)."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

from runtime.decode.controller import Controller, Estimates, Offer
from runtime.decode.drafts.budget_close import ThoughtBudget
from runtime.decode.drafts.tier import KIND as TIER
from runtime.decode.grammar import tokenizer_for
from runtime.decode.llama_backend import LlamaBackend
from runtime.decode.speculative import Decoding, Step, TokenLogprob, generate_steps, take
from runtime.decode.text_stream import TextStream
from runtime.engine import tools
from runtime.engine.answer import Chunk, Stats, TokenChoice, counted
from runtime.engine.answer_plan import AnswerPlan, expected_answer_tokens
from runtime.engine.thinking import Split, ThoughtSplitter
from runtime.errors import Cancelled
from runtime.plan.policy import Choice


def run(plan: AnswerPlan, cancel: threading.Event | None = None) -> Iterator[Chunk]:
    """Stream the plan's answer as Chunks; the last has done=True. The model's estimates are saved after it."""
    parent, options, route = plan.parent, plan.options, plan.decision.route
    choice, placement = plan.decision.choice, plan.decision.placement
    calls = plan.calls
    # The call opener's own token reads as a mark no text can spell (runtime.engine.call_parser).
    text = TextStream(parent.token_bytes, options.stop, calls.marks if calls is not None else None)
    stats = Stats(prompt_tokens=len(plan.prompt), reused_tokens=plan.reused, dropped_turns=plan.dropped)
    t_start = time.perf_counter()
    t_first: float | None = None
    constraint = plan.grammar.constraint(tokenizer_for(parent)) if plan.grammar is not None else None
    # A thinking model's thought is split from the answer on the text; its budget closes it through the tokens
    # (not under a grammar, which the close would break: a tool grammar reads the thought as free text).
    thought = plan.thought
    splitter = ThoughtSplitter(thought.syntax, thought.opened) if thought is not None else None
    budget = None
    if thought is not None and splitter is not None and constraint is None:
        budget = ThoughtBudget(thought.close, thought.budget, lambda: splitter.thinking)
    decoding = Decoding.drafting(
        plan.spec,
        plan.draft,
        choice.draft or "draft",
        controller=plan.controller,
        said=plan.said,
        party=options.cache_key,
        sibling=plan.sibling,
        thought=budget,
        params=plan.sampling,
        answer_tokens=expected_answer_tokens(route),
        max_tokens=options.max_tokens,
        constraint=constraint,
        logprobs=options.logprobs,
    )
    steps = generate_steps(parent, plan.prompt, decoding, cancel)
    reason: str | None = "length"
    try:
        for step in steps:
            now = time.perf_counter()
            if t_first is None:
                t_first = now
            step, reason = take(step, stats.tokens, options.max_tokens, parent.is_end_of_generation)
            emit, emit_flags, hit = text.add(step.tokens, step.from_draft)
            before = stats
            stats = add_step(stats, step, len(step.tokens), now - t_start, now - t_first, reason == "eos")
            was_thinking = splitter is not None and splitter.thinking  # the cycle began inside the thought
            if constraint is not None:
                stats = replace(stats, grammar_s=constraint.seconds)
            stats = plan.plain.judge(stats, step)
            if hit:
                reason = "stop"
            part = splitter.feed(emit, emit_flags) if splitter is not None else Split("", (), emit, emit_flags)
            emit, emit_flags = part.answer, part.answer_flags
            if was_thinking and splitter is not None:
                # A cycle the budget closed: its forced close (first in the step) ends the thought, and what
                # the parent chose after it is answer.
                closed_here = not splitter.thinking and step.forced > 0
                stats = thought_step(stats, before, step, step.forced if closed_here else None)
            found: list[tools.CallDelta] = []
            if calls is not None:  # call text goes out as calls, not as text
                emit, found = calls.feed(emit)
                emit_flags = ()
            yield Chunk(
                emit, step.tokens, step.from_draft, route, choice, placement, stats, draft_chars=emit_flags,
                calls=tuple(found), logprobs=tuple(token_choice(parent, lp) for lp in step.logprobs),
                thinking=part.thought,
            )
            if reason is not None:
                break
        else:
            reason = "cancelled" if cancel is not None and cancel.is_set() else "length"
    except Cancelled:  # the abort hook stopped a decode (a long prefill); the caches are consistent
        reason = "cancelled"
    finally:
        steps.close()
        if plan.plain.stale:
            plan.model.measurements.mark_stale(choice.parent)
    tail, tail_flags = text.finish()
    thought_tail = ""
    if splitter is not None:
        a, b = splitter.feed(tail, tail_flags), splitter.finish()
        thought_tail, tail, tail_flags = a.thought + b.thought, a.answer + b.answer, a.answer_flags + b.answer_flags
    found = []
    if calls is not None:
        tail, found = calls.feed(tail, final=True)
        tail_flags = ()
    stats = replace(stats, stop_reason=reason)
    if stats.drafted == 0:
        why = why_plain(choice, plan.controller.estimates, stats, plan.spec.k_max, plan.draft_bytes_ratio)
        stats = replace(stats, spec_off=why)
    try:
        yield Chunk(
            tail, (), (), route, choice, placement, stats, done=True, draft_chars=tail_flags, calls=tuple(found),
            citations=plan.citations, thinking=thought_tail,
        )
    finally:  # bookkeeping after the answer is delivered: it can neither delay nor fail it
        plan.model.measurements.save()


def why_plain(choice: Choice, estimates: Estimates, stats: Stats, k_max: int, draft_bytes_ratio: float) -> str:
    """Why an answer drafted nothing, in the words the window shows: no draft for the pair, a short answer
    (a caught-up draft would pay, but not its catch-up over this answer), or a draft that would not pay."""
    if choice.draft is None and not choice.ngram:
        return f"no draft for this pair ({choice.why})"
    if estimates.step_s() is None or stats.cycles <= 1:
        return "short answer"  # the first cycle is always the parent's alone
    if choice.draft is None:
        return "n-gram lookup found nothing worth proposing"
    # A copy: asking the controller a hypothetical must not touch the estimates it saves.
    probe = Controller(copy.deepcopy(estimates))
    decision = probe.plan_cycle([Offer(choice.draft, TIER.name, k_max, 0, draft_bytes_ratio)], 1 << 20)
    pays = decision.source is not None and not decision.explore and decision.rate > decision.plain_rate
    return "short answer" if pays else "the draft would not pay on this machine"


def token_choice(parent: LlamaBackend, lp: TokenLogprob) -> TokenChoice:
    """A token's logprob as the API reports it: its text and bytes, and the same for each alternative."""

    def piece(token: int) -> tuple[str, bytes]:
        raw = parent.token_bytes(token)
        return raw.decode("utf-8", errors="replace"), raw

    return TokenChoice(*piece(lp.token), lp.logprob, tuple((*piece(t), x) for t, x in lp.top))


def thought_step(stats: Stats, before: Stats, step: Step, closing: int | None = None) -> Stats:
    """`stats` (after `add_step`) with the cycle that made it counted as thought: whole, or only its first
    `closing` tokens (the budget's close; the rest of that cycle, its drafts and its time are the answer's)."""
    if closing is not None:
        return replace(stats, thinking_tokens=stats.thinking_tokens + closing)
    n = stats.tokens - before.tokens
    later = before.cycles > 0  # the first cycle's time is the prefill's: not a decode speed
    return replace(
        stats,
        thinking_tokens=stats.thinking_tokens + n,
        thinking_drafted=stats.thinking_drafted + step.drafted,
        thinking_accepted=stats.thinking_accepted + step.accepted,
        thinking_decode_tokens=stats.thinking_decode_tokens + (n if later else 0),
        thinking_decode_s=stats.thinking_decode_s + (stats.decode_s - before.decode_s if later else 0.0),
    )


def add_step(stats: Stats, step: Step, n_out: int, elapsed: float, decode_s: float, ended: bool) -> Stats:
    """`stats` counting one more cycle that emitted `n_out` tokens."""
    first = stats.cycles == 0
    return replace(
        stats,
        end_token=int(ended),
        tokens=stats.tokens + n_out,
        ttft_s=elapsed if first else stats.ttft_s,
        first_tokens=n_out if first else stats.first_tokens,
        decode_s=decode_s,
        drafted=stats.drafted + step.drafted,
        accepted=stats.accepted + step.accepted,
        by_kind=stats.by_kind if step.kind is None else counted(stats.by_kind, step.kind, step.drafted, step.accepted),
        draft_s=stats.draft_s + step.draft_s,
        verify_s=stats.verify_s + step.verify_s,
        cycles=stats.cycles + 1,
        forced=stats.forced + step.forced,
    )
