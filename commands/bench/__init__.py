"""`specquant bench`: measure configurations side by side on this machine, honestly.

Configurations run interleaved, prompt by prompt (A B C, A B C, ...), in rotating order, after a warm-up;
every run starts from an empty KV cache; medians with min and max are reported; speed-ups are ratios to
the baseline within the same run. Next to every speculative figure stands the cost model's prediction
from the acceptance, draft cost c and batch cost v(n) measured in the same run (docs/architecture.md §5).

This module is the command (its flags and `main`); configs (what is compared), workloads (the prompt sets
and their scoring), runners (one timed answer), sweep (acceptance against speed-up), run (the interleaved
run), report (tables, report.md, plots), memory (peak memory per configuration, in its own process), anchor
(llama.cpp's own speculative decoding).
"""

from __future__ import annotations

import argparse

from commands.common import MAX_MEMORY_HELP, memory_budget

NAME = "bench"
HELP = "measure configurations side by side (interleaved, medians, ratios)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from runtime.engine.engine import EngineSettings

    engine = EngineSettings()
    p.add_argument("--model", help="model name in the cache")
    p.add_argument("--draft-model", metavar="NAME", help="a smaller converted model of the same vocabulary drafts")
    p.add_argument("--prompts", nargs="+", help="prompt sets (JSON lines with a 'prompt'); default: assets/prompts")
    p.add_argument("--configs", nargs="+", help="tiers, PARENT<-DRAFT[:kN], presets or llama-cpp-python")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="two prompts per set")
    p.add_argument(
        "--allow-exec",
        action="store_true",
        help="add HumanEval: runs model-written code in a subprocess with a timeout",
    )
    p.add_argument("--sweep", action="store_true", help="add the acceptance sweep (q4_k_m/q3_k_m/q2_k drafts, T=0/1)")
    p.add_argument(
        "--sampled",
        action="store_true",
        help="decode at the model's recommended sampling (seeded) instead of greedy; texts are then not compared",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the per-configuration peak-memory runs")
    p.add_argument(
        "--no-quality", action="store_true",
        help="show each tier's quality against F16 only where it was measured before (else it is measured once)",
    )
    p.add_argument("--ctx", type=int, default=engine.n_ctx)
    p.add_argument("--threads", type=int, default=engine.n_threads)
    p.add_argument("--max-memory", type=float, metavar="GB", help=MAX_MEMORY_HELP)
    p.add_argument("--out", help="write results.json into this folder")


def main(args: argparse.Namespace) -> int:
    # The run's modules load only here: the bench's imports (psutil, the converters, plots) stay out of --help.
    from commands.bench.run import main_bench
    from runtime.engine.engine import EngineSettings
    from runtime.plan.placement import PlacementSettings

    main_bench(
        args.model,
        args.configs,
        args.prompts,
        args.max_tokens,
        args.repeats,
        args.quick,
        args.out,
        EngineSettings(
            n_ctx=args.ctx,
            n_threads=args.threads,
            placement=PlacementSettings(max_memory_bytes=memory_budget(args)),
            prompt_store_bytes=0,  # each run reads its prompt: a state saved on disk by an earlier run would not
            draft_model=args.draft_model,
        ),
        with_sweep=args.sweep,
        allow_exec=args.allow_exec,
        memory=not args.no_memory,
        sampled=args.sampled,
        quality=not args.no_quality,
    )
    return 0
