"""Compare llama-cpp-python builds (e.g. OpenMP against ggml's own threadpool, llamafile's sgemm on or off)
on one machine, interleaved: each round runs every build once, in rotating order, in a process of its own.

Per build and round: the machine's costs (runtime.decode.machine_costs: a plain F16 step, v(n), c of the Q4_K_M
draft), then
plain F16 and the default (F16-exact with the controller) on the same prompts, end to end. Medians over
rounds; ratios are paired within a round. Each build is a folder holding an installed llama_cpp package
(`pip install --no-deps --target DIR WHEEL`), or "installed" for the one in this environment; "@VARIANT"
after either pins a CPU kernel variant of a portable build (e.g. `installed@haswell`: the AVX2 kernels).

    python scripts/measure_builds.py --model qwen-coder-1.5b --builds installed /tmp/builds/noomp \
        --rounds 3 --prompts 2 --max-tokens 96
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROMPT_SETS = ("code", "alpaca")


def child(model: str, prompts: list[str], max_tokens: int) -> dict:
    """One build's round, in this process: costs, then each prompt plain and with the default."""
    import llama_cpp

    from runtime.decode.sampling import SamplingParams
    from runtime.engine.engine import ChatOptions, Engine
    from runtime.machine.hardware import ensure_backends

    engine = Engine(model)
    try:
        # Measured now, by this build, and kept as the engine's costs for the answers below (not another build's).
        costs, _ = engine.costs("f16", ("q4_k_m",), refresh=True)
        out = {
            "llama_cpp": llama_cpp.__file__,
            "kernels": ensure_backends().variant,
            "costs": costs.as_dict(),
            "answers": [],
        }
        greedy = SamplingParams()
        for prompt in prompts:
            for name, options in (
                ("f16", ChatOptions(draft="none", max_tokens=max_tokens, sampling=greedy)),
                ("default", ChatOptions(max_tokens=max_tokens, sampling=greedy)),
            ):
                engine.reset_caches()
                s = engine.chat([{"role": "user", "content": prompt}], options).last.stats
                out["answers"].append(
                    {"config": name, "prompt": prompt, "latency_s": s.elapsed_s, "ttft_s": s.ttft_s,
                     "tok_per_s": s.tok_per_s, "tokens": s.tokens, "acceptance": s.acceptance}
                )
        return out
    finally:
        engine.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen-coder-1.5b")
    ap.add_argument("--builds", nargs="+", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per set (code, alpaca)")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help="write every measurement as JSON here")
    args = ap.parse_args()
    prompts = []
    for name in PROMPT_SETS:
        lines = (REPO / "assets" / "prompts" / f"{name}.jsonl").read_text().splitlines()
        prompts += [json.loads(line)["prompt"] for line in lines[: args.prompts]]
    if args.child:
        print(json.dumps(child(args.model, prompts, args.max_tokens)))
        return
    results: dict[str, list[dict]] = {b: [] for b in args.builds}
    for r in range(args.rounds):
        order = args.builds[r % len(args.builds) :] + args.builds[: r % len(args.builds)]
        for build in order:
            env = dict(os.environ)
            folder, _, variant = build.partition("@")
            if folder != "installed":
                env["PYTHONPATH"] = os.pathsep.join([folder, str(REPO)])
            if variant:
                env["SPECQUANT_CPU_VARIANT"] = variant
            cmd = [sys.executable, __file__, "--child", build, "--model", args.model,
                   "--prompts", str(args.prompts), "--max-tokens", str(args.max_tokens), "--builds", build]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, check=True)
            rec = json.loads(done.stdout.strip().splitlines()[-1])
            results[build].append(rec)
            c = rec["costs"]
            print(f"round {r + 1} {build}: step {c['step_s'] * 1000:.0f} ms, v(2) {c['v']['2']:.2f}, "
                  f"v(4) {c['v']['4']:.2f}, v(8) {c['v']['8']:.2f}, v(16) {c['v']['16']:.2f}, "
                  f"c {c['c']['q4_k_m']:.2f}, cap {c['caps']['q4_k_m']['cap']:.2f}", flush=True)
    base = args.builds[0]
    print(f"\nmedians over {args.rounds} rounds; ratios against {base} paired by round and prompt")
    for build, recs in results.items():
        step = statistics.median(r["costs"]["step_s"] for r in recs)
        v = {n: statistics.median(r["costs"]["v"][n] for r in recs) for n in ("2", "4", "8", "16")}
        plain, default = [], []
        for rec, ref in zip(recs, results[base], strict=True):
            for a, b in zip(rec["answers"], ref["answers"], strict=True):
                (plain if a["config"] == "f16" else default).append(b["latency_s"] / a["latency_s"])
        within = [
            p["latency_s"] / d["latency_s"]
            for rec in recs
            for p, d in zip(rec["answers"][::2], rec["answers"][1::2], strict=True)
        ]
        print(f"{build}: kernels {recs[0]['kernels']}, step {step * 1000:.0f} ms, "
              + ", ".join(f"v({n}) {x:.2f}" for n, x in v.items())
              + f", c {statistics.median(r['costs']['c']['q4_k_m'] for r in recs):.2f}, "
              f"cap {statistics.median(r['costs']['caps']['q4_k_m']['cap'] for r in recs):.2f}; "
              f"end to end vs {base}: plain F16 {statistics.median(plain):.2f}x, default "
              f"{statistics.median(default):.2f}x; default over plain in this build {statistics.median(within):.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
