"""The interleaved run itself: configurations × prompts × repeats, the summary, and `specquant bench`."""

from __future__ import annotations

import json
import platform
import resource
import statistics
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

from commands.bench.anchor import ANCHOR, LlamaCppRunner, missing_reason, tool_path
from commands.bench.configs import DEFAULT_CONFIGS, GREEDY, LOOKUP, PLAIN_Q4, STOCK, BenchConfig, parse_config
from commands.bench.followup import FOLLOWUP, bench_followups, format_followups
from commands.bench.frontier import tier_quality
from commands.bench.memory import measure_memory
from commands.bench.multiturn import MULTITURN, bench_multiturn, format_multiturn
from commands.bench.report import format_table, write_plots, write_report
from commands.bench.runners import StockRunner, agreement, batch_costs, rotated, run_engine
from commands.bench.stats import bootstrap, busiest_lookup, cost_cap, end_to_end_cap, ngram_cap
from commands.bench.sweep import format_sweep, predicted_speedup, sweep
from commands.bench.workloads import JSON, TOOLS, load_prompts, score
from converters.convert import ensure_demo
from runtime.decode.controller import NGRAM
from runtime.decode.drafts import offered
from runtime.decode.drafts.tier import KIND as TIER
from runtime.decode.grammar import Grammar
from runtime.engine.engine import Engine
from runtime.errors import UserError
from runtime.machine.resources import Rapl, cpu_seconds


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("specquant", "llama-cpp-python", "gguf", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "unknown"
    return out


def _accuracy(runs: list[dict[str, Any]]) -> float | None:
    graded = [x["correct"] for x in runs if x["correct"] is not None]
    return round(sum(graded) / len(graded), 4) if graded else None


def _sources(runs: list[dict[str, Any]]) -> dict[str, float] | None:
    total = sum(x["tokens"] for x in runs)
    if not total or not any("forced" in x for x in runs):  # llama.cpp's runners do not say
        return None
    names = {"forced": "forced", **{k.accepted_counter: k.name for k in offered()}}
    return {name: round(sum(x.get(key, 0) for x in runs) / total, 4) for key, name in names.items()}


def routing(engine: Engine, prompts: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per workload, the share of prompts the router sends to each level."""
    out: dict[str, dict[str, float]] = {}
    for workload in sorted({p["workload"] for p in prompts}):
        levels = [engine.route(p["prompt"]).level for p in prompts if p["workload"] == workload]
        out[workload] = {lvl: round(levels.count(lvl) / len(levels), 4) for lvl in ("low", "medium", "high")}
    return out


def _parts(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A thinking model's runs: acceptance and decode speed on thought tokens and on answer tokens apart
    (`parts`), over the runs whose answer had a thought; nothing when none had."""
    thought = [x for x in runs if x.get("thinking")]
    if not thought:
        return {}
    out = {}
    for part in ("thinking", "answer"):
        drafted = sum(x[part]["drafted"] for x in thought)
        accepted = sum(x[part]["accepted"] for x in thought)
        out[part] = {
            "tokens": sum(x[part]["tokens"] for x in thought),
            "acceptance": round(accepted / drafted, 4) if drafted else None,
            "tok_per_s": _spread([x[part]["tok_per_s"] for x in thought if x[part]["tok_per_s"]]),
        }
    return {"parts": out}


def _spread(xs: list[float]) -> dict[str, float] | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4)}


def summarize(
    runs: list[dict[str, Any]], configs: list[BenchConfig], baseline: str, costs: dict[str, dict[int, float]],
    quality: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """`summary[workload][config]` from the raw runs; speed-ups pair each run with the baseline's run of the
    same prompt and repeat, and `vs_q4` with plain Q4_K_M's (the `q4_k_m` configuration, where it ran).
    `quality`: each tier's figures against F16 (`tier_quality`), set beside the configurations it answers."""
    summary: dict[str, dict[str, Any]] = {}
    base = {(x["workload"], x["prompt_id"], x["repeat"]): x for x in runs if x["config"] == baseline}
    q4 = {(x["workload"], x["prompt_id"], x["repeat"]): x for x in runs if x["config"] == PLAIN_Q4}
    for workload in sorted({x["workload"] for x in runs}):
        summary[workload] = {}
        for cfg in configs:
            mine = [x for x in runs if x["workload"] == workload and x["config"] == cfg.name]
            if not mine:
                continue
            pairs = [(x, base.get((x["workload"], x["prompt_id"], x["repeat"]))) for x in mine]
            ratios = [a["tok_per_s"] / b["tok_per_s"] for a, b in pairs if b and a["tok_per_s"] and b["tok_per_s"]]
            # The user's numbers, paired the same way: how much sooner the whole answer, and its first token.
            latency = [b["latency_s"] / a["latency_s"] for a, b in pairs if b and a["latency_s"] and b["latency_s"]]
            ttft = [a["ttft_s"] / b["ttft_s"] for a, b in pairs if b and a["ttft_s"] and b["ttft_s"]]
            compared = [x for x in mine if x["matches_baseline"] is not None]
            # The draft tier's own acceptance (lookups are counted apart), for the cost model's cap.
            tier_drafted = sum(x.get(TIER.drafted_counter, 0) for x in mine)
            tier_accepted = sum(x.get(TIER.accepted_counter, 0) for x in mine)
            draft_tier = next((x.get("draft") for x in mine if x.get("draft")), cfg.draft)
            parent_tier = next((x.get("parent") for x in mine if x.get("parent")), cfg.parent)
            drafted = sum(x["drafted"] for x in mine)
            accepted = sum(x["accepted"] for x in mine)
            entry: dict[str, Any] = {
                "tok_per_s": _spread([x["tok_per_s"] for x in mine]),
                "latency_s": _spread([x["latency_s"] for x in mine]),
                "ttft_s": _spread([x["ttft_s"] for x in mine]),
                "speedup_vs_baseline": round(statistics.median(ratios), 4) if ratios else None,
                "latency_speedup_vs_baseline": round(statistics.median(latency), 4) if latency else None,
                "ttft_vs_baseline": round(statistics.median(ttft), 4) if ttft else None,
                # 90% bootstrap intervals over prompts of the three medians above.
                "speedup_ci": bootstrap(ratios),
                "latency_ci": bootstrap(latency),
                "ttft_ci": bootstrap(ttft),
                "acceptance": round(accepted / drafted, 4) if drafted else None,
                "overhead": _spread([x["overhead"] for x in mine]),
                "fidelity": {
                    "exact_match_rate": round(sum(x["matches_baseline"] for x in compared) / len(compared), 4)
                    if compared
                    else None,
                    "token_agreement": round(statistics.mean(x["token_agreement"] for x in compared), 4)
                    if compared
                    else None,
                },
                "accuracy": _accuracy(mine),
                "rss_mb": _spread([x["rss_mb"] for x in mine]),
                # What an answer costs a laptop's battery: CPU time (all threads) and energy per new token.
                "cpu_s_per_token": _spread([x["cpu_s"] / x["tokens"] for x in mine if x["tokens"]]),
                "energy_j_per_token": _spread(
                    [x["energy_j"] / x["tokens"] for x in mine if x["tokens"] and x.get("energy_j") is not None]
                ),
                "predicted_speedup": None,
                # Where the tokens not decoded one by one came from (a grammar's forced tokens, n-gram lookup,
                # the draft tier), as shares of all tokens produced.
                "token_sources": _sources(mine),
                # The grammar's masks and state (a JSON schema's) as a share of the answer's time.
                "grammar_share": _spread([x["grammar_s"] / x["latency_s"] for x in mine if x.get("grammar_s")]),
                **_parts(mine),
            }
            # The cost model's cap for the source that drafted: the tier at its acceptance, else (nothing drafted
            # by the tier) the lookup that drafted most at its own; and the same cap end to end, where the
            # prompt's reading stays.
            tier_a = tier_accepted / tier_drafted if tier_drafted else None
            capped = cost_cap(tier_a, parent_tier or "f16", draft_tier if draft_tier != NGRAM else None, costs)
            source, cap_a = TIER.name, tier_a
            lookup = busiest_lookup(mine)
            if (capped is None or not tier_drafted) and lookup is not None:
                source, cap_a = lookup
                capped = ngram_cap(cap_a, parent_tier or "f16", costs, source)
            if capped is not None and cfg.name != baseline:
                plain = [b for _, b in pairs if b]
                e2e = end_to_end_cap(plain, capped[0])
                entry["cap"] = {
                    "speedup": round(capped[0], 4), "k": capped[1], "acceptance": round(cap_a or 0, 4),
                    "source": source, "end_to_end": round(e2e, 4) if e2e else None,
                }
                if entry["speedup_vs_baseline"] is not None:
                    entry["efficiency"] = round(entry["speedup_vs_baseline"] / capped[0], 4)
                if entry["latency_speedup_vs_baseline"] is not None and e2e:
                    entry["latency_efficiency"] = round(entry["latency_speedup_vs_baseline"] / e2e, 4)
            cycles = sum(x.get("cycles", 0) for x in mine)  # llama.cpp's tool does not say
            if cfg.draft and drafted and cycles and cfg.parent in costs and cfg.draft in costs:
                v = {n: t / costs[cfg.parent][1] for n, t in costs[cfg.parent].items()}
                c = costs[cfg.draft][1] / costs[cfg.parent][1]
                entry["predicted_speedup"] = round(predicted_speedup(accepted / drafted, drafted / cycles, c, v), 4)
            # Against what people run instead (#61): plain Q4_K_M, paired the same way, end to end.
            vs_q4 = [q["latency_s"] / a["latency_s"] for a, q in
                     ((x, q4.get((x["workload"], x["prompt_id"], x["repeat"]))) for x in mine)
                     if q and a["latency_s"] and q["latency_s"]]
            entry["vs_q4"] = round(statistics.median(vs_q4), 4) if vs_q4 else None
            entry["vs_q4_ci"] = bootstrap(vs_q4)
            entry["vs_q4_min"] = round(min(vs_q4), 4) if vs_q4 else None
            if quality and parent_tier in quality:  # what the parent's words are worth, beside its speed
                entry["quality"] = {"tier": parent_tier, **quality[parent_tier]}
            summary[workload][cfg.name] = entry
    return summary


def bench(
    engine: Engine,
    configs: list[BenchConfig],
    prompts: list[dict[str, str]],
    max_tokens: int = 128,
    repeats: int = 1,
    log=print,
    memory: bool = True,
    sampled: bool = False,
    quality: bool = True,
) -> dict[str, Any]:
    """Run every configuration on every prompt, interleaved; then (with `memory`) each configuration once
    more in a process of its own, for its peak resident memory beside the plan's estimate. `sampled`: the
    model's recommended sampling with a fixed seed instead of greedy (speed ratios only: texts differ).
    `quality`: measure each tier's figures against F16 where none are saved (else only saved ones are shown)."""
    baseline = configs[0].name
    sampling = None if sampled else GREEDY
    if sampled and any(c.stock for c in configs):
        raise UserError(f"--sampled: {STOCK}, {LOOKUP} and {ANCHOR} configurations run greedy only; leave them out")
    # Checked against the configurations as asked: an anchor skipped for not being built is still refused here.
    grammars = {id(p): Grammar.from_json_schema(p["schema"]) for p in prompts if p.get("schema") is not None}
    if (grammars or any(p.get("tools") for p in prompts)) and any(c.stock for c in configs):
        raise UserError(f"the {JSON} and {TOOLS} workloads answer under a grammar (a JSON schema, tool calls), "
                        f"which {STOCK}, {LOOKUP} and {ANCHOR} configurations cannot: leave them out")
    skipped: dict[str, str] = {}
    tool = tool_path()
    if tool is None and any(c.anchor for c in configs):
        for c in configs:
            if c.anchor:
                skipped[c.name] = missing_reason()
                log(f"skipping {c.name}: {skipped[c.name]}")
        configs = [c for c in configs if not c.anchor]
    stock: dict[str, Any] = {
        c.name: LlamaCppRunner(engine, c.k or 4, tool) if c.anchor and tool else StockRunner(engine, c.parent, c.lookup)
        for c in configs
        if c.stock
    }


    def run(cfg: BenchConfig, p: dict[str, Any], n: int) -> dict[str, Any]:
        if cfg.stock:
            return stock[cfg.name].run(p["prompt"], n)
        return run_engine(engine, cfg, p["prompt"], n, sampling, grammars.get(id(p)), p.get("tools"))

    if any(c.preset == "auto" for c in configs) and not engine.calibrated:
        # The default as users get it once measured: the machine's calibration first (once per model; cached).
        log("measuring this machine's presets for the default (auto), once")
        engine.calibration()
    for cfg in configs:  # warm-up: load every tier, touch its pages
        run(cfg, prompts[0], 8)
    rapl = Rapl()
    runs: list[dict[str, Any]] = []
    total = repeats * len(prompts) * len(configs)
    started = time.perf_counter()
    interrupted = False
    try:
        for r in range(repeats):
            for i, p in enumerate(prompts):
                for cfg in rotated(configs, r * len(prompts) + i):
                    cpu0, energy0 = cpu_seconds(), rapl.read()
                    rec = run(cfg, p, max_tokens)
                    rec["cpu_s"] = round(cpu_seconds() - cpu0, 3)
                    rec["energy_j"] = rapl.joules_since(energy0)
                    rec.update({"workload": p["workload"], "prompt_id": p["id"], "config": cfg.name, "repeat": r})
                    rec["correct"] = score(p, rec["text"], rec.get("calls"))
                    rec["rss_mb"] = round(psutil.Process().memory_info().rss / 1e6, 1)
                    runs.append(rec)
                    acc = f" acc {rec['acceptance']:.2f}" if rec["acceptance"] is not None else ""
                    for part in ("thinking", "answer") if rec.get("thinking") else ():  # a thinking model's
                        a, t = rec[part]["acceptance"], rec[part]["tok_per_s"]
                        acc += f" | {part} {t:.1f} tok/s" + (f" acc {a:.2f}" if a is not None else "")
                    tps = f"{rec['tok_per_s']:6.1f}" if rec["tok_per_s"] is not None else "     -"
                    eta = (time.perf_counter() - started) / len(runs) * (total - len(runs))
                    log(
                        f"[{len(runs)}/{total} ETA {int(eta // 60)}:{int(eta % 60):02d}] "
                        f"{p['workload']}/{p['id']} {cfg.name:<18} {tps} tok/s{acc}"
                    )
    except KeyboardInterrupt:
        # Stop cleanly: summarize and write what was measured.
        interrupted = True
        log(f"interrupted after {len(runs)} of {total} runs; summarizing what was measured")
    base = {(x["workload"], x["prompt_id"], x["repeat"]): x for x in runs if x["config"] == baseline}
    for x in runs:
        ref = base.get((x["workload"], x["prompt_id"], x["repeat"]))
        x["matches_baseline"] = None if ref is None or sampled else x["text"] == ref["text"]
        x["token_agreement"] = None if ref is None or sampled else agreement(x["token_ids"], ref["token_ids"])

    # Every tier that answered or drafted (a preset's pair is known only from its runs), for v(n) and c.
    used = {x.get(key) for x in runs for key in ("parent", "draft")}
    tiers = sorted(({t for c in configs for t in (c.parent, c.draft)} | used | {"f16"}) - {None, NGRAM})
    n_max = 1 + max([c.k or engine.settings.spec.k_max for c in configs if c.draft or c.preset], default=4)
    costs = {} if interrupted else batch_costs({t: engine.backend(t) for t in tiers}, n_max)
    figures = None if interrupted else tier_quality(engine.model, measure=quality, log=log)
    summary = summarize(runs, configs, baseline, costs, figures)
    peaks: dict[str, dict[str, Any]] = {}
    if memory and not interrupted:
        for cfg in configs:
            if cfg.anchor:  # its own process already: the largest peak of its runs
                mine = [x["peak_memory"] for x in runs if x["config"] == cfg.name]
                peaks[cfg.name] = max(mine, key=lambda m: m["total_mb"]) if mine else {"error": "no run"}
            if cfg.stock:
                continue
            log(f"memory: {cfg.name} in a process of its own")
            peaks[cfg.name] = measure_memory(
                engine.model.root, engine.model.name, engine.settings, cfg.name, prompts[0]["prompt"], max_tokens
            )
    from runtime.machine.hardware import inventory

    return {
        "machine": inventory().as_dict() | {"platform": platform.platform()},
        "versions": _versions(),
        "model": engine.manifest,
        "baseline": baseline,
        "reference": PLAIN_Q4 if any(c.name == PLAIN_Q4 for c in configs) else None,
        "quality": figures,
        "configs": [
            {"name": c.name, "parent": c.parent, "draft": c.draft, "k": c.k, "preset": c.preset} for c in configs
        ],
        "max_tokens": max_tokens,
        "sampling": "the model's recommendation, seeded" if sampled else "greedy",
        "batch_cost_ms": costs,
        "runs": runs,
        "summary": summary,
        "routing": routing(engine, prompts),
        "interrupted": interrupted,
        "energy": "RAPL package counters" if rapl.available else rapl.reason,
        "memory": peaks,
        "skipped": skipped,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3, 1),
    }


def main_bench(
    model: str | None,
    config_names: list[str] | None,
    prompt_files: list[str] | None,
    max_tokens: int,
    repeats: int,
    quick: bool,
    out_dir: str | None,
    engine_settings=None,
    with_sweep: bool = False,
    allow_exec: bool = False,
    memory: bool = True,
    sampled: bool = False,
    quality: bool = True,
) -> dict[str, Any]:
    configs = [parse_config(n) for n in (config_names or DEFAULT_CONFIGS)]
    prompts = load_prompts(prompt_files, quick, allow_exec)
    if max_tokens < 1 or repeats < 1:
        raise UserError("--max-tokens and --repeats must be at least 1")
    if model is None:
        ensure_demo()  # a fresh machine benchmarks the demo, once its inputs are known to be good
    log = lambda m: print(m, flush=True)  # noqa: E731
    # Conversations on the same documents (first question, follow-up, new question) run on engines of their own
    followups = [p for p in prompts if p["kind"] == FOLLOWUP]
    # Conversations that edit, loop and quote (each answer may draft from everything said before it): the same
    multiturn = [p for p in prompts if p["kind"] == MULTITURN]
    prompts = [p for p in prompts if p["kind"] not in (FOLLOWUP, MULTITURN)]
    result: dict[str, Any] = {}
    if prompts:
        engine = Engine(model, engine_settings)
        try:
            result = bench(
                engine, configs, prompts, max_tokens, repeats, log, memory=memory, sampled=sampled, quality=quality
            )
            if with_sweep:
                result["sweep"] = sweep(engine, prompts, max_tokens, log=log)
        finally:
            engine.close()
    if followups:
        config = next((c for c in configs if not c.stock), None)
        if config is None:
            raise UserError("the followup workload runs on SpecQuant's engine: name a tier or preset in --configs")
        result["followup"] = bench_followups(
            model, engine_settings, config, [{**p["conversation"], "id": p["id"]} for p in followups],
            max_tokens, repeats, log,
        )
    if multiturn:
        config = next((c for c in configs if not c.stock), None)
        if config is None:
            raise UserError("the multiturn workload runs on SpecQuant's engine: name a tier or preset in --configs")
        result["multiturn"] = bench_multiturn(
            model, engine_settings, config, [{"turns": p["turns"], "id": p["id"]} for p in multiturn],
            max_tokens, repeats, log,
        )
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(result, indent=2, default=str))
        if "summary" in result:
            write_report(result, out / "report.md")
            write_plots(result, out)
    if "summary" in result:
        print(format_table(result))
    if "followup" in result:
        print(format_followups(result["followup"]))
    if "multiturn" in result:
        print(format_multiturn(result["multiturn"]))
    if with_sweep:
        print(format_sweep(result["sweep"]))
    return result
