"""Measure a tool round trip (#43): a real MCP server over stdio (tests/mcp_server.py --only add), one call,
its result and the final answer, end to end, with the default speculation against plain F16 decoding, in
alternating order; and round two's time to first token against a cold prompt of the same tokens.

    python scripts/measure_tool_loop.py --model qwen-coder-1.5b --repeats 3

Prints one JSON object (medians and each run)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from runtime.chat.toolbox import McpToolbox
from runtime.engine.answer import Chunk
from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.options import ChatOptions
from runtime.engine.tool_loop import CallFinished, LoopFinished, run_tool_loop
from runtime.mcp import ApprovalPolicy, McpHost, ServerConfig

SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "mcp_server.py")
ASK = [{"role": "user", "content": "What is 1234 plus 5678? Use the add tool, then answer in one sentence."}]


def one_turn(engine: Engine, box: McpToolbox, options: ChatOptions, key: str, first: str = "required") -> dict:
    options = replace(options, cache_key=key)  # a fresh KV cache: each turn starts cold, as a new chat does
    started = time.perf_counter()
    end, calls = None, []
    for event in run_tool_loop(engine.stream_chat, ASK, options, box, box.approve, first_choice=first):
        if isinstance(event, CallFinished):
            calls.append(event.result.text)
        if isinstance(event, LoopFinished):
            end = event
    total = time.perf_counter() - started
    assert end is not None
    rounds = [c.stats for c in end.round_stats]
    return {
        "e2e_s": total, "rounds": end.rounds, "calls": calls, "answer": end.messages[-1]["content"],
        "forced": [s.forced for s in rounds], "tokens": [s.tokens for s in rounds],
        "drafted": [s.drafted for s in rounds], "accepted": [s.accepted for s in rounds],
        "cycles": [s.cycles for s in rounds], "ttft_s": [s.ttft_s for s in rounds],
        "prompt_tokens": [s.prompt_tokens for s in rounds], "reused": [s.reused_tokens for s in rounds],
        "messages": end.messages,
    }


def cold_ttft(engine: Engine, messages: list, options: ChatOptions, key: str) -> float:
    """Time to first token of the same chat read from an empty cache (one token asked)."""
    chunks: list[Chunk] = list(engine.stream_chat(messages, replace(options, max_tokens=1, cache_key=key)))
    return chunks[-1].stats.ttft_s


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--first-choice", default="required", choices=("auto", "required"))
    args = p.parse_args()
    engine = Engine(args.model, EngineSettings(n_threads=args.threads))
    host = McpHost([ServerConfig("calc", command=sys.executable, args=(SERVER, "--only", "add"))])
    box = McpToolbox(host, ApprovalPolicy("all"))
    greedy = ChatOptions(max_tokens=96, sampling_overrides=(("temperature", 0.0),))
    configs = {"default": greedy, "plain_f16": replace(greedy, parent="f16", no_spec=True)}
    runs: dict[str, list] = {k: [] for k in configs}
    # The first turn loads the tiers, measures the machine and compiles the grammar.
    one_turn(engine, box, greedy, "warm", args.first_choice)
    n = 0
    for r in range(args.repeats):
        for name in (list(configs) if r % 2 == 0 else list(reversed(configs))):
            n += 1
            turn = one_turn(engine, box, configs[name], f"run{n}", args.first_choice)
            if turn["rounds"] >= 2:
                # Round two's prompt, read cold: everything before the final answer.
                turn["cold_ttft_s"] = cold_ttft(engine, turn["messages"][:-1], configs[name], f"cold{n}")
            turn.pop("messages")
            runs[name].append(turn)
    host.close()
    out: dict = {"model": engine.model.name, "runs": runs}
    for name, rs in runs.items():
        out[name] = {
            "e2e_s": statistics.median(x["e2e_s"] for x in rs),
            "round2_ttft_s": statistics.median(x["ttft_s"][1] for x in rs if x["rounds"] >= 2),
            "cold_ttft_s": statistics.median(x["cold_ttft_s"] for x in rs if "cold_ttft_s" in x),
        }
        out[name]["round2_over_cold"] = out[name]["round2_ttft_s"] / out[name]["cold_ttft_s"]
    pairs = [p["e2e_s"] / d["e2e_s"] for d, p in zip(runs["default"], runs["plain_f16"], strict=True)]
    out["speedup_e2e_median"] = statistics.median(pairs)
    out["speedup_e2e_each"] = pairs
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
