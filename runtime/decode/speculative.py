"""The speculative verify loop (docs/architecture.md §4) as a generator of `Step`s.

The state is the token sequence `seq`. At the top of every cycle after the first, the parent's KV cache
holds exactly `seq[:-1]`; each draft source keeps its own state a valid prefix of `seq`. One cycle: certain
tokens (the grammar's forced ones) join the batch; every other source offers what it can propose
(`DraftSource.offer`: n-gram lookup for free, a quantized tier after a catch-up; runtime/decode/drafts) and
the controller (controller.py) picks one and k, or none; that source proposes up to k tokens; the parent
decodes `[seq[-1]] + drafts` in ONE batch with logits for those rows only; the longest agreeing prefix is
kept and the first miss corrected (greedy), or each draft is accepted with probability min(1, p/q) and a
rejection resampled from the residual (sampled); the parent and every source roll back to what was kept.
The first cycle is the parent's prefill alone, so the first token comes as soon as in plain decoding. With
no source the same code is plain decoding: a verify batch of one token.

Under a grammar (a `Constraint`: JSON schema, tool call) every row is masked by the grammar's state after the
tokens before it, so drafts are judged against what constrained decoding would pick, and drafts are cut to
what the grammar allows as they are proposed. Where the grammar leaves exactly one token, that token is
*forced* (runtime/decode/drafts/forced.py): it joins the batch without a logit row (no model could choose
otherwise), in the first cycle too, and costs no draft step. Once the grammar is complete, the end token
follows without a decode.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from runtime.decode.constraint import Constraint
from runtime.decode.controller import NGRAM as NGRAM  # read from here by tests/test_controller.py
from runtime.decode.controller import Controller, CycleOutcome, Offer
from runtime.decode.draft_source import Context, DraftSource, Proposal
from runtime.decode.drafts import SpecConfig, build_sources
from runtime.decode.drafts.budget_close import ThoughtBudget
from runtime.decode.llama_backend import LlamaBackend
from runtime.decode.sampling import SamplingParams, pick, sample, verify_sampled, warp
from runtime.decode.suffix_index import SuffixIndex


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
    source: str | None = None  # the source's name ("ngram", a draft tier's), or None for a plain step
    forced: int = 0  # leading tokens the grammar forced (counted in neither drafted nor accepted)
    logprobs: tuple[TokenLogprob, ...] = ()  # per token, when asked for (Decoding.logprobs)
    kind: str | None = None  # the source's kind (runtime/decode/drafts): whose counters drafted/accepted go to


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
class Decoding:
    """What one answer asks of the loop: how to sample, its draft sources (fresh ones: they keep this
    answer's state) and the controller that picks among them each cycle, how long the answer is expected to
    run and may run, a grammar, and log-probabilities."""

    params: SamplingParams = field(default_factory=SamplingParams)
    sources: tuple[DraftSource, ...] = ()  # none: plain decoding
    controller: Controller | None = None  # None: a fresh one that picks k itself
    # The least the answer is expected to run (the router's level as a prior) and its budget: a draft whose
    # catch-up the rest of the answer is not expected to repay is not started.
    answer_tokens: int = 16
    max_tokens: int = 1 << 30
    # Holds the answer to a grammar (fresh, at the answer's first token): it advances with every emitted token.
    constraint: Constraint | None = None
    # Adds each token's `TokenLogprob` (a count of alternatives, 0 for none), read from the row that chose it.
    logprobs: int | None = None

    @classmethod
    def drafting(
        cls,
        spec: SpecConfig | None = None,
        draft: LlamaBackend | None = None,
        draft_name: str = "draft",
        *,
        controller: Controller | None = None,
        said: SuffixIndex | None = None,
        party: str = "",
        sibling: tuple[str, LlamaBackend] | None = None,
        thought: ThoughtBudget | None = None,
        **fields: Any,
    ) -> Decoding:
        """The sources `spec` switches on (`draft` as the tier draft, named `draft_name`; `said`, the model's
        pool of earlier sequences, read and written for `party`; `sibling`, a draft model's source name and
        backend; `thought`, a thinking model's budget), a controller with its fixed k unless one is given, and
        `fields` as they are."""
        spec = spec or SpecConfig()
        controller = controller or Controller(fixed_k=spec.k)
        sources = build_sources(spec, draft, draft_name, said, party, sibling, thought)
        return cls(sources=sources, controller=controller, **fields)


def generate_steps(
    parent: LlamaBackend,
    prompt: Sequence[int],
    decoding: Decoding | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[Step]:
    """Yield Steps until the context is full, `cancel` is set, or the consumer stops iterating.

    Stopping (EOS, max tokens, stop strings) is the consumer's job: whatever it keeps, every cache stays a
    valid prefix of the sequence, so the next turn reuses their common prefix.
    """
    seq = [int(t) for t in prompt]
    if not seq:
        raise ValueError("an empty prompt cannot be continued")
    decoding = decoding or Decoding()
    # `cancel` is llama.cpp's abort hook for this answer's decodes only (Stop reaches a draft's long catch-up
    # too): bound on entry and cleared when the steps end, so no later decode (a cost probe, a calibration,
    # the next answer's prefill) can be aborted by this answer's finished job.
    with contextlib.ExitStack() as hooks:
        hooks.enter_context(parent.abort_on(cancel))
        for source in decoding.sources:
            hooks.enter_context(source.abort_on(cancel))
        yield from _steps(parent, seq, decoding, cancel)


def _steps(parent: LlamaBackend, seq: list[int], decoding: Decoding, cancel: threading.Event | None) -> Iterator[Step]:
    """The body of `generate_steps`, with the abort hooks bound."""
    params, constraint, logprobs = decoding.params, decoding.constraint, decoding.logprobs
    controller = decoding.controller or Controller()
    rng = np.random.default_rng(params.seed)
    sources = decoding.sources
    certain = [s for s in sources if not s.kind.verified]  # their tokens join the batch unverified
    offering = [s for s in sources if s.kind.verified]  # they compete in the controller each cycle
    for source in sources:
        source.begin(seq, Context(parent, params, rng, constraint, time.perf_counter))
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
        if constraint is not None and constraint.done:  # only an end token may follow: no model needs asking
            end = min(constraint.eos_tokens)
            lp = () if logprobs is None else (_certain(end, logprobs),)
            yield Step((end,), (False,), 0, 0, 0, 0.0, 0.0, logprobs=lp)
            return
        forced: list[int] = []
        for source in certain:
            got = source.propose(seq, room - 1).tokens
            if got:  # in the sequence from here on; in the batch without logit rows
                pending = [*pending, seq[-1], *got[:-1]]
                seq.extend(got)
                if constraint is not None:
                    constraint.consume(got)
                room -= len(got)
                forced += got
        # After the prefill every batch is decoded in pieces of at most `exact_rows`, so that each row is what
        # one-token decoding computes (llama_backend); drafts fit one piece, forced tokens may take several.
        rows_max = None if first else parent.exact_rows
        offers = [source.offer(seq, room if rows_max is None else min(room, rows_max)) for source in offering]
        if first:  # nothing may come before the first token: the first cycle is the parent's alone
            chosen, k = None, 0
        else:
            # How much more answer will repay a draft's catch-up: as much as has come so far (an answer
            # that ran long tends to run on), at least the level's prior, at most the token budget. So a
            # costly catch-up starts only once the answer has shown it is long (the ski-rental rule).
            horizon = min(decoding.max_tokens - produced, max(produced, decoding.answer_tokens))
            decision = controller.plan_cycle(offers, max(1, horizon))
            chosen, k = _source(offering, offers, decision.source), decision.k
        proposal = chosen[0].propose(seq, k) if chosen else Proposal([])
        drafts, qs = proposal.tokens, proposal.qs
        t1 = time.perf_counter()
        batch = [*pending, seq[-1], *drafts]
        rows = parent.decode(batch, range(len(pending), len(pending) + len(drafts) + 1), max_rows=rows_max)
        if constraint is not None:  # row i as constrained decoding sees it: after seq and drafts[:i]
            constraint.mask_rows(rows, drafts)
        t2 = time.perf_counter()

        emitted: list[int] = []
        flags: list[bool] = []
        for i, d in enumerate(drafts):
            history = seq + drafts[:i]  # penalties count earlier drafts as already generated
            if params.greedy:
                tok = pick(rows[i], params, history)
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
            emitted.append(pick(last, params, history) if params.greedy else sample(warp(last, params, history), rng))
            flags.append(False)
        accepted = sum(flags)

        name, kind = (chosen[0].name, chosen[0].kind.name) if chosen else (None, None)
        if not pending:  # a prefill is no sample of a verify's cost
            key = (chosen[1].key or None) if chosen else None
            facts = CycleOutcome(
                name, kind or "", len(drafts), accepted, t1 - t0, t2 - t1, proposal.caught_up, proposal.catch_up_s, key
            )
            controller.record(facts)
        pending, first = [], False
        # Roll back: keep seq + accepted drafts; the corrected/bonus token is the new last, not yet cached.
        kept = len(seq) + accepted
        parent.truncate(kept)
        for source in sources:
            source.rollback(kept)
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
        yield Step(tokens, flags, len(drafts), accepted, k, t1 - t0, t2 - t1, name, len(forced), lps, kind)


def _source(
    offering: Sequence[DraftSource], offers: Sequence[Offer], name: str | None
) -> tuple[DraftSource, Offer] | None:
    """The source the controller chose by name, with its offer this cycle (None: a plain step)."""
    return next(((s, o) for s, o in zip(offering, offers, strict=True) if s.name == name), None)
