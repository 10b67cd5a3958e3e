"""The speculative verify loop (DESIGN.md §5) as a generator of `Step`s.

The state is the token sequence `seq`. At the top of every cycle the parent's KV cache holds exactly
`seq[:-1]`; the draft's holds some prefix of `seq`. One cycle: the draft catches up and proposes up to k
tokens; the parent decodes `[seq[-1]] + drafts` in ONE batch with logits for those rows only; the longest
agreeing prefix is kept and the first miss corrected (greedy), or each draft is accepted with probability
min(1, p/q) and a rejection resampled from the residual (sampled); both caches roll back to what was kept.
With no draft the same code is plain decoding: a verify batch of one token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from runtime.llama_backend import LlamaBackend
from runtime.sampling import SamplingParams, apply_penalties, sample, verify_sampled, warp


@dataclass(frozen=True)
class Step:
    """What one cycle produced: tokens to emit (in order) and the facts of the cycle."""

    tokens: tuple[int, ...]
    from_draft: tuple[bool, ...]  # True where the token is an accepted draft token
    drafted: int
    accepted: int
    k: int  # the draft length this cycle asked for
    draft_s: float
    verify_s: float


@dataclass(frozen=True)
class SpecConfig:
    """Draft length: start at `k`; adaptive k grows after full accepts and shrinks after early misses."""

    k: int = 4
    k_max: int = 6
    adaptive: bool = True
    p_min: float = 0.0  # greedy drafting stops when the draft's top probability falls below this

    def next_k(self, k: int, drafted: int, accepted: int) -> int:
        if not self.adaptive or drafted == 0:
            return k
        if accepted == drafted and drafted == k:
            return min(k + 1, self.k_max)
        if accepted < drafted // 2:
            return max(1, k - 1)
        return k


def sync_prefix(model: LlamaBackend, seq: Sequence[int], keep_last: int) -> None:
    """Make the KV cache hold `seq[:len(seq) - keep_last]`, reusing the longest common prefix."""
    target = len(seq) - keep_last
    n = min(model.common_prefix(seq), target)
    model.truncate(n)
    if n < target:
        model.decode(seq[n:target])


def _pick(row: np.ndarray, params: SamplingParams, history: Sequence[int]) -> int:
    """Greedy choice with llama.cpp's penalties (plain argmax when there are none)."""
    if params.repeat_penalty == 1.0:
        return int(np.argmax(row))
    return int(np.argmax(apply_penalties(row, history, params)))


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
) -> Iterator[Step]:
    """Yield Steps until the context is full, `cancel` is set, or the consumer stops iterating.

    Stopping (EOS, max tokens, stop strings) is the consumer's job: whatever it keeps, both caches stay
    valid prefixes of the sequence, so the next turn reuses them through `sync_prefix`.
    """
    spec = spec or SpecConfig()
    rng = np.random.default_rng(params.seed)
    seq = [int(t) for t in prompt]
    if not seq:
        raise ValueError("an empty prompt cannot be continued")
    parent.set_abort_event(cancel)
    sync_prefix(parent, seq, keep_last=1)
    k = spec.k if draft is not None else 0
    while cancel is None or not cancel.is_set():
        room = parent.n_ctx - parent.n_past  # the verify batch is 1 + len(drafts) tokens
        if room < 1:
            return
        t0 = time.perf_counter()
        drafts, qs = _propose(draft, seq, min(k, room - 1), params, spec, rng) if draft and k else ([], [])
        t1 = time.perf_counter()
        rows = parent.decode([seq[-1], *drafts], range(len(drafts) + 1))
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

        # Roll back: keep seq + accepted drafts; the corrected/bonus token is the new last, not yet cached.
        kept = len(seq) + accepted
        parent.truncate(kept)
        if draft is not None:
            draft.truncate(min(draft.n_past, kept))
        seq.extend(emitted)
        yield Step(tuple(emitted), tuple(flags), len(drafts), accepted, k, t1 - t0, t2 - t1)
        k = spec.next_k(k, len(drafts), accepted) if draft is not None else 0


def _propose(
    draft: LlamaBackend,
    seq: list[int],
    k: int,
    params: SamplingParams,
    spec: SpecConfig,
    rng: np.random.Generator,
) -> tuple[list[int], list[np.ndarray]]:
    """Up to k draft tokens, and (sampled mode) the warped draft distributions they were drawn from."""
    drafts: list[int] = []
    qs: list[np.ndarray] = []
    if k <= 0:
        return drafts, qs
    # Catch up on everything the draft has not seen, the last token included, in one batch.
    n = min(draft.common_prefix(seq), len(seq) - 1)
    draft.truncate(n)
    logits = draft.decode(seq[n:], [len(seq) - n - 1])[0]
    for i in range(k):
        history = seq + drafts
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
        if i + 1 < k:
            logits = draft.decode([tok], [0])[0]
    return drafts, qs
