"""The speculative verify loop (docs/architecture.md §4) as a generator of `Step`s.

The state is the token sequence `seq`. At the top of every cycle after the first, the parent's KV cache
holds exactly `seq[:-1]`; the draft's holds some prefix of `seq`. One cycle: the controller (controller.py)
picks a draft source and k, or none; the source proposes up to k tokens (n-gram lookup for free, or the
quantized draft after catching up); the parent decodes `[seq[-1]] + drafts` in ONE batch with logits for
those rows only; the longest agreeing prefix is kept and the first miss corrected (greedy), or each draft is
accepted with probability min(1, p/q) and a rejection resampled from the residual (sampled); both caches roll
back to what was kept. The first cycle is the parent's prefill alone, so the first token comes as soon as in
plain decoding. With no draft the same code is plain decoding: a verify batch of one token.

Under a grammar (a `Constraint`: JSON schema, tool call) every row is masked by the grammar's state after the
tokens before it, so drafts are judged against what constrained decoding would pick, and drafts are cut to
what the grammar allows as they are proposed. Where the grammar leaves exactly one token, that token is
*forced*: it joins the batch without a logit row (no model could choose otherwise), in the first cycle too,
and costs no draft step. Once the grammar is complete, the end token follows without a decode.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from runtime.decode.controller import K_MAX, NGRAM, Controller, CycleOutcome, Offer, ngram_key
from runtime.decode.grammar import Constraint
from runtime.decode.llama_backend import LlamaBackend
from runtime.decode.ngram import NgramIndex
from runtime.decode.sampling import SamplingParams, apply_penalties, one_hot, sample, verify_sampled, warp

FORCED_MAX = 64  # forced tokens joined to one batch at most (a long enum value, a tool call's wrapper)


@dataclass(frozen=True)
class Step:
    """What one cycle produced: tokens to emit (in order) and the facts of the cycle."""

    tokens: tuple[int, ...]
    from_draft: tuple[bool, ...]  # True where the token is an accepted draft token
    drafted: int
    accepted: int
    k: int  # the draft length the controller chose this cycle (0: a plain step)
    draft_s: float
    verify_s: float
    source: str | None = None  # "ngram", the draft tier's name, or None for a plain step
    forced: int = 0  # leading tokens the grammar forced (counted in neither drafted nor accepted)
    logprobs: tuple[TokenLogprob, ...] = ()  # per token, when asked for (generate_steps' `logprobs`)


@dataclass(frozen=True)
class TokenLogprob:
    """A token's log-probability under the parent's own distribution (temperature 1, no penalties) after the
    grammar's mask, and the `top` most likely tokens there as (token, logprob). A forced token has 0.0: the
    mask left it the only choice."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def _logprob(row: np.ndarray, token: int, top: int) -> TokenLogprob:
    m = float(row.max())
    norm = m + float(np.log(np.exp(row - m).sum()))
    best: list[tuple[int, float]] = []
    if top:
        idx = np.argpartition(-row, min(top, row.size - 1))[:top]
        idx = idx[np.argsort(-row[idx], kind="stable")]
        best = [(int(i), float(row[i]) - norm) for i in idx if np.isfinite(row[i])]
    return TokenLogprob(token, float(row[token]) - norm, tuple(best))


def _certain(token: int, top: int) -> TokenLogprob:
    """A token the grammar left as the only choice: log-probability 0, itself the only alternative."""
    return TokenLogprob(token, 0.0, ((token, 0.0),)[:top])


def take(step: Step, produced: int, max_tokens: int, is_end: Callable[[int], bool]) -> tuple[Step, str | None]:
    """The step cut where the answer ends: before an end-of-generation token ("eos") or at the token budget
    ("max_tokens"); else the whole step and None. One rule for the Engine and the benchmark's raw timing."""
    for i, tok in enumerate(step.tokens):
        if is_end(tok):
            return _cut(step, i), "eos"
        if produced + i + 1 >= max_tokens:
            return _cut(step, i + 1), "max_tokens"
    return step, None


def _cut(step: Step, n: int) -> Step:
    return replace(
        step, tokens=step.tokens[:n], from_draft=step.from_draft[:n], forced=min(step.forced, n),
        logprobs=step.logprobs[:n],
    )


@dataclass(frozen=True)
class SpecConfig:
    """How the loop drafts. k None: the controller picks k (and the source) every cycle from the cost model."""

    k: int | None = None  # a fixed draft length, always used when a source can propose
    ngram: bool = True  # prompt lookup as a draft source (costs nothing, needs no memory)
    p_min: float = 0.0  # greedy drafting stops when the draft's top probability falls below this
    k_max: int = K_MAX["tier"]  # the longest tier draft the controller considers (and the benchmark times)
    # A draft that has fallen further behind than this catches up on the last `draft_window` tokens only
    # (its own positions start at 0): a cheaper catch-up for a long prompt, at some cost in acceptance.
    # 0: always the whole context.
    draft_window: int = 0
    # Under a grammar, tokens it forces join the batch unverified (False: one token per step, as plain
    # constrained decoding runs; the benchmark's baseline).
    forced: bool = True


def _pick(row: np.ndarray, params: SamplingParams, history: Sequence[int]) -> int:
    """Greedy choice with llama.cpp's penalties (plain argmax when there are none)."""
    if params.repeat_penalty == 1.0:
        return int(np.argmax(row))
    return int(np.argmax(apply_penalties(row, history, params)))


def _size_ratio(draft: LlamaBackend, parent: LlamaBackend) -> float:
    """Draft bytes over parent bytes: on a CPU a decode step streams the weights, so this prices a step."""
    try:
        return draft.path.stat().st_size / max(1, parent.path.stat().st_size)
    except OSError:
        return 0.5


def _top_prob(row: np.ndarray) -> float:
    m = row.max()
    return float(1.0 / np.exp(row - m).sum())


def generate_steps(
    parent: LlamaBackend,
    draft: LlamaBackend | None,
    prompt: Sequence[int],
    params: SamplingParams,
    spec: SpecConfig | None = None,
    cancel: threading.Event | None = None,
    *,
    controller: Controller | None = None,
    draft_name: str = "draft",
    answer_tokens: int = 16,
    max_tokens: int = 1 << 30,
    constraint: Constraint | None = None,
    logprobs: int | None = None,
) -> Iterator[Step]:
    """Yield Steps until the context is full, `cancel` is set, or the consumer stops iterating.

    `answer_tokens` is the least the answer is expected to run (the router's level as a prior), `max_tokens`
    its budget: a draft whose catch-up the rest of the answer is not expected to repay is not started. Stopping (EOS,
    max tokens, stop strings) is the consumer's job: whatever it keeps, both caches stay valid prefixes of
    the sequence, so the next turn reuses their common prefix. `constraint` (fresh, at the answer's first
    token) holds the answer to a grammar: it advances with every emitted token. `logprobs` (a count of
    alternatives, 0 for none) adds each token's `TokenLogprob`, read from the verify row that chose it.
    """
    seq = [int(t) for t in prompt]
    if not seq:
        raise ValueError("an empty prompt cannot be continued")
    # `cancel` is llama.cpp's abort hook for this answer's decodes only (Stop reaches a draft's long catch-up
    # too): bound on entry and cleared when the steps end, so no later decode (a cost probe, a calibration,
    # the next answer's prefill) can be aborted by this answer's finished job.
    with contextlib.ExitStack() as hooks:
        for model in (parent, draft):
            if model is not None:
                hooks.enter_context(model.abort_on(cancel))
        yield from _steps(
            parent, draft, seq, params, spec or SpecConfig(), cancel, controller, draft_name, answer_tokens,
            max_tokens, constraint, logprobs,
        )


def _steps(
    parent: LlamaBackend,
    draft: LlamaBackend | None,
    seq: list[int],
    params: SamplingParams,
    spec: SpecConfig,
    cancel: threading.Event | None,
    controller: Controller | None,
    draft_name: str,
    answer_tokens: int,
    max_tokens: int,
    constraint: Constraint | None,
    logprobs: int | None,
) -> Iterator[Step]:
    """The body of `generate_steps`, with the abort hooks bound."""
    controller = controller or Controller(fixed_k=spec.k)
    rng = np.random.default_rng(params.seed)
    ngram = NgramIndex() if spec.ngram else None
    offset = 0  # the draft's cache holds seq[offset : offset + draft.n_past]
    if draft is not None:
        # Keep what the draft shares with this sequence; from here on its cache is always a slice of `seq`
        # from `offset` (it decodes only `seq` and drafts, and rolls back to what was kept), so `n_past`
        # says how far behind it is.
        draft.truncate(min(draft.common_prefix(seq), len(seq) - 1))
        size_ratio = _size_ratio(draft, parent)
    # The first cycle's batch is the rest of the prompt: the prefill and the first token are one decode.
    n = min(parent.common_prefix(seq), len(seq) - 1)
    parent.truncate(n)
    pending = seq[n:-1]
    produced = 0
    first = True
    while cancel is None or not cancel.is_set():
        room = parent.n_ctx - parent.n_past - len(pending)  # the verify batch is 1 + len(drafts) tokens
        if room < 1:
            return
        t0 = time.perf_counter()
        forced: list[int] = []
        if constraint is not None:
            if constraint.done:  # only an end token may follow: no model needs asking
                end = min(constraint.eos_tokens)
                lp = () if logprobs is None else (_certain(end, logprobs),)
                yield Step((end,), (False,), 0, 0, 0, 0.0, 0.0, logprobs=lp)
                return
            if spec.forced:
                forced = _forced(constraint, min(room - 1, FORCED_MAX))
                if forced:  # in the sequence from here on; in the batch without logit rows
                    pending = [*pending, seq[-1], *forced[:-1]]
                    seq.extend(forced)
                    constraint.consume(forced)
                    room -= len(forced)
        offers: list[Offer] = []
        candidates: list[int] = []
        match = 0
        if ngram is not None:
            candidates, match = ngram.match(seq, min(K_MAX[NGRAM], room - 1))
            if constraint is not None:  # never spend a verify row on a token the grammar forbids
                candidates = candidates[: constraint.valid_prefix(candidates)]
            offers.append(Offer(NGRAM, NGRAM, len(candidates), key=ngram_key(match)))
        windowed = False
        if draft is not None:
            behind = len(seq) - offset - draft.n_past
            windowed = 0 < spec.draft_window < behind
            catch_up = spec.draft_window if windowed else behind
            offers.append(Offer(draft_name, "tier", min(spec.k_max, room - 1), catch_up, size_ratio))
        if first:  # nothing may come before the first token: the first cycle is the parent's alone
            source, k = None, 0
        else:
            # How much more answer will repay a draft's catch-up: as much as has come so far (an answer
            # that ran long tends to run on), at least the level's prior, at most the token budget. So a
            # costly catch-up starts only once the answer has shown it is long (the ski-rental rule).
            horizon = min(max_tokens - produced, max(produced, answer_tokens))
            decision = controller.plan_cycle(offers, max(1, horizon))
            source, k = decision.source, decision.k
        caught_up, catch_up_s = 0, 0.0
        if source == NGRAM:
            drafts = candidates[:k]
            qs = [] if params.greedy else [one_hot(parent.n_vocab, d) for d in drafts]
        elif source is not None and draft is not None:
            if windowed:  # start the draft afresh on the last tokens instead of the whole gap
                draft.truncate(0)
                offset = len(seq) - spec.draft_window
            drafts, qs, caught_up, catch_up_s = _propose(draft, seq, offset, k, params, spec, rng, constraint)
        else:
            drafts, qs = [], []
        t1 = time.perf_counter()
        rows = parent.decode([*pending, seq[-1], *drafts], range(len(pending), len(pending) + len(drafts) + 1))
        if constraint is not None:  # row i as constrained decoding sees it: after seq and drafts[:i]
            constraint.mask_rows(rows, drafts)
        t2 = time.perf_counter()

        emitted: list[int] = []
        flags: list[bool] = []
        for i, d in enumerate(drafts):
            history = seq + drafts[:i]  # penalties count earlier drafts as already generated
            if params.greedy:
                tok = _pick(rows[i], params, history)
                ok = tok == d
            else:
                ok, tok = verify_sampled(warp(rows[i], params, history), qs[i], d, rng)
            emitted.append(tok)
            flags.append(ok)
            if not ok:
                break
        else:  # every draft accepted (or none proposed): the bonus token from the last row
            history = seq + drafts
            last = rows[len(drafts)]
            emitted.append(_pick(last, params, history) if params.greedy else sample(warp(last, params, history), rng))
            flags.append(False)
        accepted = sum(flags)

        if not pending:  # a prefill is no sample of a verify's cost
            kind = NGRAM if source == NGRAM else "tier"
            key = ngram_key(match) if source == NGRAM else None
            facts = CycleOutcome(source, kind, len(drafts), accepted, t1 - t0, t2 - t1, caught_up, catch_up_s, key)
            controller.record(facts)
        pending, first = [], False
        # Roll back: keep seq + accepted drafts; the corrected/bonus token is the new last, not yet cached.
        kept = len(seq) + accepted
        parent.truncate(kept)
        if draft is not None:
            draft.truncate(min(draft.n_past, kept - offset))
        seq.extend(emitted)
        if constraint is not None:
            constraint.consume(emitted)
        produced += len(forced) + len(emitted)
        tokens, flags = (*forced, *emitted), (*(False,) * len(forced), *flags)
        lps: tuple[TokenLogprob, ...] = ()
        if logprobs is not None:  # emitted[i] was chosen from rows[i]
            lps = (
                *(_certain(t, logprobs) for t in forced),
                *(_logprob(rows[i], t, logprobs) for i, t in enumerate(emitted)),
            )
        yield Step(tokens, flags, len(drafts), accepted, k, t1 - t0, t2 - t1, source, len(forced), lps)


def _propose(
    draft: LlamaBackend,
    seq: list[int],
    offset: int,
    k: int,
    params: SamplingParams,
    spec: SpecConfig,
    rng: np.random.Generator,
    constraint: Constraint | None = None,
) -> tuple[list[int], list[np.ndarray], int, float]:
    """Up to k draft tokens, (sampled mode) the warped draft distributions they were drawn from, and how
    many tokens the draft caught up on first, in how many seconds. Under a grammar the draft's rows are
    masked as the parent's will be, so it proposes only what the grammar allows (and q is masked too)."""
    drafts: list[int] = []
    qs: list[np.ndarray] = []
    if k <= 0:
        return drafts, qs, 0, 0.0
    # Catch up on everything the draft has not seen, the last token included, in one batch (its cache is
    # seq[offset : offset + n_past]: generate_steps keeps it so).
    t0 = time.perf_counter()
    n = offset + draft.n_past
    logits = draft.decode(seq[n:], [len(seq) - n - 1])[0]
    caught_up, catch_up_s = len(seq) - n, time.perf_counter() - t0
    for i in range(k):
        history = seq + drafts
        if constraint is not None:
            if constraint.done:  # past the grammar's end: nothing left worth drafting
                break
            constraint.mask_logits(logits)
        if params.greedy:
            if spec.p_min > 0 and _top_prob(logits) < spec.p_min:
                break
            tok = _pick(logits, params, history)
        else:
            # Sampled mode must SAMPLE from q (an argmax draft would bias the output).
            q = warp(logits, params, history)
            tok = sample(q, rng)
            qs.append(q)
        drafts.append(tok)
        if constraint is not None:
            constraint.consume(tok)  # taken back below: the verify decides what stays
        if i + 1 < k:
            logits = draft.decode([tok], [0])[0]
    if constraint is not None:
        constraint.rollback(len(drafts))
    return drafts, qs, caught_up, catch_up_s


def _forced(constraint: Constraint, limit: int) -> list[int]:
    """The tokens the grammar leaves no choice about from here (each the only one its mask allows), at most
    `limit`; the constraint is left as it was."""
    out: list[int] = []
    try:
        while len(out) < limit and not constraint.done:
            allowed = np.flatnonzero(constraint.allowed_mask())
            if allowed.size != 1:
                break
            out.append(int(allowed[0]))
            constraint.consume(out[-1])
    finally:
        constraint.rollback(len(out))
    return out
