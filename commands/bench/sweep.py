"""The acceptance sweep: f16 with q4_k_m, q3_k_m and q2_k drafts at T=0 and T=1, beside the cost model."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from commands.bench.report import num_text
from commands.bench.runners import batch_costs, rotated
from runtime.decode.controller import speedup
from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.decode.sampling import SamplingParams
from runtime.decode.speculative import Decoding, SpecConfig, generate_steps, take
from runtime.engine.engine import Engine


def predicted_speedup(acceptance: float, k: float, c: float, v: dict[int, float]) -> float:
    """docs/architecture.md §5: [(1 - a^(k+1)) / (1 - a)] / (k c + v(k+1)), k rounded to the nearest measured batch."""
    kk = max(1, min(round(k), max(v) - 1))
    return speedup(acceptance, kk, c, v[kk + 1])


SWEEP_DRAFTS = ("q4_k_m", "q3_k_m", "q2_k")
SWEEP_TEMPERATURES = (0.0, 1.0)
SWEEP_K = 4


def time_steps(
    parent: LlamaBackend,
    draft: LlamaBackend | None,
    prompt: list[int],
    params: SamplingParams,
    spec: SpecConfig,
    max_tokens: int,
) -> dict[str, Any]:
    """One answer straight through the loop, from empty caches; decode speed excludes the first cycle."""
    parent.truncate(0)
    if draft is not None:
        draft.truncate(0)
    tokens = drafted = accepted = cycles = first = 0
    t_first = t_last = 0.0
    steps = generate_steps(parent, prompt, Decoding.drafting(spec, draft, params=params))
    try:
        for step in steps:
            t_last = time.perf_counter()
            cycles += 1
            drafted += step.drafted
            accepted += step.accepted
            step, ended = take(step, tokens, max_tokens, parent.is_end_of_generation)
            tokens += len(step.tokens)
            if cycles == 1:
                t_first, first = t_last, tokens
            if ended:
                break
    finally:
        steps.close()
    decode_s = t_last - t_first
    return {
        "tok_per_s": (tokens - first) / decode_s if tokens > first and decode_s > 0 else None,
        "tokens": tokens,
        "drafted": drafted,
        "accepted": accepted,
        "cycles": cycles,
    }


def sweep(engine: Engine, prompts: list[dict[str, Any]], max_tokens: int, log=print) -> dict[str, Any]:
    """Speed-up against acceptance: f16 with q4_k_m, q3_k_m and q2_k drafts, at temperature 0 and 1.

    The q3_k_m and q2_k drafts are quantized by our quantizer for this experiment only, into a temporary
    folder beside the model, and deleted afterwards. Each row sets the measured speed-up beside the cost
    model's prediction from the acceptance, c and v(n) measured in the same run.
    """
    import tempfile

    from converters.quantize import quantize

    parent = engine.backend("f16")
    opts = LoadOptions(n_ctx=engine.settings.n_ctx, n_threads=engine.settings.n_threads)
    rows = []
    with tempfile.TemporaryDirectory(dir=engine.model.path, prefix="sweep-") as tmp:
        drafts: dict[str, LlamaBackend] = {"q4_k_m": engine.backend("q4_k_m")}
        extra = []
        try:
            for tier in SWEEP_DRAFTS[1:]:
                path = Path(tmp) / f"{tier}.gguf"
                log(f"sweep: quantizing a {tier} draft for this experiment only")
                quantize(engine.model.tier_path("f16"), path, tier)
                drafts[tier] = LlamaBackend(path, opts)
                extra.append(drafts[tier])
            # The sweep measures each tier draft itself: drafting every cycle with a fixed k, no n-gram lookup.
            spec = replace(engine.settings.spec, ngram=False, k=SWEEP_K)
            costs = batch_costs({"f16": parent, **drafts}, spec.k_max + 1)
            v = {n: t / costs["f16"][1] for n, t in costs["f16"].items()}
            names = ["f16", *drafts]
            for temperature in SWEEP_TEMPERATURES:
                params = SamplingParams(temperature=temperature, top_k=40, top_p=0.95, min_p=0.05)
                samples: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
                for i, p in enumerate(prompts):
                    tokens = engine.render(parent, [{"role": "user", "content": p["prompt"]}])
                    for name in rotated(names, i):
                        rec = time_steps(parent, drafts.get(name), tokens, params, spec, max_tokens)
                        samples[name].append(rec)
                        log(
                            f"sweep T={temperature:g} {p['id']} f16<-{name if name != 'f16' else 'none'}: "
                            f"{rec['tok_per_s'] or 0:.1f} tok/s"
                        )
                for name in drafts:
                    mine, base = samples[name], samples["f16"]
                    ratios = [
                        a["tok_per_s"] / b["tok_per_s"]
                        for a, b in zip(mine, base, strict=True)
                        if a["tok_per_s"] and b["tok_per_s"]
                    ]
                    drafted = sum(x["drafted"] for x in mine)
                    accepted = sum(x["accepted"] for x in mine)
                    cycles = sum(x["cycles"] for x in mine)
                    a = accepted / drafted if drafted else 0.0
                    c = costs[name][1] / costs["f16"][1]
                    predicted = predicted_speedup(a, drafted / cycles, c, v) if drafted else None
                    measured = statistics.median(ratios) if ratios else None
                    rows.append(
                        {
                            "draft": name,
                            "temperature": temperature,
                            "acceptance": round(a, 4),
                            "mean_k": round(drafted / cycles, 2) if cycles else None,
                            "c": round(c, 3),
                            "measured_speedup": None if measured is None else round(measured, 4),
                            "predicted_speedup": None if predicted is None else round(predicted, 4),
                            "efficiency": round(measured / predicted, 4) if measured and predicted else None,
                        }
                    )
        finally:
            for b in extra:
                b.close()
    return {"rows": rows, "batch_cost_ms": costs}


def format_sweep(result: dict[str, Any]) -> str:
    lines = [
        "\nacceptance sweep (f16 parent; speed-up vs plain f16 at the same temperature)",
        f"{'draft':<8} {'T':>3} {'accept':>7} {'mean k':>6} {'c':>5} {'measured':>9} {'predicted':>9} "
        f"{'efficiency':>10}",
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['draft']:<8} {r['temperature']:>3g} {r['acceptance']:7.0%} {num_text(r['mean_k'], 6, 2)} "
            f"{r['c']:5.2f} {num_text(r['measured_speedup'], 8, 2)}x {num_text(r['predicted_speedup'], 8, 2)}x "
            f"{num_text(r['efficiency'], 10, 2)}"
        )
    return "\n".join(lines)
