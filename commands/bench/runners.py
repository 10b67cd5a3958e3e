"""One answer per call, timed from the caller's side: through the Engine, or through the stock loop."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from commands.bench.configs import GREEDY, BenchConfig
from runtime.decode.grammar import Grammar
from runtime.decode.llama_backend import LlamaBackend
from runtime.decode.sampling import SamplingParams
from runtime.decode.speculative import Step, take
from runtime.engine.answer import Answer, Stats, collect
from runtime.engine.engine import Engine
from runtime.engine.options import ChatOptions, Message
from runtime.engine.tools import ToolRequest, assemble_calls, call_text

T = TypeVar("T")


def rotated(items: Sequence[T], turn: int) -> list[T]:
    """`items` from the `turn`th on, wrapping: turn after turn each goes first, so none always runs first (or
    last) on a machine the others warmed."""
    k = turn % len(items)
    return [*items[k:], *items[:k]]


def decode_speed(s: Stats) -> float | None:
    """The answer's decode speed; undefined (None) when the whole answer came in the first cycle, which also
    paid for the prefill."""
    return s.tok_per_s if s.tokens > s.first_tokens else None


def timed_answer(engine: Engine, messages: list[Message], options: ChatOptions) -> tuple[Answer, dict[str, Any]]:
    """One answer, collected, and its timings: time to first token, end to end, tokens and decode speed."""
    t0 = time.perf_counter()
    answer = collect(engine.stream_chat(messages, options))
    latency = time.perf_counter() - t0
    s = answer.last.stats
    return answer, {"ttft_s": s.ttft_s, "latency_s": latency, "tokens": s.tokens, "tok_per_s": decode_speed(s)}


class StockRunner:
    """llama-cpp-python's `Llama.generate`, greedy, on the same tokens: the honest peer for plain decoding."""

    def __init__(self, engine: Engine, tier: str, lookup: bool = False) -> None:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        from runtime.machine.hardware import ensure_backends
        from runtime.machine.llama_log import route_llama_log

        route_llama_log()
        ensure_backends()
        threads = engine.backend(tier).threads
        self.llm = llama_cpp.Llama(
            str(engine.model.tier_path(tier)),
            n_ctx=engine.settings.n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=True,  # no stdout/stderr redirection; the log is routed through `logging`
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10) if lookup else None,
            logits_all=lookup,  # the library's speculation requires all logits; ours never does
        )
        self.engine = engine
        self.tier = tier

    def run(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        parent = self.engine.backend(self.tier)
        tokens = self.engine.render(parent, [{"role": "user", "content": prompt}])
        self.llm.reset()
        t0 = time.perf_counter()
        t_first = None
        out: list[int] = []
        for tok in self.llm.generate(tokens, temp=0.0, top_k=1, reset=True):
            now = time.perf_counter()
            t_first = t_first or now
            one = Step((int(tok),), (False,), drafted=0, accepted=0, k=0, draft_s=0.0, verify_s=0.0)
            step, ended = take(one, len(out), max_tokens, parent.is_end_of_generation)
            out.extend(step.tokens)
            if ended:
                break
        end = time.perf_counter()
        decode_s = end - (t_first or end)
        return {
            "tokens": len(out),
            "ttft_s": (t_first or end) - t0,
            "tok_per_s": (len(out) - 1) / decode_s if len(out) > 1 and decode_s > 0 else None,
            "latency_s": end - t0,
            "drafted": 0,
            "accepted": 0,
            "acceptance": None,
            "level": None,
            "text": parent.detokenize(out),
            "token_ids": out,
            "overhead": None,
        }


def run_engine(
    engine: Engine,
    config: BenchConfig,
    prompt: str,
    max_tokens: int,
    sampling: SamplingParams | None = GREEDY,
    grammar: Grammar | None = None,
    tools: ToolRequest | None = None,
) -> dict[str, Any]:
    engine.reset_caches()
    options = replace(config.options(max_tokens, sampling), grammar=grammar, tools=tools)
    llama0 = engine.llama_seconds()
    t0 = time.perf_counter()
    chunks = list(engine.stream_chat([{"role": "user", "content": prompt}], options))
    wall = time.perf_counter() - t0
    answer = collect(chunks)
    calls = assemble_calls([d for c in chunks for d in c.calls])
    last, s = answer.last, answer.last.stats
    return {
        "tokens": s.tokens,
        "ttft_s": s.ttft_s,
        "tok_per_s": decode_speed(s),
        "latency_s": wall,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "acceptance": s.acceptance,
        **s.counters(),  # every kind of draft source's drafted and accepted tokens (`tier_accepted`, ...)
        "forced": s.forced,
        "grammar_s": s.grammar_s,
        "cycles": s.cycles,
        "level": last.route.level,
        "parent": last.choice.parent,
        "draft": last.choice.draft,
        # Calls count as text, in one canonical form, so "same text" compares them too.
        "text": answer.text + "".join(call_text(c["function"]["name"], c["function"]["arguments"]) for c in calls),
        "calls": [{"function": c["function"]} for c in calls],
        "token_ids": list(answer.token_ids),
        # Python time outside llama_decode, as a share of the whole answer (prefill included).
        "overhead": max(0.0, 1.0 - (engine.llama_seconds() - llama0) / wall) if wall > 0 else None,
        "plan_ram_bytes": last.placement.ram_bytes,
        # A thinking model's answer: the thought's and the answer's tokens, acceptance and speed apart.
        **s.part_facts(),
    }


def batch_costs(backends: dict[str, LlamaBackend], n_max: int, rounds: int = 5) -> dict[str, dict[int, float]]:
    """Milliseconds per decode of n tokens (logits for all n rows), per tier, for v(n) and c.

    Interleaved: each round times every tier at every n once, so drifts in memory speed (page-cache
    huge pages settle over minutes here) hit all sizes alike; medians over rounds. A tier is timed only up to
    its exact-rows bound (llama_backend.exact_rows): a verify never decodes more rows at once, so a cap from
    larger batches would promise what the loop cannot use.
    """
    bases = {}
    tiers = list(backends)
    for tier, b in backends.items():
        b.truncate(0)
        bases[tier] = b.tokenize(
            "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n" * 3
        )
        b.decode(bases[tier])
    top = {t: min(n_max, b.exact_rows or n_max) for t, b in backends.items()}
    samples: dict[str, dict[int, list[float]]] = {t: {n: [] for n in range(1, top[t] + 1)} for t in tiers}
    for _ in range(rounds):
        for tier in tiers:
            b, base = backends[tier], bases[tier]
            for n in range(1, top[tier] + 1):
                t = time.perf_counter()
                b.decode(base[:n], range(n))
                samples[tier][n].append(time.perf_counter() - t)
                b.truncate(len(base))
    for b in backends.values():
        b.truncate(0)
    return {t: {n: statistics.median(xs) * 1000 for n, xs in row.items()} for t, row in samples.items()}


def agreement(tokens: list[int], reference: list[int]) -> float:
    """Share of the reference's tokens reproduced before the first divergence."""
    n = 0
    for a, b in zip(tokens, reference, strict=False):
        if a != b:
            break
        n += 1
    return n / len(reference) if reference else 1.0
